"""What an impact map changes on the bundled inventory: selections with and without it.

    .venv/bin/python benchmarks/impact_map.py --impact-map FILE.json [--inventory INV.json.gz]

The map comes from `spyre-ci impact-map --out FILE.json` over the bundled specs (recording it
is its own figure: `benchmarks/results/impact_map_record.json`). For every example event with
a patch (`examples/events/*.patch`) and every mutation of `benchmarks/selection/mutations.yaml`
(59 upstream-style edits to kernels, Python and the OpInfo database), plan once without and
once with the map (no holdout, no budget, an empty History) and record how many variants
each selects, and how many of the map's additions are full runs. Writes
`benchmarks/results/impact_map_selection.json`. No test runs: this is what the selection
costs, not what it finds (`benchmarks/results/selection.json` is that).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RESULT = REPO / "benchmarks" / "results" / "impact_map_selection.json"


def changes() -> list[tuple[str, object]]:
    """(name, ChangeSet) for the example events with a patch and the replay mutations."""
    from benchmarks.selection.mutations.model import load_mutations
    from relay.events import load_event_file
    from selector import ChangeSet

    out: list[tuple[str, object]] = []
    for patch in sorted((REPO / "examples" / "events").glob("*.patch")):
        event = load_event_file(patch.with_suffix(".json"))
        out.append(
            (
                f"event:{patch.stem}",
                ChangeSet.from_event(
                    event, patch.read_text(encoding="utf-8"), diff_source=str(patch)
                ),
            )
        )
    for mutation in load_mutations(REPO / "benchmarks" / "selection" / "mutations.yaml"):
        out.append(
            (f"mutation:{mutation.id}", ChangeSet.from_diff(mutation.diff, source=mutation.source))
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impact-map", type=Path, required=True, metavar="FILE.json")
    parser.add_argument(
        "--inventory",
        type=Path,
        metavar="INV.json.gz",
        help="default: the bundled specs' Inventory (built, about 30 s)",
    )
    args = parser.parse_args()
    from selector import History, ImpactMap, InventoryIndex, PlanConfig, plan
    from suites.inventory import build_inventory
    from suites.model import Inventory

    inventory = Inventory.load(args.inventory) if args.inventory else build_inventory()
    started = time.perf_counter()
    impact = ImpactMap.from_json(
        json.loads(args.impact_map.read_text(encoding="utf-8")), str(args.impact_map)
    )
    load_s = time.perf_counter() - started
    index = InventoryIndex.build(inventory)
    runnable = len(index.runnable)
    config = PlanConfig(holdout_rate=0.0)
    rows = []
    plan_s: list[float] = []
    for name, change in changes():
        without = plan(change, index, History(), config)
        t = time.perf_counter()
        with_map = plan(change, index, History(), config, impact=impact)
        plan_s.append(time.perf_counter() - t)
        rows.append(
            {
                "change": name,
                "without": len(without.selected_ids),
                "with": len(with_map.selected_ids),
                "full_run": bool(with_map.fallback),
                "added_by_map": len(set(with_map.selected_ids) - set(without.selected_ids)),
            }
        )
    targeted = [r for r in rows if not r["full_run"]]
    ratio = [r["with"] / runnable for r in targeted]
    record = {
        "name": "impact_map_selection",
        "value": round(100 * statistics.median(ratio), 2) if ratio else None,
        "unit": "% of runnable variants selected with the map (median over targeted changes)",
        "command": ".venv/bin/python benchmarks/impact_map.py --impact-map FILE.json "
        "(FILE from `spyre-ci impact-map --out FILE.json`, bundled specs)",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f}",
        "torch_version": inventory.torch_version,
        "impact_map_torch_version": impact.torch_version,
        "runnable_variants": runnable,
        "traced_variants": len(set(impact.functions) | set(impact.aten_ops)),
        "changes": len(rows),
        "full_runs": len(rows) - len(targeted),
        "median_without_pct": round(
            100 * statistics.median([r["without"] / runnable for r in targeted]), 2
        )
        if targeted
        else None,
        "median_with_pct": round(100 * statistics.median(ratio), 2) if ratio else None,
        "mean_with_pct": round(100 * statistics.fmean(ratio), 2) if ratio else None,
        "changes_the_map_widens": sum(1 for r in targeted if r["added_by_map"]),
        "map_load_s": round(load_s, 2),
        "plan_with_map_median_s": round(statistics.median(plan_s), 3),
        "rows": rows,
    }
    RESULT.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(
        f"{len(rows)} changes ({record['full_runs']} full runs): median selection "
        f"{record['median_without_pct']} % without the map, {record['median_with_pct']} % "
        f"with it; recorded {RESULT}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
