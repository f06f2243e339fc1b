"""How well triage (`dashboard_export.triage`) names the cause of failures whose cause is known.

    .venv/bin/python benchmarks/triage_score.py [--bench /work/bench-full] \
        [--trace workflows/data/trace-2.13.0.json.gz] [--record benchmarks/results/triage.json]

Ground truth, from the selection benchmark (`spyre-ci bench selection`, its record
`benchmarks/results/selection.json`):
- `upstream`: every `mutations[].failing_ids` entry that went `passed -> failed` was caused
  by that mutation's edit of torch, by construction. Its message is the end line the
  mutation's ground-truth shard wrote (`<bench>/work/<mutation>/*.jsonl`).
- `backend`: the baseline run's (`<bench>/work/baseline/*/*.jsonl`) `xfailed` variants fail
  on the unmodified torch: the backend's own limits (the expectations files say so).

`related` (the plan selected the variant for an `op_match` / `impact_map` reason) is not in
the benchmark's files (it keeps no plans per mutation), so the script makes the benchmark's
plans again (`selector.plan` only, no tests: same inventory, baseline, trace, diff form and
seed; `--trace`); a mutation whose plan cannot be made here uses its `caught` list instead;
baseline failures are never related (no change). The score is also given for messages
alone (`related` false everywhere), the floor when no plan is at hand.

Precision and recall per wire category; per finer class, how many failures it took.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dashboard_export import triage

REPO = Path(__file__).resolve().parent.parent
FAILED = {"failed", "error", "timeout", "crashed"}


def end_lines(paths: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """The last end line of each variant in these shard result files."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == "end":
                found[entry["id"]] = entry
    return found


def planned_related(
    bench: Path, selection: dict[str, Any], trace: Path
) -> tuple[dict[str, frozenset[str]], str]:
    """Per mutation, the ids its plan selected for an op_match / impact_map reason: the
    benchmark's own plans, made again (selector, pure: no test runs) from its inventory,
    baseline and trace. Empty with the reason when that cannot be done here."""
    try:
        import selector
        from suites.model import Inventory, Outcome
        from workflows.bench.mutations import load_mutations
        from workflows.bench.results import BenchConfig

        # The benchmark's own Judge (what its selector is given), so the plans are its plans.
        from workflows.bench.selection import _judge

        config = BenchConfig(
            out=bench, impact_map=trace, diff_form=str(selection.get("diff_form", "plain"))
        )
        inventory = Inventory.load(bench / "inventory.json.gz")
        baseline_json = json.loads((bench / "baseline.json").read_text(encoding="utf-8"))
        baseline = {vid: Outcome.from_json(o) for vid, o in baseline_json.items()}
        judge = _judge(config, inventory, baseline, selector)
        mutations = {m.id: m for m in load_mutations(config.mutations)}
    except Exception as exc:  # noqa: BLE001 - the score then falls back to the proxy
        return {}, f"plans not made: {type(exc).__name__}: {exc}"
    related = {}
    for entry in selection["mutations"]:
        mutation = mutations.get(entry["id"])
        if mutation is None or not entry["failing_ids"]:
            continue
        plan = selector.plan(
            judge.changes(mutation),
            judge.index,
            judge.history,
            selector.PlanConfig(holdout_rate=judge.holdout, seed=mutation.id),
            impact=judge.impact if selection.get("trace", True) else None,
        )
        related[entry["id"]] = triage.related_ids(plan.to_json()["selected"])
    return related, "the benchmark's plans, made again: op_match / impact_map reasons"


def cases(
    bench: Path, selection: dict[str, Any], related: dict[str, frozenset[str]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(truth, message, related) per failure, and what data was missing. `related`: per
    mutation the plan's related ids; a mutation without them uses its `caught` list."""
    rows: list[dict[str, Any]] = []
    missing: dict[str, Any] = {"mutations_without_results": [], "failures_without_message": 0}
    for mutation in selection["mutations"]:
        work = bench / "work" / mutation["id"]
        files = sorted(work.glob("*.jsonl"))
        if not files:
            missing["mutations_without_results"].append(mutation["id"])
            continue
        ended = end_lines(files)
        if not mutation["failing_ids"]:
            continue
        if mutation["id"] in related:
            caught = set(related[mutation["id"]])
        else:
            caught = set(mutation.get("caught") or ())
            missing.setdefault("related_from_caught", []).append(mutation["id"])
        for vid, change in sorted(mutation["failing_ids"].items()):
            if not change.endswith("-> failed"):
                continue  # an xfail that changed is not a failure with a message
            entry = ended.get(vid)
            if entry is None or entry.get("status") not in FAILED:
                missing["failures_without_message"] += 1
                continue
            rows.append(
                {
                    "mutation": mutation["id"],
                    "id": vid,
                    "truth": "upstream",
                    "message": entry.get("message") or "",
                    "related": vid in caught and not mutation.get("fallback"),
                }
            )
    baseline = end_lines(sorted((bench / "work" / "baseline").glob("*/*.jsonl")))
    if not baseline:
        missing["baseline"] = "no baseline results"
    for vid, entry in sorted(baseline.items()):
        if entry.get("status") == "xfailed":
            rows.append(
                {
                    "mutation": "baseline",
                    "id": vid,
                    "truth": "backend",
                    "message": entry.get("message") or "",
                    "related": False,
                }
            )
    return rows, missing


def score(rows: Sequence[dict[str, Any]], use_related: bool) -> dict[str, Any]:
    """Precision / recall per category, the confusion counts and the classes taken."""
    predicted = [triage.triage(r["id"], r["message"], r["related"] and use_related) for r in rows]
    confusion: Counter[tuple[str, str]] = Counter(
        (r["truth"], p.category) for r, p in zip(rows, predicted, strict=True)
    )
    per: dict[str, Any] = {}
    for category in triage.CATEGORIES:
        said = sum(n for (_, c), n in confusion.items() if c == category)
        true = sum(n for (t, _), n in confusion.items() if t == category)
        hit = confusion[(category, category)]
        if not said and not true:
            continue
        per[category] = {
            "predicted": said,
            "truth": true,
            "correct": hit,
            "precision": round(hit / said, 4) if said else None,
            "recall": round(hit / true, 4) if true else None,
        }
    classes: Counter[tuple[str, str]] = Counter(
        (r["truth"], p.failure_class) for r, p in zip(rows, predicted, strict=True)
    )
    return {
        "per_category": per,
        "confusion": {f"{t} -> {c}": n for (t, c), n in sorted(confusion.items())},
        "classes": {f"{t}: {c}": n for (t, c), n in sorted(classes.items())},
        "accuracy": round(sum(confusion[(c, c)] for c in triage.CATEGORIES) / len(rows), 4)
        if rows
        else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=Path("/work/bench-full"))
    parser.add_argument(
        "--selection", type=Path, default=REPO / "benchmarks/results/selection.json"
    )
    parser.add_argument("--trace", type=Path, default=REPO / "workflows/data/trace-2.13.0.json.gz")
    parser.add_argument("--record", type=Path, default=REPO / "benchmarks/results/triage.json")
    args = parser.parse_args(argv)
    selection = json.loads(args.selection.read_text(encoding="utf-8"))
    related, related_source = planned_related(args.bench, selection, args.trace)
    rows, missing = cases(args.bench, selection, related)
    upstream = [r for r in rows if r["truth"] == "upstream"]
    record: dict[str, Any] = {
        "name": "triage_score",
        "command": f".venv/bin/python benchmarks/triage_score.py --bench {args.bench} --trace "
        f"{args.trace.relative_to(REPO) if args.trace.is_relative_to(REPO) else args.trace}",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "data": {
            "bench": str(args.bench),
            "selection_record": str(args.selection.relative_to(REPO))
            if args.selection.is_relative_to(REPO)
            else str(args.selection),
            "selection_date": selection.get("date"),
            "upstream_failures": len(upstream),
            "related_source": related_source,
            "upstream_related": sum(1 for r in upstream if r["related"]),
            "backend_failures": len(rows) - len(upstream),
            "mutations_scored": len({r["mutation"] for r in upstream}),
            "missing": missing,
        },
        "with_related": score(rows, use_related=True),
        "messages_only": score(rows, use_related=False),
        "notes": [
            "truth upstream: mutations[].failing_ids that went passed -> failed; truth backend: "
            "the baseline run's xfailed variants (unmodified torch)",
            "related: the plan selected the variant for an op_match or impact_map reason; "
            "the benchmark keeps no plans, so its plans are made again (selector only, same "
            "inventory, baseline History, trace, diff form and seed); a mutation whose plan "
            "cannot be made here falls back to its caught list (listed under missing)",
            "the truth has no infra or flake cases; those categories are not scored",
            "every upstream failure was selected for an op_match / impact_map reason, so with "
            "relatedness upstream is 1.0 / 1.0; messages_only shows that messages alone never "
            "say upstream (the change's tolerance misses read like the backend's)",
            "backend truth is xfailed baseline variants: a real run reports them as "
            "pre-existing, not new, so they are scored as if they had newly failed",
        ],
    }
    args.record.parent.mkdir(parents=True, exist_ok=True)
    args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for mode in ("with_related", "messages_only"):
        print(mode, json.dumps(record[mode]["per_category"]), "accuracy", record[mode]["accuracy"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
