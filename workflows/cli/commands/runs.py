"""`spyre-ci runs list|show|resume|pages`: inspect past runs in History, continue one, or
write the run browser's pages."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.exit_codes import ExitCode
from contracts.run_summary import ForensicsNote
from workflows.cli.change_input import checked, history_store
from workflows.cli.options import add_options
from workflows.errors import CommandError
from workflows.settings import Settings

if TYPE_CHECKING:
    from workflows.stores.history import RunState


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("runs", help="inspect past runs (list, show, resume, pages)")
    sub = parser.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the most recent runs, newest first")
    add_options(listing, "limit", help={"limit": "how many (default 20)"}, default={"limit": 20})
    listing.set_defaults(func=checked(list_runs))
    show = sub.add_parser("show", help="one run: its state, counts and where its outputs are")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="print the stored record as JSON")
    show.set_defaults(func=show_run)
    resume = sub.add_parser("resume", help="continue a run that stopped (keeps finished tests)")
    resume.add_argument("run_id")
    add_options(
        resume,
        "jobs",
        "no_progress",
        help={"jobs": "embedded runs: pytest subprocesses at a time (default: CPU count)"},
    )
    resume.set_defaults(func=checked(resume_run))
    pages = sub.add_parser(
        "pages", help="write the run browser's pages (runs, variants, flaky, quality) for serve"
    )
    add_options(
        pages,
        "runs_dir",
        "limit",
        help={"limit": "the N most recent runs (default 50)"},
        default={"limit": 50},
    )
    pages.set_defaults(func=checked(write_pages))


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def list_runs(args: argparse.Namespace, settings: Settings) -> int:
    runs = history_store(settings).list_runs(args.limit)
    if not runs:
        print("no runs yet: start one with `spyre-ci run --event FILE`")
        return ExitCode.OK
    row = "{:<28} {:<10} {:<20} {:>8} {:>6} {:>4}"
    print(row.format("run", "state", "updated (UTC)", "selected", "failed", "new"))
    for run in runs:
        facts, results = run.summary.plan, run.summary.results
        print(
            row.format(
                run.run_id,
                run.state,
                _when(run.updated_at),
                facts.selected if facts is not None else "-",
                results.failed if results is not None else "-",
                results.new_failures if results is not None else "-",
            )
        )
    return ExitCode.OK


def write_pages(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.cli.browser import write_pages as write

    if not args.out:
        raise CommandError("runs pages: give --out DIR or set SPYRE_CI_RUNS_DIR")
    written = write(history_store(settings), Path(args.out), args.limit)
    print(f"wrote {len(written)} pages under {args.out} (served at /runs/, /flaky, /quality)")
    return ExitCode.OK


def show_run(args: argparse.Namespace, settings: Settings) -> int:
    run = history_store(settings).get_run(args.run_id)
    if run is None:
        raise CommandError(f"no run {args.run_id!r} in History; `spyre-ci runs list` shows the ids")
    if args.json:
        print(json.dumps(run.to_json(), indent=2, sort_keys=True))
        return ExitCode.OK
    print(f"run {run.run_id}: {run.state} (updated {_when(run.updated_at)} UTC)")
    for key, value in sorted(run.summary.to_json().items()):
        if key != "forensics":
            for line in field_lines(key, value):
                print(f"  {line}")
    for line in forensics_lines(run.summary.forensics):
        print(f"  {line}")
    from workflows.stores.history import RunState

    meaning = _state_meaning().get(run.state, str(run.state))
    if run.state in (RunState.PLANNED, RunState.FINISHING, RunState.STOPPED):
        print(
            f"  next: the run has not finished ({meaning}); "
            f"`spyre-ci runs resume {run.run_id}` continues it and keeps the tests that "
            "already reported"
        )
    elif run.state != RunState.COMPLETED:
        print(f"  state: {meaning}")
    return ExitCode.OK


def field_lines(key: str, value: Any) -> list[str]:
    """One summary field as a person reads it: times as UTC dates, mappings as `name value`
    pairs (a long or nested one a line per name), lists a line per long item, no reprs."""
    if isinstance(value, Mapping) and (
        len(value) > 6 or any(isinstance(v, Mapping | list | tuple) for v in value.values())
    ):
        lines = [f"{key}:"] if value else [f"{key}: none"]
        for name, item in value.items():
            lines += [f"  {line}" for line in field_lines(str(name), item)]
        return lines
    if isinstance(value, list | tuple) and any(len(_plain(key, v)) > 40 for v in value):
        return [f"{key}:", *(f"  - {_plain(key, v)}" for v in value)]
    return [f"{key}: {_plain(key, value)}"]


def _plain(key: str, value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) and key.endswith("_at"):
        return f"{_when(float(value))} UTC"  # stored as epoch seconds
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_plain(str(k), v)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple):
        return ", ".join(_plain(key, v) for v in value) or "none"
    return str(value)


def forensics_lines(found: ForensicsNote | None) -> list[str]:
    """`runs show`'s lines for the run's new failures: triage, last good / first bad."""
    if found is None or not found.failures:
        return []
    from dashboard_export.report import forensics_line

    lines = [f"triage: {found.triage} ({found.confidence} confidence)"]
    for entry in found.failures:
        lines.append(f"  {entry.id}: {forensics_line(entry)}")
    if found.more:
        lines.append(f"  ... and {found.more} more (see forensics.json in the out directory)")
    return lines


def _state_meaning() -> dict[RunState, str]:
    from workflows.stores.history import RunState

    return {
        RunState.PLANNED: "planned, shards running or stopped before they all reported",
        RunState.FINISHING: "stopped during reruns, expansion or export",
        RunState.STOPPED: "stopped by the error above",
        RunState.HELD: "finished, but History has not learned it (see held_back)",
        RunState.INFRA_ERROR: "its tests could not run (see infrastructure); nothing was learned",
        RunState.FORGOTTEN: "what it taught History was removed by `spyre-ci history forget`",
    }


def resume_run(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.cli.summary import print_summary
    from workflows.drivers import embedded
    from workflows.run.context import RunContext

    if settings.redis_url:
        from workflows.drivers import distributed
        from workflows.stores.redis_clients import answering

        # Redis down (or failing) is an outage named in one line: exit 3, never a traceback.
        with answering(settings.redis_url, f"resuming run {args.run_id}"):
            enqueued = distributed.resume(args.run_id)
        if enqueued:
            print(f"run {args.run_id}: shards and finish re-enqueued for the workers")
            return ExitCode.OK
    ctx = RunContext.open(settings, history_store(settings))  # the run's services, built once here
    finished = embedded.resume(args.run_id, ctx, jobs=args.jobs, show_progress=not args.no_progress)
    print_summary(finished)
    return int(finished.exit_code)  # the run's verdict (`FinishedRun.exit_code`)
