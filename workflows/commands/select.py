"""`spyre-ci select`: run selector stages 1-3 on an event or a diff and show or save the Plan.

The selector is pure; this module does its I/O: reading the event, the diff, the inventory,
an optional History snapshot, previous inventory and impact map, and writing the plan.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from workflows.change_input import add_source_arguments, read_source, read_text
from workflows.cli import CommandError

INVENTORY_ENV = "SPYRE_CI_INVENTORY"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "select",
        help="decide which variant tests an upstream change needs, and why",
        description="Scout the change, score every variant with the heuristics, and plan "
        "(budget, holdout, shards). Nothing runs.",
    )
    add_source_arguments(parser)
    parser.add_argument("--inventory", type=Path, metavar="FILE.json.gz",
                        default=Path(os.environ[INVENTORY_ENV]) if os.environ.get(INVENTORY_ENV)
                        else None,
                        help=f"the Inventory to select from (default ${INVENTORY_ENV}, else the "
                        "one `spyre-ci run` uses: built from the bundled specs for the "
                        "installed torch and cached in the state directory)")
    parser.add_argument("--history", type=Path, metavar="FILE.json",
                        help="a History snapshot (selector.History JSON) instead of the "
                        "History store `spyre-ci run` records into (SQLite in the state "
                        "directory, or Redis with SPYRE_CI_REDIS_URL)")
    parser.add_argument("--previous-inventory", type=Path, metavar="FILE.json.gz",
                        help="the inventory of the last run: finds changed definitions and "
                        "new variants")
    parser.add_argument("--impact-map", type=Path, metavar="FILE.json",
                        help="per-variant functions and aten ops from `spyre-ci impact-map`")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=int, metavar="N", help="select at most N variants "
                        "(failing and new variants always run)")
    budget.add_argument("--budget-time", type=float, metavar="SECONDS",
                        help="fit the selection into this much test time")
    parser.add_argument("--holdout", type=float, default=0.02, metavar="SHARE",
                        help="share of unselected variants sampled to run apart (default 0.02)")
    parser.add_argument("--seed", help="holdout seed (default: the head sha)")
    parser.add_argument("--shards", type=int, default=1, metavar="N",
                        help="split the run into N shards by historical durations")
    parser.add_argument("--trial", action="append", default=[], metavar="HEURISTIC",
                        help="record this heuristic's scores without counting them (repeat)")
    parser.add_argument("--disable", action="append", default=[], metavar="HEURISTIC",
                        help="do not run this heuristic (repeat)")
    parser.add_argument("--full", action="store_true", help="select every variant")
    parser.add_argument("--plan-out", type=Path, metavar="FILE", help="write the Plan as JSON")
    parser.add_argument("--explain", action="store_true",
                        help="print the change facts, the decision and the reasons")
    parser.add_argument("--why", metavar="VARIANT_ID", help="print the story of one variant")
    parser.set_defaults(func=select)


def select(args: argparse.Namespace) -> int:
    from selector import ImpactMap, PlanConfig, SelectorError, plan
    from selector.explain import explain, why

    try:
        changes = _read_change(args)
        inventory = _read_inventory(args.inventory or _default_inventory(), "--inventory")
        previous = (_read_inventory(args.previous_inventory, "--previous-inventory")
                    if args.previous_inventory else None)
        history = _read_history(args.history) if args.history else _stored_history(changes)
        impact = (ImpactMap.from_json(_read_json(args.impact_map), str(args.impact_map))
                  if args.impact_map else None)
        config = PlanConfig(
            budget_count=args.budget, budget_seconds=args.budget_time,
            holdout_rate=args.holdout, shards=args.shards, force_full=args.full,
            trial=frozenset(args.trial), disabled=frozenset(args.disable), seed=args.seed,
        )
        result = plan(changes, inventory, history, config, previous=previous, impact=impact)
    except SelectorError as exc:
        raise CommandError(str(exc)) from exc
    if args.plan_out:
        try:
            args.plan_out.parent.mkdir(parents=True, exist_ok=True)
            args.plan_out.write_text(json.dumps(result.to_json(), indent=1) + "\n",
                                     encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"{args.plan_out}: cannot write the plan: {exc.strerror}") from exc
    if args.explain:
        print(explain(result))
    if args.why:
        if args.explain:
            print()
        print(why(result, args.why, inventory))
    if not (args.explain or args.why):
        t = result.totals
        print(f"decision: {result.decision}" + (f" ({result.fallback})" if result.fallback else ""))
        print(f"selected {t['selected']} of {t['eligible']} variants, holdout {t['holdout']}, "
              f"{len(result.shards)} shard(s)")
        if args.plan_out:
            print(f"plan: {args.plan_out}")
    return 0


def _read_change(args: argparse.Namespace) -> Any:
    from selector import ChangeSet

    change = read_source(args)
    if change.event is None:
        return ChangeSet.from_diff(change.diff_text, source=change.diff_source)
    return ChangeSet.from_event(change.event, change.diff_text, diff_source=change.diff_source)


def _read_json(path: Path) -> Any:
    text = read_text(path, "JSON file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from exc


def _read_history(path: Path) -> Any:
    from selector import History, SelectorError

    try:
        return History.from_json(_read_json(path))
    except SelectorError as exc:
        raise CommandError(f"{path}: {exc}") from exc


def _read_inventory(path: Path, option: str) -> Any:
    from suites.model import Inventory

    if not path.exists():
        raise CommandError(
            f"{path}: no inventory there ({option}); build one inside the torch environment "
            f"with `spyre-ci inventory --out {path}`, or pass --inventory FILE"
        )
    try:
        return Inventory.load(path)
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise CommandError(f"{path}: not a readable inventory ({option}): {exc}; rebuild it "
                           f"with `spyre-ci inventory --out {path}`") from exc


def _default_inventory() -> Path:
    from suites.loader import SpecError
    from workflows.inventory_cache import default_inventory
    from workflows.settings import Settings

    try:
        return default_inventory(Settings.from_env().state_dir)
    except SpecError as exc:
        raise CommandError(f"the bundled suites do not load: {exc}") from exc


def _stored_history(changes: Any) -> Any:
    from workflows.history import HistoryError, open_history
    from workflows.settings import Settings

    settings = Settings.from_env()
    try:
        return open_history(settings.state_dir, settings.redis_url).snapshot(
            p.path for p in changes.paths)
    except HistoryError as exc:
        raise CommandError(str(exc)) from exc
