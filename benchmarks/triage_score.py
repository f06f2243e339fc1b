"""How well triage (`dashboard_export.triage`) names the cause of failures whose cause is known.

    .venv/bin/python benchmarks/triage_score.py --capture RUN_DIR=SCENARIO ...   # build the set
    .venv/bin/python benchmarks/triage_score.py [--record benchmarks/results/triage.json]

The labelled set, `benchmarks/triage/cases.json`, is captured from real runs of the product
(`spyre-ci run --specs benchmarks/triage/ops.yaml ...`, the commands are in the set): per
failing variant its message and the evidence the run held (its classification, its outcome
on the base torch without the change, whether the plan related it to the change, the
environment's tested verdict), and per run whether it was an infrastructure fault. The truth
comes from how each run was made, never from the classifier:

- `upstream`: the variants of the op an upstream edit breaks (glu_batch_check.patch: `glu`),
  in a targeted run (related to the change) and in a `--full --no-trace` run (the plan
  relates nothing: an upstream failure unrelated to the change's files);
- `backend`: variants that fail on the unmodified torch (Spyre's float64 refusal), in a run
  whose change touches their op (a comment edit in `softmax`: a backend failure related to
  the change) and in runs whose change does not;
- `flake`: the variant a fault that fires once made fail (passed on rerun);
- `infra`: a run whose test processes could not start (`--memory-mb 64`).

`unknown` is never a truth: it is the classifier's abstention, scored as a miss. Scored per
failure and per failed run (the run's verdict): precision and recall per category.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dashboard_export import triage
from suites.model import Status

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "benchmarks/triage/cases.json"
# Scenario -> (command, truth of a failing variant by its subject prefix, default truth).
SCENARIOS: dict[str, tuple[str, dict[str, str]]] = {
    "upstream-related": (
        "spyre-ci run --specs benchmarks/triage/ops.yaml "
        "--diff examples/changes/glu_batch_check.patch",
        {"nn.functional.glu": "upstream", "softmax.with_dtype": "backend"},
    ),
    "upstream-unrelated": (
        "spyre-ci run --specs benchmarks/triage/ops.yaml "
        "--diff examples/changes/glu_batch_check.patch --full --no-trace",
        {"nn.functional.glu": "upstream", "softmax.with_dtype": "backend"},
    ),
    "backend-related": (
        "spyre-ci run --specs benchmarks/triage/ops.yaml --diff <a comment edit in softmax>",
        {"softmax.with_dtype": "backend"},
    ),
    "flake": (
        "PYTHONPATH=<backend_under_test with a fault failing softmax's first call once> "
        "spyre-ci run --specs benchmarks/triage/ops.yaml --diff <a comment edit in glu> --full",
        {"softmax.with_dtype": "backend", "softmax": "flake"},
    ),
    "infra": (
        "spyre-ci run --specs benchmarks/triage/ops.yaml "
        "--diff examples/changes/glu_batch_check.patch --memory-mb 64",
        {},
    ),
}


def capture(run_dir: Path, scenario: str) -> dict[str, Any]:
    """One run's labelled cases, from its out directory (run.json, plan.json, work/)."""
    command, truths = SCENARIOS[scenario]
    record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    related = triage.related_ids(plan.get("selected", ()))
    first = _first_messages(run_dir / "work")
    failures = []
    for result in record["results"]:
        failing = Status(result["status"]).is_failure or result.get("classification") == "flaky"
        if not failing:
            continue
        subject = result["subject"]
        truth = truths.get(subject)
        if truth is None:
            raise SystemExit(f"{run_dir}: {result['id']} failed; {scenario} names no truth for it")
        failures.append(
            {
                "id": result["id"],
                "truth": truth,
                # a flaky variant's record shows its passing rerun: the first failure's message
                "message": result.get("message") or first.get(result["id"], ""),
                "classification": result.get("classification"),
                "base_status": result.get("base_status"),
                "related": result["id"] in related,
            }
        )
    return {
        "scenario": scenario,
        "command": command,
        "run_id": record["run_id"],
        "tested": record["environment"].get("tested") or None,
        "infrastructure": [line.splitlines()[0] for line in record["infrastructure"]],
        "truth": "infra" if record["infrastructure"] else None,
        "failures": failures,
    }


def _first_messages(work: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(work.glob("*/*/*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == "end" and entry.get("message"):
                found.setdefault(entry["id"], entry["message"])
    return found


def predict(run: dict[str, Any], failure: dict[str, Any]) -> triage.FailureTriage:
    return triage.triage(
        failure["id"],
        failure["message"],
        failure["related"],
        failure["classification"],
        base_status=failure["base_status"],
        tested=run["tested"],
    )


def run_prediction(run: dict[str, Any]) -> tuple[str, str] | None:
    """(truth, predicted) of a failed run's verdict; None for a run that did not fail."""
    if run["infrastructure"]:
        return run["truth"], "infra"  # crcr.infra_verdict: a run whose tests could not run
    new = [f for f in run["failures"] if f["classification"] in (None, "new")]
    if not new:
        return None  # pre-existing and flaky failures leave the run green: no verdict
    verdict = triage.run_verdict(
        [predict(run, f) for f in new],
        {f["id"]: f["message"] for f in new},
        first_bad=None,
        job="variant-tests",
        version="bench",
    )
    truths = Counter(f["truth"] for f in new)
    assert verdict is not None
    return truths.most_common(1)[0][0], str(verdict["category"])


def score(pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Precision / recall per category and the confusion counts."""
    confusion = Counter(pairs)
    per: dict[str, Any] = {}
    for category in triage.CATEGORIES:
        said = sum(n for (_, c), n in confusion.items() if c == category)
        true = sum(n for (t, _), n in confusion.items() if t == category)
        hit = confusion[(category, category)]
        per[category] = {
            "predicted": said,
            "truth": true,
            "correct": hit,
            "precision": round(hit / said, 4) if said else None,
            "recall": round(hit / true, 4) if true else None,
        }
    return {
        "per_category": per,
        "confusion": {f"{t} -> {c}": n for (t, c), n in sorted(confusion.items())},
        "accuracy": round(sum(confusion[(c, c)] for c in triage.CATEGORIES) / len(pairs), 4)
        if pairs
        else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", nargs="+", metavar="RUN_DIR=SCENARIO")
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--record", type=Path, default=REPO / "benchmarks/results/triage.json")
    args = parser.parse_args(argv)
    if args.capture:
        runs = []
        for item in args.capture:
            where, _, scenario = item.partition("=")
            if scenario not in SCENARIOS:
                parser.error(f"--capture {item}: scenario must be one of {sorted(SCENARIOS)}")
            runs.append(capture(Path(where), scenario))
        args.cases.parent.mkdir(parents=True, exist_ok=True)
        args.cases.write_text(json.dumps({"runs": runs}, indent=1) + "\n", encoding="utf-8")
        return 0
    runs = json.loads(args.cases.read_text(encoding="utf-8"))["runs"]
    per_failure = [(f["truth"], predict(r, f).category) for r in runs for f in r["failures"]]
    per_run = [p for r in runs if (p := run_prediction(r)) is not None]
    record = {
        "name": "triage_score",
        "command": "PYTHONPATH=. .venv/bin/python benchmarks/triage_score.py",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "data": {
            "cases": str(args.cases.relative_to(REPO)),
            "runs": len(runs),
            "failures": len(per_failure),
            "truth_per_failure": dict(Counter(t for t, _ in per_failure)),
            "failed_runs": len(per_run),
            "upstream_unrelated": sum(
                1
                for r in runs
                for f in r["failures"]
                if f["truth"] == "upstream" and not f["related"]
            ),
            "scenarios": {r["scenario"]: r["command"] for r in runs},
        },
        "per_failure": score(per_failure),
        "per_failed_run": score(per_run) | {"runs": [list(p) for p in per_run]},
        "notes": [
            "the set is captured from real runs of the product (benchmarks/triage/cases.json); "
            "truth comes from how each run was made (the module's docstring), never from the "
            "classifier",
            "related backend: Spyre's float64 refusal in softmax variants, in a run whose "
            "change edits softmax (12, all related, all backend); unrelated upstream: NOT in "
            "this capture: the --full --no-trace run still related its glu failures by name "
            "(op_match), so every upstream failure here is related (data.upstream_unrelated)",
            "unknown is the classifier's abstention, never a truth; infra is judged per run "
            "(a run whose tests could not run has no per-test failures)",
        ],
    }
    args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for key in ("per_failure", "per_failed_run"):
        print(key, json.dumps(record[key]["per_category"]), "accuracy", record[key]["accuracy"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
