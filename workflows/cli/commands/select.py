"""`spyre-ci select`: run selector stages 1-3 on an event or a diff and show or save the Plan.

The selector is pure; this module does its I/O: reading the event, the diff, the inventory,
an optional History snapshot, previous inventory and impact map, and writing the plan.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import (
    COUNT_BUDGET_HELP,
    add_budget_arguments,
    add_source_arguments,
    check_budget,
    checked,
    history_store,
    read_impact_map,
    read_inventory,
    read_json,
    read_source,
    state_dir,
)
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings


# `--budget N` bounds what runs, the holdout included (selector.plan.holdout_room).
def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "select",
        help="decide which variant tests an upstream change needs, and why",
        description="Scout the change, score every variant with the heuristics, and plan "
        "(budget, holdout, shards). Nothing runs.",
    )
    add_source_arguments(parser)
    add_options(
        parser,
        "inventory",
        help={
            "inventory": "the Inventory to select from (default $SPYRE_CI_INVENTORY, else the one "
            "`spyre-ci run` uses: built from the bundled specs for the installed torch and "
            "cached in the state directory)"
        },
    )
    parser.add_argument(
        "--history",
        type=absolute_path,
        metavar="FILE.json",
        help="a History snapshot (selector.History JSON) instead of the "
        "History store `spyre-ci run` records into (SQLite in the state "
        "directory, or Redis with SPYRE_CI_REDIS_URL)",
    )
    parser.add_argument(
        "--previous-inventory",
        type=absolute_path,
        metavar="FILE.json.gz",
        help="the inventory of the last run: finds changed definitions and new variants",
    )
    add_options(parser, "impact_map", "no_trace")
    add_budget_arguments(parser, COUNT_BUDGET_HELP)
    add_options(
        parser,
        "seed",
        "shards",
        help={"seed": "holdout seed (default: the head sha, else a digest of the change)"},
    )
    parser.add_argument(
        "--trial",
        action="append",
        default=[],
        metavar="HEURISTIC",
        help="record this heuristic's scores without counting them (repeat)",
    )
    parser.add_argument(
        "--disable",
        action="append",
        default=[],
        metavar="HEURISTIC",
        help="do not run this heuristic (repeat)",
    )
    add_options(parser, "full")
    parser.add_argument(
        "--plan-out", type=absolute_path, metavar="FILE", help="write the Plan as JSON"
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print the change facts, the decision and the reasons",
    )
    parser.add_argument("--why", metavar="VARIANT_ID", help="print the story of one variant")
    parser.set_defaults(func=checked(select))


def select(args: argparse.Namespace, settings: Settings) -> int:
    from selector import PlanConfig
    from selector.explain import explain, why
    from selector.heuristics import REGISTRY
    from workflows.run.planning import plan_change
    from workflows.stores.sources import github_sources
    from workflows.tracing.trace_store import joined_trace
    from workflows.tracing.traces import describe

    check_budget(args)
    if args.plan_out is not None and args.plan_out.is_dir():
        raise CommandError(
            f"{args.plan_out}: is a directory (--plan-out names the file the Plan is written to)"
        )
    unknown = sorted((set(args.trial) | set(args.disable)) - REGISTRY.keys())
    if unknown:
        raise CommandError(
            f"--trial/--disable: unknown heuristic(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(REGISTRY))}"
        )
    # every input is read and checked before the History store is opened
    changes = _read_change(args)
    inventory = read_inventory(args.inventory or _default_inventory(settings), "--inventory")
    if args.why:
        _check_variant(args.why, inventory)
    previous = (
        read_inventory(args.previous_inventory, "--previous-inventory")
        if args.previous_inventory
        else None
    )
    impact = None
    given = args.impact_map or settings.impact_map
    if given and not args.no_trace:
        loaded = read_impact_map(given)
        impact = (loaded, describe(loaded, str(given), inventory))
    elif not args.no_trace:
        impact = joined_trace(inventory, None if args.history else _trace_store(settings))
    history = _read_history(args.history) if args.history else _stored_history(changes, settings)
    config = PlanConfig(
        budget_count=args.budget,
        budget_seconds=args.budget_time,
        holdout_rate=args.holdout,
        shards=args.shards,
        force_full=args.full,
        trial=frozenset(args.trial),
        disabled=frozenset(args.disable),
        seed=args.seed,
    )
    result = plan_change(
        changes,
        inventory,
        history,
        config,
        previous=previous,
        impact=impact,
        github=github_sources(settings),
    )
    if args.plan_out:
        try:
            args.plan_out.parent.mkdir(parents=True, exist_ok=True)
            args.plan_out.write_text(
                json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8"
            )
        except OSError as exc:
            raise CommandError(f"{args.plan_out}: cannot write the plan: {exc.strerror}") from exc
    chosen = result.plan
    if args.explain:
        print(explain(chosen))
    if args.why:
        if args.explain:
            print()
        print(why(chosen, args.why, inventory))
    if not (args.explain or args.why):
        t = chosen.totals
        print(f"decision: {chosen.decision}" + (f" ({chosen.fallback})" if chosen.fallback else ""))
        print(
            f"selected {t.selected} of {t.eligible} variants, holdout {t.holdout}, "
            f"{len(chosen.shards)} shard(s)"
        )
        if args.plan_out:
            print(f"plan: {args.plan_out}")
    return ExitCode.OK


def _read_change(args: argparse.Namespace) -> Any:
    from selector import ChangeSet

    change = read_source(args)
    if change.event is None:  # a bare --diff: read_source always has its text
        chosen = ChangeSet.from_diff(change.diff_text or "", source=change.diff_source)
        if chosen.truncated:  # a diff the user gave is taken as written, as `run` takes it
            raise CommandError(
                f"{change.diff_source or args.diff}: a hunk counts more lines than the diff "
                "holds (the diff is cut or was edited by hand): refused rather than planned "
                "as a full run; make it again with `git diff`"
            )
        return chosen
    return ChangeSet.from_event(change.event, change.diff_text, diff_source=change.diff_source)


def _read_history(path: Path) -> Any:
    """A History snapshot (--history); a file of the wrong shape is named with the field."""
    from selector import History, SelectorError

    try:
        return History.from_json(read_json(path, "History snapshot"))
    except SelectorError as exc:
        raise CommandError(f"{path}: not a History snapshot (--history): {exc}") from exc


def _check_variant(variant_id: str, inventory: Any) -> None:
    """`--why ID` must name a variant of the inventory; a typo gets the closest ids."""
    import difflib

    ids = [v.id for v in inventory.variants]
    if variant_id in set(ids):
        return
    close = difflib.get_close_matches(variant_id, ids, n=3, cutoff=0.6)
    hint = (
        f"; did you mean: {', '.join(close)}"
        if close
        else ("; ids are suite::template::subject::dtype (`spyre-ci suites expand` lists them)")
    )
    raise CommandError(
        f"--why {variant_id}: no such variant in the inventory ({len(ids)} variants){hint}"
    )


def _default_inventory(settings: Settings) -> Path:
    """$SPYRE_CI_INVENTORY, else the cached Inventory `spyre-ci run` uses."""
    from suites.loader import SpecError
    from workflows.stores.inventory_cache import default_inventory

    if settings.inventory is not None:
        return settings.inventory
    try:
        return default_inventory(state_dir(settings))
    except SpecError as exc:
        raise CommandError(f"the bundled suites do not load: {exc}") from exc


def _trace_store(settings: Settings) -> Any:
    """The traces stored beside History (None when History is given as a file)."""
    from workflows.tracing.trace_store import trace_store_for

    return trace_store_for(history_store(settings))


def _stored_history(changes: Any, settings: Settings) -> Any:
    return history_store(settings).snapshot(p.path for p in changes.paths)
