"""What the holdout costs and what it says, before (2 % of the unselected, whatever it costs)
and after (the default: its expected seconds at most a quarter of the selection's, at least
10 variants), on the shipped examples.

For each example change (`EXAMPLES`: the recorded events with their patches and the shipped
patches of examples/changes/), planned as `spyre-ci select` plans it (the cached Inventory of
the installed torch and the bundled specs, the shipped trace, the installed torch's old
sources), both rules give: the holdout's size, its expected and drawn seconds against the
selection's, and what Verify makes of a holdout that finds nothing (the 95 % bound on the
unselected that fail new: `selector.verify.holdout_bound`).

Then the estimate itself, by simulation over `--draws` seeds per example and rule: a planted
set of new failures among the unselected (`--plant` of them, fixed per example, uniformly
chosen: a stand-in for what selection missed), a holdout drawn with each seed as the plan
draws it, and Verify's figures on it: the mean Horvitz-Thompson estimate of the missed
count against the planted count (unbiased: they agree), its spread, how often the 95 %
bound covers the planted count, and the bound's mean width. Also the spread of the drawn
seconds (a count fixed from the strata's mean durations: one slow variant drawn can pass the
allowance; the expected seconds stay within it).

Durations: two tables. `untimed`: a History that never timed a run (every variant 1 s,
PlanConfig.default_duration_s); `timed`, with `--durations RUN.json`: a run's run.json, its
results' `duration_s` (a full run, e.g. `spyre-ci run --event examples/events/nightly.json
--out DIR`). Writes benchmarks/results/holdout_share.json.
Run: .venv/bin/python benchmarks/holdout_share.py [--durations RUN.json] [--inventory FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.trace_selection import bundled_inventory  # noqa: E402
from selector import (  # noqa: E402
    ChangeSet,
    History,
    ImpactMap,
    InventoryIndex,
    PlanConfig,
    VariantHistory,
    plan,
)
from selector.holdout import draw_holdout, near_variants  # noqa: E402
from selector.plan import DEFAULT_HOLDOUT_RATE, Plan  # noqa: E402
from selector.verify import holdout_bound  # noqa: E402
from suites.model import Inventory  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "holdout_share.json"
COMMAND = ".venv/bin/python benchmarks/holdout_share.py"
EXAMPLES = (
    "examples/events/push_softmax_kernel.json",
    "examples/events/pr_merged_nn_functional.json",
    "examples/events/dispatch_crcr_push.json",
    "examples/changes/glu_batch_check.patch",
    "examples/changes/softsign_offset.patch",
)
RULES = {
    "before": PlanConfig(holdout_rate=DEFAULT_HOLDOUT_RATE),  # a share given: unbounded
    "after": PlanConfig(),
}


def _history(path: str | None) -> tuple[History, dict[str, Any]]:
    if not path:
        return History(), {"source": "none: every variant 1 s (PlanConfig.default_duration_s)"}
    run = json.loads(Path(path).read_text(encoding="utf-8"))
    results = run["results"]
    history = History(
        variants={r["id"]: VariantHistory(mean_duration_s=float(r["duration_s"])) for r in results}
    )
    seconds = sorted(float(r["duration_s"]) for r in results)
    return history, {
        "source": f"{path}: run {run.get('run_id')} started {run.get('started_at')}",
        "variants": len(results),
        "total_s": round(sum(seconds), 1),
        "median_s": round(statistics.median(seconds), 4),
        "max_s": round(seconds[-1], 2),
    }


def _change(example: str, torch_version: str) -> ChangeSet:
    from relay.events import load_event_file
    from workflows.stores.sources import with_old_sources

    path = REPO / example
    if path.suffix == ".patch":
        change = ChangeSet.from_diff(path.read_text(encoding="utf-8"), source=example)
    else:
        event = load_event_file(path)
        sibling = path.with_suffix(".patch")
        diff = sibling.read_text(encoding="utf-8") if sibling.exists() else None
        change = ChangeSet.from_event(event, diff)  # type: ignore[arg-type]
    return with_old_sources(change, torch_version=torch_version)


def _seconds(history: History, vid: str) -> float:
    entry = history.variants.get(vid)
    mean = None if entry is None else entry.mean_duration_s
    return 1.0 if mean is None else mean


def _one(p: Plan) -> dict[str, Any]:
    t = p.totals
    nothing = holdout_bound(p.strata, ())
    run_s = t.selected_s + t.holdout_s
    return {
        "holdout": t.holdout,
        "strata": {s.name: [s.drawn, s.population] for s in p.strata},
        "expected_s": round(sum(s.expected_s for s in p.strata), 2),
        "drawn_s": round(t.holdout_s, 2),
        "holdout_share_of_test_time": round(t.holdout_s / run_s, 3) if run_s else None,
        "rule": p.holdout_rule.to_json() if p.holdout_rule else None,
        "none_found": {
            "miss_rate_upper": nothing.miss_rate_upper,
            "missed_upper": round(nothing.missed_upper, 1),
        },
    }


def _simulate(
    p: Plan,
    index: InventoryIndex,
    history: History,
    config: PlanConfig,
    plant: int,
    draws: int,
    seed: str,
) -> dict[str, Any]:
    """Holdouts drawn as the plan draws them, seed after seed, over a planted set of misses."""
    chosen = list(p.selected_ids)
    chosen_set = set(chosen)
    unchosen = [v for v in index.runnable if v not in chosen_set]
    near = near_variants(p.facts, index, chosen)
    durations = {v: _seconds(history, v) for v in unchosen}
    selected_s = sum(_seconds(history, v) for v in chosen)
    unselected_s = sum(durations.values())
    planted = set(random.Random(f"plant {seed}").sample(unchosen, min(plant, len(unchosen))))
    estimates, uppers, covered, seconds = [], [], 0, []
    for n in range(draws):
        strata = draw_holdout(
            unchosen,
            near,
            config,
            random.Random(f"{seed} {n}"),
            durations,
            unselected_s,
            selected_s=selected_s,
        )
        found = [v for s in strata for v in s.ids if v in planted]
        bound = holdout_bound(strata, found)
        estimates.append(bound.estimated_missed)
        uppers.append(bound.missed_upper)
        covered += bound.missed_upper >= len(planted)
        seconds.append(sum(s.drawn_s for s in strata))
    allowance = p.holdout_rule.allowance_s if p.holdout_rule else None
    seconds.sort()
    return {
        "planted": len(planted),
        "estimate_mean": round(statistics.fmean(estimates), 2),
        "estimate_sd": round(statistics.pstdev(estimates), 2),
        "bound_covers": round(covered / draws, 3),
        "bound_mean": round(statistics.fmean(uppers), 1),
        "drawn_s_mean": round(statistics.fmean(seconds), 2),
        "drawn_s_p95": round(seconds[int(0.95 * (draws - 1))], 2),
        "drawn_s_max": round(seconds[-1], 2),
        "over_allowance": (
            None if allowance is None else round(sum(s > allowance for s in seconds) / draws, 3)
        ),
    }


def _row(
    example: str,
    inventory: Inventory,
    index: InventoryIndex,
    history: History,
    trace: ImpactMap | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One example under both rules: the plan's figures and the simulated estimate."""
    change = _change(example, inventory.torch_version)
    row: dict[str, Any] = {"example": example}
    for label, config in RULES.items():
        p = plan(change, index, history, config, impact=trace)
        row.setdefault("decision", p.decision)
        row.setdefault("selected", p.totals.selected)
        row.setdefault("selected_s", round(p.totals.selected_s, 2))
        row[label] = _one(p)
        if p.strata:
            row[label]["simulated"] = _simulate(
                p, index, history, config, args.plant, args.draws, example
            )
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", help="the Inventory (default: the cached one)")
    parser.add_argument("--durations", help="a run.json whose results time the variants")
    parser.add_argument("--draws", type=int, default=1000, help="seeds per example and rule")
    parser.add_argument("--plant", type=int, default=20, help="planted misses per example")
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args(argv)
    inventory, source = bundled_inventory(args.inventory)
    from workflows.tracing.traces import shipped_trace

    trace: ImpactMap | None = shipped_trace(inventory.torch_version)
    index = InventoryIndex.build(inventory)
    timings = {"untimed": _history(None)}
    if args.durations:
        timings["timed"] = _history(args.durations)
    tables: dict[str, Any] = {}
    for name, (history, timing) in timings.items():
        rows = []
        for example in EXAMPLES:
            rows.append(_row(example, inventory, index, history, trace, args))
            r = rows[-1]
            b, a = r["before"], r["after"]
            print(
                f"{name:8} {example:46} selected {r['selected']:>4} ({r['selected_s']:>7} s) "
                f"holdout {b['holdout']:>4} ({b['drawn_s']:>6} s) -> {a['holdout']:>4} "
                f"({a['drawn_s']:>6} s)",
                file=sys.stderr,
            )
        targeted = [r for r in rows if r["decision"] == "targeted"]
        tables[name] = {
            "durations": timing,
            "holdout_s_before": round(sum(r["before"]["drawn_s"] for r in targeted), 2),
            "holdout_s_after": round(sum(r["after"]["drawn_s"] for r in targeted), 2),
            "selected_s": round(sum(r["selected_s"] for r in targeted), 2),
            "rows": rows,
        }
    headline = tables.get("timed", tables["untimed"])
    before_s, after_s = headline["holdout_s_before"], headline["holdout_s_after"]
    data = {
        "name": "holdout_share",
        "value": round(after_s / before_s, 4) if before_s else None,
        "unit": "the default holdout's drawn seconds / the unbounded 2 % holdout's, summed over "
        "the targeted examples (timed by --durations when given)",
        "command": COMMAND + (f" --durations {args.durations}" if args.durations else ""),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}",
        "notes": (
            "before: PlanConfig(holdout_rate=0.02) (`--holdout 0.02` given: the rule before "
            "the bound); after: PlanConfig() (the default). Seconds are History's durations. "
            "none_found: Verify's 95 % bound on the unselected failing new when the holdout "
            "finds none. simulated: holdouts drawn with --draws seeds over --plant planted "
            "misses among the unselected (uniform), Verify's Horvitz-Thompson estimate and "
            "bound on each."
        ),
        "inventory": source,
        "torch_version": inventory.torch_version,
        "draws": args.draws,
        "plant": args.plant,
        "tables": tables,
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
