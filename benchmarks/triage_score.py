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
- `infra`: a run whose test processes could not start (`--memory-mb 64`);
- `upstream`, unrelated to the change: the backward variants of sum, softmax and relu that
  an upstream commit in a shared helper breaks (autograd_batch_of_one.patch: `_make_grads`
  indexes a 0-d gradient), which the plan does not relate to it: applied as the change on the
  installed torch G (`shared-helper`), and through History, in one state directory, at three
  pushes (pushes.py writes the events): G passes (`earlier-g`), B is the breaking commit as
  the torch under test (`earlier-b`, torch_at.py builds it, no A/B run), H a harmless commit
  on top of B (`earlier-h`): there they fail on the base torch B too, and only History shows
  they passed at G with the same backend;
- `backend`, related and failing on the base torch too: the backend regresses without a new
  version (its glu kernel raises: a copy of backend_under_test first on PYTHONPATH) and the
  harmless glu commit lands on G (`backend-regressed`): History saw glu pass at H, on another
  torch, with the same backend version but other files (the backend's digest).

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
from selector import Selected
from suites.model import Status

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "benchmarks/triage/cases.json"
# Scenario -> (command, truth of a failing variant by its subject prefix, default truth).
_SHARED_HELPER = {
    "softmax.with_dtype": "backend",
    "sum": "upstream",
    "softmax": "upstream",
    "nn.functional.relu": "upstream",
}
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
    # An upstream commit in a shared Python helper (autograd's _make_grads indexes a 0-d
    # gradient: benchmarks/triage/autograd_batch_of_one.patch) breaks the backward variants
    # of sum, softmax and relu, whose names it does not mention; the plan relates none.
    "shared-helper": (
        "spyre-ci run --event <push G -> B: autograd_batch_of_one.patch> "
        "--specs benchmarks/triage/ops.yaml --holdout 0.5  # fresh History, the installed "
        "torch is G: the change applied, A/B on G",
        _SHARED_HELPER,
    ),
    # The same commit reached through History, one state directory, three pushes in order:
    "earlier-g": (
        "spyre-ci run --event <push at G, the installed torch's sha: a docs edit> "
        "--specs benchmarks/triage/ops.yaml --full",
        {"softmax.with_dtype": "backend"},
    ),
    # the torch at B is the breaking commit (benchmarks/triage/torch_at.py): no A/B run
    "earlier-b": (
        "PYTHONPATH=<torch_at.py B autograd_batch_of_one.patch> spyre-ci run "
        "--event <push G -> B> --specs benchmarks/triage/ops.yaml --full",
        _SHARED_HELPER,
    ),
    # a later, harmless commit H on top of B (glu_int_dim.patch applied on the torch at B):
    # the broken variants fail on the base torch B too; only History shows they passed at G
    "earlier-h": (
        "PYTHONPATH=<torch_at.py B autograd_batch_of_one.patch> spyre-ci run "
        "--event <push B -> H: glu_int_dim.patch> --specs benchmarks/triage/ops.yaml --full",
        _SHARED_HELPER,
    ),
    # then the backend regresses without a new version (a copy of backend_under_test whose
    # glu kernel fails, first on PYTHONPATH) and the harmless glu commit lands on G as C:
    # glu's variants are related to it, fail on the base torch G too, and History saw them
    # pass on another torch (B) with the same backend version, not the same files
    "backend-regressed": (
        "PYTHONPATH=<backend_under_test, glu's kernel raising> spyre-ci run "
        "--event <push G -> C: glu_int_dim.patch> --specs benchmarks/triage/ops.yaml --full",
        {"softmax.with_dtype": "backend", "nn.functional.glu": "backend"},
    ),
}


def capture(run_dir: Path, scenario: str) -> dict[str, Any]:
    """One run's labelled cases, from its out directory (run.json, plan.json, work/)."""
    command, truths = SCENARIOS[scenario]
    record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    related = triage.related_ids(Selected.from_json(e) for e in plan.get("selected", ()))
    first = _first_messages(run_dir / "work")
    try:
        found = json.loads((run_dir / "forensics.json").read_text(encoding="utf-8"))["failures"]
    except (OSError, ValueError, KeyError):
        found = {}
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
                # History: passed at an earlier upstream sha with this backend (forensics)
                "passed_before": (found.get(result["id"]) or {}).get("passed_before"),
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
        passed_before=failure.get("passed_before"),
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
    return truths.most_common(1)[0][0], verdict.category


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
        # A scenario captured again replaces its earlier capture; the others stay.
        runs = (
            json.loads(args.cases.read_text(encoding="utf-8"))["runs"]
            if args.cases.exists()
            else []
        )
        for item in args.capture:
            where, _, scenario = item.partition("=")
            if scenario not in SCENARIOS:
                parser.error(f"--capture {item}: scenario must be one of {sorted(SCENARIOS)}")
            runs = [r for r in runs if r["scenario"] != scenario] + [capture(Path(where), scenario)]
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
            # the hard case: unrelated, and failing on the base torch too
            "upstream_unrelated_failing_on_base": sum(
                1
                for r in runs
                for f in r["failures"]
                if f["truth"] == "upstream"
                and not f["related"]
                and (f["base_status"] or "passed") != "passed"
            ),
            "backend_related": sum(
                1 for r in runs for f in r["failures"] if f["truth"] == "backend" and f["related"]
            ),
            "scenarios": {r["scenario"]: r["command"] for r in runs},
        },
        "per_failure": score(per_failure),
        "per_failed_run": score(per_run) | {"runs": [list(p) for p in per_run]},
        # The same failures without History's evidence (no passed_before): what the run's
        # own A/B and plan say alone.
        "per_failure_without_history": score(
            [
                (f["truth"], predict(r, {**f, "passed_before": None}).category)
                for r in runs
                for f in r["failures"]
            ]
        ),
        "notes": [
            "the set is captured from real runs of the product (benchmarks/triage/cases.json); "
            "truth comes from how each run was made (the module's docstring), never from the "
            "classifier",
            "related backend: Spyre's float64 refusal in softmax variants, in a run whose "
            "change edits softmax (data.backend_related, all backend)",
            "unrelated upstream (data.upstream_unrelated): a commit in autograd's shared "
            "_make_grads breaks the backward of sum, softmax and relu, which the plan does not "
            "relate to it: applied on G with A/B (shared-helper), as the torch of the push "
            "at B (earlier-b: no A/B, History passed at G), and as the base of a later "
            "harmless push H (earlier-h: fails on the base torch too; "
            "data.upstream_unrelated_failing_on_base); per_failure_without_history scores "
            "the same set with History's evidence removed",
            "related backend failing on the base torch too (backend-regressed, 9 glu "
            "failures): History saw them pass at H on torch B with backend 0.1.0, the version "
            "they fail with; only the backend's digest (its files) tells the backend moved, "
            "identified by version alone they would read upstream",
            "the holdout itself is not exercised: the selector cannot name the ops of a "
            "change in torch/autograd/__init__.py and falls back to a full run (plan.json "
            "'cannot name the ops changed in kernel code'), so shared-helper's failures were "
            "selected by the fallback, not sampled by the holdout",
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
