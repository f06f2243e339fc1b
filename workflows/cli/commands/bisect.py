"""`spyre-ci bisect`: the upstream commit that broke a variant, without building torch
(`workflows.drivers.bisect`)."""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflows.cli.change_input import checked, history_store, state_dir
from workflows.cli.options import add_options
from workflows.errors import CommandError
from workflows.settings import Settings

_SHA = re.compile(r"[0-9a-fA-F]{7,40}")
# Each of GitHub's answers (connect, then each read of it); a slower one is GitHub not
# answering (exit 3). The bisect's deadline bounds all of them together.
GITHUB_REQUEST_TIMEOUT_S = 10.0
DEFAULT_DEADLINE_S = 3600.0  # the whole bisect: GitHub's answers and every point's runs


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bisect",
        help="name the upstream commit that broke variants, replaying Python-only commits "
        "on the installed torch (no build)",
        description="List the window's commits through GitHub (SPYRE_CI_GITHUB_URL, "
        "SPYRE_CI_GITHUB_TOKEN), replay them cumulatively on the installed torch (the "
        "window's base) through the change overlay, and bisect: each step is decided by 2 "
        "agreeing runs (up to 5 when they disagree). A commit whose only unreplayable files "
        "need a build is replayed by its Python part, assuming its C++ part does not change "
        "the outcome (said, with a lower confidence); when every Python part passes, the "
        "answer is the window of those C++ parts; any other commit that cannot be replayed "
        "narrows the window to it. Exit 0: a culprit or a window; 5: none in the window "
        "(fails on the base, or passes with every commit replayed); 2: bad input; 3: a step "
        "could not run, or the deadline passed first (what was found is printed and kept).",
    )
    parser.add_argument(
        "--run",
        metavar="RUN_ID",
        help="bisect the windows that run's forensics found for its new failures, and add "
        "the answers to its forensics, report and triage verdict",
    )
    parser.add_argument("--last-good", metavar="SHA", help="the last upstream commit that passed")
    parser.add_argument("--first-bad", metavar="SHA", help="the first upstream commit that failed")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="ID",
        help="a variant id to bisect (repeatable; with --run, only these of its failures)",
    )
    parser.add_argument(
        "--repo",
        default="",
        metavar="OWNER/NAME",
        help="the upstream repository (default: the run's, else pytorch/pytorch)",
    )
    add_options(parser, "specs", "test_timeout", "memory_mb")
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=DEFAULT_DEADLINE_S,
        metavar="SECONDS",
        help="stop the whole bisect (GitHub's answers and every point's runs) after this "
        f"long, with what it found by then (default: {DEFAULT_DEADLINE_S:g}; each GitHub "
        f"request also times out after {GITHUB_REQUEST_TIMEOUT_S:g} s)",
    )
    parser.add_argument("--json", action="store_true", help="print the answers as JSON")
    parser.set_defaults(func=checked(bisect))


def bisect(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.drivers.bisect.job import BisectOptions, run_bisect
    from workflows.runner.shard_runner import Limits

    seconds = float(args.deadline_s)
    if not (math.isfinite(seconds) and seconds > 0):
        raise CommandError(f"--deadline-s {args.deadline_s:g}: must be more than 0 (seconds)")
    state = state_dir(settings)  # the record and the work go there: checked before any step
    options = BisectOptions(
        Limits(test_timeout_s=args.test_timeout, memory_mb=args.memory_mb),
        seconds,
        run_id=args.run or "",
        last_good=args.last_good or "",
        first_bad=args.first_bad or "",
        variants=tuple(args.variant),
        repo=args.repo,
        specs=tuple(args.specs),
    )
    history = None
    if args.run:
        if args.last_good or args.first_bad:
            raise CommandError("--run takes its windows from the run: give --run or the shas")
        history = history_store(settings)
    else:
        for option, value in (("--last-good", args.last_good), ("--first-bad", args.first_bad)):
            if not value:
                raise CommandError(f"{option} SHA is needed (or --run RUN_ID)")
            if not _SHA.fullmatch(value):
                raise CommandError(f"{option} {value!r}: not a git sha (7 to 40 hex digits)")
        if args.last_good.lower() == args.first_bad.lower():
            raise CommandError(
                f"--last-good and --first-bad are the same commit ({args.last_good}): the "
                "window is empty"
            )
        if not args.variant:
            raise CommandError("--variant ID is needed (repeatable): the variants to bisect")
    adapter = _github(settings, min(GITHUB_REQUEST_TIMEOUT_S, seconds))
    result = run_bisect(
        options,
        state,
        history,
        adapter,
        warm=settings.zygote,
        found=(lambda _found, _path: None) if args.json else _print,
    )
    if args.json:
        results = result.results
        print(json.dumps(results if len(results) != 1 else results[0], indent=2))
    return result.code


def _print(found: Mapping[str, Any], path: Path) -> None:
    for vid, answer in sorted(found["variants"].items()):
        print(f"{vid}: {answer['summary']} ({answer['confidence']} confidence)")
        for step in answer["steps"]:
            print(
                f"  after {str(step['after'])[:12]} ({step['applied']} commit(s) applied): "
                f"{step['decision']} ({', '.join(step['runs'])})"
            )
    print(f"record: {path}")


def _github(settings: Settings, timeout: float) -> Any:
    from relay.github import GitHubAdapter

    if not settings.github_token:
        raise CommandError(
            "the bisect lists the window's commits through GitHub: set SPYRE_CI_GITHUB_TOKEN "
            "(and SPYRE_CI_GITHUB_URL for a GitHub Enterprise server)"
        )
    return GitHubAdapter(base_url=settings.github_url, token=settings.github_token, timeout=timeout)
