"""The live torch 2.13.0 -> 2.14.1 upgrade diff: variants per version, affected, selected, and
with --run / --validate the runs on both versions with wall times.

    .venv/bin/python benchmarks/upgrade_diff.py --run [--validate] [--specs PATH]... \
        [--name upgrade_diff] [--jobs 2]

Runs `spyre-ci upgrade-diff --from 2.13.0 --to 2.14.1 ...` (environments are provisioned
into, or reused from, the cache) and records `benchmarks/results/<name>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="old", default="2.13.0")
    parser.add_argument("--to", dest="new", default="2.14.1")
    parser.add_argument("--run", action="store_true")
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--specs", action="append", default=[])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--test-timeout",
        type=float,
        default=120.0,
        help="per-test limit (the bundled specs' own timeout_s is 120)",
    )
    parser.add_argument("--name", default="upgrade_diff")
    parser.add_argument("--notes", default="")
    parser.add_argument("--out", type=Path, help="keep the run's output here")
    parser.add_argument(
        "--sample-ops",
        type=int,
        default=0,
        metavar="N",
        help="instead of --specs: a spec like suites/specs/ops.yaml over N "
        "op_db subjects drawn at random (seeded) from both committed "
        "Inventories, for a --validate that fits the time at hand",
    )
    parser.add_argument("--sample-seed", default="upgrade-validate")
    parser.add_argument(
        "--replay-seeds",
        type=int,
        default=50,
        metavar="N",
        help="with --validate: score the selection with and without canaries "
        "for N holdout seeds against the full run's outcomes (default 50)",
    )
    args = parser.parse_args()
    sampled: list[str] = []
    if args.sample_ops:
        spec, sampled = sample_spec(args.sample_ops, args.sample_seed)
        args.specs = [str(spec)]

    out = args.out or Path(tempfile.mkdtemp(prefix="upgrade-bench-"))
    command = [
        sys.executable,
        "-m",
        "workflows",
        "upgrade-diff",
        "--from",
        args.old,
        "--to",
        args.new,
        "--out",
        str(out),
        "--jobs",
        str(args.jobs),
        "--no-progress",
        "--test-timeout",
        str(args.test_timeout),
    ]
    for spec in args.specs:
        command += ["--specs", spec]
    if args.run:
        command.append("--run")
    if args.validate:
        command.append("--validate")
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        return done.returncode
    print(done.stdout)
    data = json.loads((out / "upgrade.json").read_text(encoding="utf-8"))
    sel = data["selection"]
    common = len(set(_ids(data["from_inventory"])) & set(_ids(data["to_inventory"])))
    record: dict[str, object] = {
        "name": args.name,
        "value": round(100 * sel["share"], 2),
        "unit": "% of the new version's runnable variants selected (incl. canaries, holdout)",
        "command": "  ".join(
            [
                ".venv/bin/python benchmarks/upgrade_diff.py",
                *(["--run"] if args.run else []),
                *(["--validate"] if args.validate else []),
                *(
                    [f"--sample-ops {args.sample_ops} --sample-seed {args.sample_seed}"]
                    if args.sample_ops
                    else [f"--specs {shlex.quote(s)}" for s in args.specs]
                ),
                f"--jobs {args.jobs}",
                f"--test-timeout {args.test_timeout:g}",
                f"--name {args.name}",
            ]
        ).replace("  ", " "),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}; shared with other work",
        "notes": args.notes,
        "from_version": data["from_version"],
        "to_version": data["to_version"],
        "variants_from": data["variants_from"],
        "variants_to": data["variants_to"],
        "common_variants": common,
        "affected": data["affected"],
        "changed": len(data["changed"]),
        "added": len(data["added"]),
        "removed": len(data["removed"]),
        "changed_by_what": data["changed_by_what"],
        "fingerprint_only_changes_ignored": len(data["fingerprint_only_changes_ignored"]),
        "api": {k: len(v) for k, v in data["api"].items()},
        "selected": sel["selected"],
        "canary": sel.get("canary", 0),
        "holdout": sel["holdout"],
        "runnable_to": sel["runnable_to"],
        "share": sel["share"],
        "details_used": data["details_used"],
        "diff_notes": data["notes"],
        "timings_s": data.get("timings", {}),
        "command_wall_s": round(wall, 1),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    if sampled:
        record["sampled_ops"] = sampled
    if "run" in data:
        run = data["run"]
        record["run"] = {
            "from": run["from"],
            "to": run["to"],
            "categories": run["categories"],
            "unchanged_passing": run["unchanged_passing"],
            "expansion": run.get("expansion"),
            "regressed_ids": [r["id"] for r in run["rows"] if r["category"] == "regressed"][:50],
        }
    if "validate" in data:
        val = dict(data["validate"])
        val["missed_ids"] = val["missed_ids"][:50]
        record["validate"] = val
        # The aim: no outcome change missed while running at most 20 % of variants.
        record["aim"] = {
            "missed": val["missed"],
            "share_ran": val["share_ran"],
            "met": val["missed"] == 0 and val["share_ran"] <= 0.20,
        }
        record["replay"] = replay_seeds(out, data, args.replay_seeds)
    path = ROOT / "benchmarks" / "results" / f"{args.name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"recorded {path}")
    return 0


def replay_seeds(out: Path, data: dict[str, object], seeds: int) -> dict[str, object]:
    """The full run's outcomes score other selections: canaries on and off, `seeds` holdout
    seeds each (`selector.upgrade.replay`; nothing runs again)."""
    from selector.upgrade import diff_inventories, replay, select_upgrade
    from workflows.drivers.upgrade import (
        details_path_for,
        load_details,
        load_inventory,
        recorded_outcomes,
    )

    paths = [str(data["from_inventory"]), str(data["to_inventory"])]
    old, new = (load_inventory(p) for p in paths)
    d_old, d_new = (load_details(details_path_for(p)) for p in paths)
    diff = diff_inventories(old, new, d_old, d_new)
    full = []
    for side in ("from", "to"):
        outcomes = {}
        for part in (side, f"expand-{side}", f"validate-{side}"):
            outcomes.update(recorded_outcomes(out / "work" / part))
        full.append(outcomes)
    result: dict[str, object] = {"seeds": seeds}
    for canaries in (True, False):
        scores = [
            replay(
                diff,
                select_upgrade(diff, old, new, seed=f"replay-{i}", canaries=canaries),
                old,
                new,
                full[0],
                full[1],
            )
            for i in range(seeds)
        ]
        result["with_canaries" if canaries else "without_canaries"] = {
            "seeds_missing_nothing": sum(1 for s in scores if s["missed"] == 0),
            "missed_mean": round(sum(s["missed"] for s in scores) / seeds, 2),
            "missed_max": max(s["missed"] for s in scores),
            "share_ran_mean": round(sum(s["share_ran"] for s in scores) / seeds, 4),
            "outcome_changes": scores[0]["outcome_changes"],
        }
    return result


TEMPLATES = (
    "compare_cpu",
    "out",
    "noncontiguous_samples",
    "variant_consistency_eager",
    "backward",
    "errors",
)


def sample_spec(n: int, seed: str) -> tuple[Path, list[str]]:
    """A temporary ops spec over `n` seeded-random op_db subjects of either version."""
    import random

    subjects: set[str] = set()
    for version in ("2.13.0", "2.14.1"):
        path = ROOT / "tests" / "fixtures" / f"inventory-{version}.json.gz"
        subjects |= {
            i.split("::")[2]
            for i in _ids(str(path))
            if i.startswith("ops::") and not i.split("::")[2].startswith("_refs.")
        }
    chosen = sorted(random.Random(seed).sample(sorted(subjects), n))
    # A stable place: a rerun of the same sample reuses the cached Inventories.
    folder = Path(tempfile.gettempdir()) / f"upgrade-sample-{n}-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    expectations = ROOT / "suites" / "specs" / "ops.expectations.yaml"
    (folder / "ops.expectations.yaml").write_text(
        expectations.read_text(encoding="utf-8"), encoding="utf-8"
    )
    include = "\n".join(f"          - {{name: {json.dumps(name)}}}" for name in chosen)
    spec = folder / "ops.yaml"
    spec.write_text(
        "test_suite_config:\n  version: 1\n  name: ops\n  timeout_s: 120\n  opinfo:\n"
        "    - db: op_db\n"
        f"      templates: [{', '.join(TEMPLATES)}]\n"
        "      dtypes: [float32, float16, bfloat16]\n      opinfo_decorators: true\n"
        "      max_samples: 8\n      unlisted_test_mode: mandatory_success\n"
        "      expectations_file: ops.expectations.yaml\n"
        f"      ops:\n        include:\n{include}\n",
        encoding="utf-8",
    )
    return spec, chosen


def _ids(path: str) -> list[str]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [v["id"] for v in json.load(fh)["variants"]]


if __name__ == "__main__":
    raise SystemExit(main())
