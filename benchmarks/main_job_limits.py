"""The README's main job against its limit and against `pytest -n 2`, side by side in one run.

    .venv/bin/python benchmarks/main_job_limits.py [--repeat 3] [--jobs 2] [--out FILE]
        [--holdout SHARE]

The main job is the README's first command, `spyre-ci run --diff
examples/changes/glu_batch_check.patch` (exit 1: the edit breaks 14 variants), in one fresh
state directory, with the defaults (shared warm runner on, the shipped trace, the bundled
Inventory, the default holdout):
* run 1 starts with no zygote (the first run in a state directory); runs 2..N are the same
  change again, each a new `spyre-ci` process (what a second push of it, or a re-run, costs);
* its **limit**: the sum of every test body it ran (the JUnit `time` of each test case: the
  shards, selected and holdout, the reruns and the A/B base runs) divided by the cores
  (`--jobs`): what the tests alone would take, perfectly spread; and its **floor**, the
  larger of the limit and the longest chain (one variant's first run, rerun and A/B base
  bodies, which can only run one after another): no schedule of these tests ends sooner;
* where each run's wall time went (`phases_s`, from its files): before its first test
  process, the test processes, after the last one;
* the same change again with `SPYRE_CI_WARM_CLI=0`, `--repeat` times: each run in a process
  of its own rather than forked from the warm `spyre-ci` process (`workflows.cli.warm_cli`),
  what the warm command line saves, measured beside it;
* `pytest -n JOBS -p suites.pytest_plugin --spyre-ids` over the ids the run ran (its
  `run.json` results), what a user without spyre-ci would run: cold (its own processes, its
  own collection), `--repeat` times.
Medians; the load average is recorded with every run (the machine is shared), and the
machine's CPU and speed probe with the record (`benchmarks/machine.py`).
Records `benchmarks/results/main_job_limits.json` (the record it replaces under `before`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import machine  # noqa: E402 - run as a script from the checkout

RESULT = REPO / "benchmarks" / "results" / "main_job_limits.json"
PATCH = REPO / "examples" / "changes" / "glu_batch_check.patch"
PLUGIN = "suites.pytest_plugin"


def bodies_s(out: Path) -> tuple[float, int, float]:
    """The sum of the test bodies a run ran (every JUnit file of its out directory), how
    many test cases that is, and its longest chain: the most time one variant's bodies take
    (its first run, its rerun, its A/B base run, which can only run one after another). No
    schedule on any number of cores ends before the longest chain does."""
    total, cases = 0.0, 0
    chains: dict[str, float] = {}
    for path in sorted((out / "junit").glob("*.xml")):
        for case in ET.parse(path).getroot().iter("testcase"):
            seconds = float(case.get("time") or 0.0)
            total += seconds
            cases += 1
            name = case.get("name") or ""
            chains[name] = chains.get(name, 0.0) + seconds
    return total, cases, max(chains.values(), default=0.0)


def phases_s(out: Path, started: float) -> dict[str, float]:
    """Where a run's wall time went, from its files: from the command's start to its first
    test process (`before_tests`: the process, the request, the plan), the test processes
    (the first one started to the last JUnit file written: shards, reruns, A/B base), and
    after them (the verdict's records, report and exports: `run.json` written)."""
    work = out / "work"
    starts = [float(p.read_text()) for p in work.glob("*/*/started_at")]
    ends = [p.stat().st_mtime for p in work.glob("*/*/*.xml")]
    record = (out / "run.json").stat().st_mtime
    if not starts or not ends:
        return {}
    return {
        "before_tests": round(min(starts) - started, 3),
        "tests": round(max(ends) - min(starts), 3),
        "after_tests": round(record - max(ends), 3),
    }


def main_job(
    env: dict[str, str], out: Path, holdout: str | None = None, *, warm_cli: bool = True
) -> dict[str, Any]:
    command = [sys.executable, "-m", "workflows", "run", "--diff", str(PATCH), "--out", str(out)]
    if holdout is not None:
        command += ["--holdout", holdout]
    if not warm_cli:
        env = {**env, "SPYRE_CI_WARM_CLI": "0"}
    started, wall_clock = time.perf_counter(), time.time()
    done = subprocess.run(
        [*command, "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 1:  # the glu edit breaks 14 variants: exit 1
        raise SystemExit(f"spyre-ci run exited {done.returncode}:\n{done.stderr[-3000:]}")
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    body, cases, chain = bodies_s(out)
    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    return {
        "wall_s": round(wall, 2),
        "bodies_s": round(body, 2),
        "longest_chain_s": round(chain, 3),
        "phases_s": phases_s(out, wall_clock),
        "test_cases": cases,
        "results": len(record["results"]),
        "selected": plan["totals"]["selected"],
        "holdout": plan["totals"]["holdout"],
        "ids": sorted(r["id"] for r in record["results"]),
        "load": machine.load(),
    }


def xdist(work: Path, ids: list[str], jobs: int, env: dict[str, str]) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="xdist-", dir=work))
    (folder / "ids.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    command = [
        sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(folder),
        "-p", PLUGIN, "-p", "no:cacheprovider", "-q", "-n", str(jobs),
        "--spyre-ids", str(folder / "ids.txt"),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"pytest -n {jobs} exited {done.returncode}:\n{done.stdout[-3000:]}")
    return {"wall_s": round(wall, 2), "exit_code": done.returncode, "load": machine.load()}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs after the first, and xdist's")
    parser.add_argument("--jobs", type=int, default=2, help="cores the limit divides by")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument(
        "--holdout",
        metavar="SHARE",
        help="pass `--holdout SHARE` to the main job (given, that share runs whatever it "
        "costs: 0.02 is the job as it was before the holdout was bounded); default: the "
        "run's own default",
    )
    args = parser.parse_args()
    if args.repeat < 1 or args.jobs < 1:
        parser.error("--repeat and --jobs must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-main-job-"))
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(work / "state"),
        "SPYRE_CI_WARM_DIR": str(work / "warm"),
        # The first run makes the kept trace (workflows.tracing.traces), as a new user's does.
        "SPYRE_CI_CACHE_DIR": str(work / "cache"),
    }
    machine_before = machine.describe()  # the CPU and its speed probe, before the runs
    try:
        runs = [main_job(env, work / f"out-{i}", args.holdout) for i in range(args.repeat + 1)]
        for i, run in enumerate(runs):
            print(f"main job {i + 1}: {run['wall_s']} s ({run['load']})", file=sys.stderr)
        own = [
            main_job(env, work / f"own-{i}", args.holdout, warm_cli=False)
            for i in range(args.repeat)
        ]
        print(f"in its own process: {[r['wall_s'] for r in own]}", file=sys.stderr)
        ids = runs[0]["ids"]
        theirs = [xdist(work, ids, args.jobs, env) for _ in range(args.repeat)]
        print(f"pytest -n {args.jobs}: {[t['wall_s'] for t in theirs]}", file=sys.stderr)
    finally:
        from workflows.runner import warm_share

        warm_share.stop_every(work / "warm")
    first, again = runs[0], runs[1:]
    again_s = statistics.median(r["wall_s"] for r in again)
    own_s = statistics.median(r["wall_s"] for r in own)
    limit = statistics.median(r["bodies_s"] for r in runs) / args.jobs
    # No schedule beats the longest chain either: the floor is the larger of the two.
    floor = max(limit, statistics.median(r["longest_chain_s"] for r in again))
    xdist_s = statistics.median(t["wall_s"] for t in theirs)
    result = {
        "name": "main_job_limits",
        "what": "the README's main job (glu edit) against its limit (test bodies / cores, the "
        "holdout, reruns and A/B base included) and against pytest -n JOBS on the ids it ran",
        "command": f".venv/bin/python benchmarks/main_job_limits.py --repeat {args.repeat} "
        f"--jobs {args.jobs}" + (f" --holdout {args.holdout}" if args.holdout else ""),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            **machine_before,
            "load_after": machine.load(),
            "probe_after_s": machine.probe_s(),
        },
        "value": round(again_s, 2),
        "unit": "s, median wall time of the main job run again (a new spyre-ci process, forked "
        "from the warm spyre-ci process; again_own_process_s: with SPYRE_CI_WARM_CLI=0)",
        "first_run_s": first["wall_s"],
        "again_s": round(again_s, 2),
        "again_own_process_s": round(own_s, 2),
        "limit_s": round(limit, 2),
        "floor_s": round(floor, 2),
        "floor_note": "the larger of the limit and the longest chain (one variant's bodies: "
        "first run, rerun, A/B base, which run one after another): no schedule ends sooner",
        "again_in_probes": machine.relative(again_s, machine_before["probe_s"]),
        "ratio_to_limit": {
            "first": round(first["wall_s"] / limit, 1),
            "again": round(again_s / limit, 1),
            "again_own_process": round(own_s / limit, 1),
        },
        "ratio_to_floor": {"again": round(again_s / floor, 1)},
        "phases_again_s": {
            phase: statistics.median(r["phases_s"].get(phase, 0.0) for r in again)
            for phase in ("before_tests", "tests", "after_tests")
        },
        "xdist_s": xdist_s,
        "ratio_to_xdist": {
            "first": round(first["wall_s"] / xdist_s, 3),
            "again": round(again_s / xdist_s, 3),
        },
        "results": first["results"],
        "selected": first["selected"],
        "holdout": first["holdout"],
        "holdout_share": args.holdout or "the run's default",
        "aims": {"ratio_to_limit": 1.5, "ratio_to_xdist": 0.25, "again_s": 5.0},
        "runs": {
            "main_job": [{k: v for k, v in r.items() if k != "ids"} for r in runs],
            "own_process": [{k: v for k, v in r.items() if k != "ids"} for r in own],
            "xdist": theirs,
        },
    }
    shutil.rmtree(work, ignore_errors=True)
    if args.out.exists():  # the record this one replaces, without its runs (git keeps more)
        before = json.loads(args.out.read_text(encoding="utf-8"))
        result["before"] = {k: v for k, v in before.items() if k not in ("runs", "before")}
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
