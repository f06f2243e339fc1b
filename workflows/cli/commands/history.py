"""`spyre-ci history forget|check|confirm`: undo or vet what runs taught History."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from contracts.run_summary import RunSummary
from workflows.cli.change_input import checked, history_store
from workflows.cli.options import add_options
from workflows.errors import CommandError
from workflows.settings import Settings

# Messages the tool itself writes when it, not a test, failed (earlier versions recorded
# them as test errors).
_INFRA_MARKS = ("shard subprocess failed", "before its first test", "cannot start the test")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "history",
        help="undo or vet what runs taught History (forget, check, confirm)",
        description="History is what the selector learns from: outcomes, baselines, flaky "
        "marks and co-failures. These commands remove one run's share of it, list runs whose "
        "share looks like the tool's fault, and apply a run that was held back. `check` "
        "exits 5 when it lists a run to confirm or forget, 0 when there is none.",
    )
    sub = parser.add_subparsers(dest="history_command", metavar="ACTION", required=True)
    forget = sub.add_parser(
        "forget",
        help="remove everything one run taught History "
        "(idempotent; baselines it replaced come back)",
    )
    forget.add_argument("run_id")
    forget.set_defaults(func=checked(forget_run))
    check = sub.add_parser(
        "check", help="list runs whose learning looks suspect (exit 5 when there is one)"
    )
    add_options(
        check,
        "limit",
        "max_share",
        help={"limit": "runs to look at (default 200)"},
        default={"limit": 200},
    )
    check.set_defaults(func=checked(check_runs))
    confirm = sub.add_parser("confirm", help="let History learn a run that was held back")
    confirm.add_argument("run_id")
    confirm.set_defaults(func=checked(confirm_run))


def forget_run(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import replace

    from workflows.stores.history import RunState

    history = history_store(settings)
    run = history.get_run(args.run_id)
    removed = history.forget(args.run_id)
    if run is None and not any(removed.values()):
        raise CommandError(f"no run {args.run_id!r} in History; `spyre-ci runs list` shows the ids")
    if run is not None:
        history.save_run(
            replace(
                run,
                state=RunState.FORGOTTEN,
                summary=replace(run.summary, was=run.summary.was or str(run.state)),
            )
        )
    what = ", ".join(f"{n} {kind}" for kind, n in removed.items() if n) or "nothing left"
    print(f"run {args.run_id}: forgotten ({what} removed)")
    return ExitCode.OK


def confirm_run(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import replace

    from workflows.stores.history import RunState

    history = history_store(settings)
    if not history.confirm(args.run_id):
        raise CommandError(
            f"run {args.run_id} has nothing held back (`spyre-ci history check` "
            "lists the runs that do)"
        )
    run = history.get_run(args.run_id)
    if run is not None:
        history.save_run(replace(run, state=RunState.COMPLETED))
    print(f"run {args.run_id}: confirmed; History learned it")
    return ExitCode.OK


def check_runs(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.stores.history import RunState

    history = history_store(settings)
    runs = history.list_runs(args.limit)
    suspects: list[tuple[str, str, str]] = []
    for run in runs:
        if run.state == RunState.HELD:
            suspects.append((run.run_id, run.state, f"held back: {_held_back(run.summary)}"))
        elif run.state == RunState.COMPLETED:
            why = suspicion(run.summary, args.max_share)
            if why:
                suspects.append((run.run_id, run.state, why))
    unlearned = [r for r in runs if r.state in (RunState.STOPPED, RunState.INFRA_ERROR)]
    if unlearned:
        # History learns last: these taught it nothing, but a maintainer wants to see them
        # (a device that keeps faulting, runs that keep stopping).
        print(f"{len(unlearned)} run(s) that taught History nothing:")
        for run in unlearned:
            if run.state == RunState.STOPPED:
                why = f"stopped: {run.summary.stopped_because or 'unknown'}"
                hint = f"`spyre-ci runs resume {run.run_id}`"
            else:
                results = run.summary.results
                causes = (results.infrastructure if results is not None else ()) or ("unknown",)
                why = f"infrastructure error: {str(causes[0])[:200]}"
                hint = "fix the cause and run it again"
            print(f"  {run.run_id}  [{run.state}]  {why}")
            print(f"      -> {hint}")
    if not suspects:
        print(f"no suspect runs among the last {len(runs)}")
        return ExitCode.OK
    print(f"{len(suspects)} run(s) whose learning looks suspect:")
    for run_id, state, why in suspects:
        action = "confirm or forget" if state == RunState.HELD else "forget"
        print(f"  {run_id}  [{state}]  {why}")
        print(
            f"      -> `spyre-ci history {action.split()[0]} {run_id}`"
            + (f" or `spyre-ci history forget {run_id}`" if state == RunState.HELD else "")
        )
    # Runs to confirm or forget: a check that answered "no". The runs that taught nothing
    # (listed above) leave History as it was, so they alone do not.
    return ExitCode.CHECK_FAILED


def _held_back(summary: RunSummary) -> str | None:
    return summary.results.held_back if summary.results is not None else None


def suspicion(summary: RunSummary, max_share: float) -> str | None:
    """Why a learned run looks like the tool's fault, from what it left in its out directory."""
    from selector.verify import mass_failure
    from workflows.run.run_folder import load_planned
    from workflows.run.run_model import PipelineError

    out = Path(summary.out_dir)
    try:
        record = json.loads((out / "run.json").read_text(encoding="utf-8"))
        shards = load_planned(out).shards
    except (OSError, ValueError, KeyError, TypeError, PipelineError):
        record, shards = None, []
    if record is None:
        results = summary.results
        ran, count = (results.ran, results.new_failures) if results is not None else (0, 0)
        if ran and count >= 20 and count / ran > max_share:
            return f"{count} of {ran} variants failed new (its out directory is gone)"
        return None
    from suites.model import Outcome, Status

    results = record.get("results", [])
    outcomes = [
        Outcome(
            r["id"], Status(r["status"]), float(r.get("duration_s", 0.0)), str(r.get("message", ""))
        )
        for r in results
    ]
    new = [
        r["id"]
        for r in results
        if Status(r["status"]).is_failure and r.get("classification") in (None, "new")
    ]
    marked = [r for r in results if any(m in str(r.get("message", "")) for m in _INFRA_MARKS)]
    if marked:
        return (
            f"{len(marked)} result(s) carry the tool's own error "
            f"({str(marked[0].get('message', ''))[:100]!r})"
        )
    return mass_failure(outcomes, shards, new, max_share=max_share)
