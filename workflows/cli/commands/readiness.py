"""`spyre-ci readiness`: the L2 -> L3 promotion criteria over a window of History's runs.

Exit code 0 when every criterion passes (READY), 5 when one fails (NOT READY) or lacks the
evidence it needs (NOT ENOUGH DATA: History does not cover the 14-day window, too few jobs,
under 30 days at L2): a check that answers "no", never 1 (new test failures); 2 for bad
input (a state directory that cannot be used included), 3 when the History store is down.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import time
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import history_store
from workflows.errors import CommandError
from workflows.settings import Settings

RUNS_READ = 100_000  # run records read from History; the window is cut from them


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "readiness",
        help="promotion readiness (L2 -> L3): the CI relay's criteria over 14 days",
        description="Compute, from the runs History recorded, the criteria a downstream "
        "meets to be promoted from L2 to L3: 30 days at L2, and over the 14-day window a CI "
        "job pass rate of at least 90 %, average queue time under 30 min, share of jobs "
        "running over 3 h under 1 %, median end-to-end time under 3 h, timeout rate under "
        "1 %. A criterion without the evidence it needs (History covering the 14 days, "
        "enough finished jobs) says NOT ENOUGH DATA and what is missing. Exit code 0 when "
        "all pass (READY), 5 when one fails or lacks its evidence, 2 for bad input, 3 when "
        "History cannot be read.",
    )
    parser.add_argument(
        "--days", type=float, default=14.0, help="length of the window in days (default 14)"
    )
    parser.add_argument(
        "--now",
        metavar="ISO",
        help="end of the window, ISO 8601 (default: now; no zone means UTC)",
    )
    parser.add_argument(
        "--l2-since",
        metavar="ISO",
        help="when the relay's allowlist moved the repository to L2, ISO 8601 (default: "
        "History's first run, the earliest evidence of it reporting)",
    )
    parser.add_argument("--json", action="store_true", help="print the assessment as JSON")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="also write Markdown here")
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the HTML page here (`<runs_dir>/readiness.html` is what `spyre-ci "
        "serve` answers at /readiness)",
    )
    parser.set_defaults(func=readiness)


def parse_now(text: str | None, option: str = "--now") -> float:
    """`--now` (or `option`) as epoch seconds (CommandError naming it when it is not ISO
    8601)."""
    if text is None:
        return time.time()
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(
            f"{option} {text!r}: not an ISO 8601 date or time (e.g. 2025-06-01T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def check_days(days: float) -> float:
    if not math.isfinite(days) or days <= 0 or days > 3660:
        raise CommandError(f"--days {days:g}: must be a number of days in (0, 3660]")
    return days


def readiness(args: argparse.Namespace, settings: Settings) -> int:
    from dashboard_export.readiness import ReadinessError, assess
    from dashboard_export.readiness_report import render_html, render_markdown, render_text

    days = check_days(args.days)
    now = parse_now(args.now)
    l2_since = None if args.l2_since is None else parse_now(args.l2_since, "--l2-since")
    if l2_since is not None and l2_since > now:
        raise CommandError(f"--l2-since {args.l2_since}: after the window's end (--now)")
    for option, path in (("--markdown", args.markdown), ("--html", args.html)):
        if path is not None and path.is_dir():
            raise CommandError(f"{option} {path}: a directory; name a file")
    runs = history_store(settings).list_runs(RUNS_READ)  # an outage: exit 3
    try:
        result = assess(runs, now, days, l2_since)
    except ReadinessError as exc:
        raise CommandError(f"History: {exc}") from exc
    for path, text in ((args.markdown, render_markdown), (args.html, render_html)):
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text(result), encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"{path}: cannot write: {exc}") from exc
    if args.json:
        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print(render_text(result), end="")
    return ExitCode.OK if result.ready else ExitCode.CHECK_FAILED
