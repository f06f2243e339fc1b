"""`spyre-ci bisect`: the upstream commit that broke a variant, without building torch
(`workflows.drivers.bisect`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import checked, history_store, state_dir
from workflows.cli.options import add_options
from workflows.errors import CommandError, InfrastructureError
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
    from workflows.drivers.bisect import BisectInfra, Deadline, Target, record, run
    from workflows.run.forensics import UPSTREAM_REPO
    from workflows.runner.shard_runner import Limits

    seconds = float(args.deadline_s)
    if not (math.isfinite(seconds) and seconds > 0):
        raise CommandError(f"--deadline-s {args.deadline_s:g}: must be more than 0 (seconds)")
    state = state_dir(settings)  # the record and the work go there: checked before any step
    limits = Limits(test_timeout_s=args.test_timeout, memory_mb=args.memory_mb)
    if args.run:
        if args.last_good or args.first_bad:
            raise CommandError("--run takes its windows from the run: give --run or the shas")
        targets, run_state = _run_targets(args, limits, settings)
        key = args.run
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
        targets = [
            Target(
                args.repo or UPSTREAM_REPO,
                args.last_good.lower(),
                args.first_bad.lower(),
                tuple(dict.fromkeys(args.variant)),
                tuple(args.specs),
                limits,
            )
        ]
        run_state = None
        key = record.window_key(args.last_good, args.first_bad)
    deadline = Deadline.after(seconds)  # from here: GitHub's answers and the points' runs
    adapter = _github(settings, min(GITHUB_REQUEST_TIMEOUT_S, seconds))
    results: list[dict[str, Any]] = []
    cut = False  # a later window could not be listed: what the earlier ones found is kept
    for target in targets:
        work = state / record.FOLDER / "work" / key
        try:
            found = run(target, adapter, work, warm=settings.zygote, deadline=deadline)
        except BisectInfra as exc:
            if not results:
                raise InfrastructureError(f"the bisect stopped: {exc}") from exc
            print(f"spyre-ci: the bisect stopped: {exc}", file=sys.stderr)
            cut = True
            break
        path = record.save(state, key, found)
        results.append(found)
        if not args.json:
            _print(found, path)
    answers = {vid: a for found in results for vid, a in found["variants"].items()}
    if run_state is not None:
        _add_to_run(run_state, answers)
    if args.json:
        print(json.dumps(results if len(results) != 1 else results[0], indent=2))
    return ExitCode.INFRASTRUCTURE if cut else exit_code(answers)


def exit_code(answers: Mapping[str, Mapping[str, Any]]) -> ExitCode:
    """0 when every variant has an answer in the window (a culprit, a window, a flaky window);
    3 when the deadline stopped one before its answer (what it found is kept, no verdict);
    5 when one has none (it fails at the base, passes with every commit, or no step could be
    decided): a check that answered "no", never 1, which says tests newly failed."""
    from workflows.drivers.bisect.answer import FOUND
    from workflows.drivers.bisect.search import STOPPED

    if any(a["outcome"] == STOPPED for a in answers.values()):
        return ExitCode.INFRASTRUCTURE
    found_all = all(a["outcome"] in FOUND for a in answers.values())
    return ExitCode.OK if found_all else ExitCode.CHECK_FAILED


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


class _RunState:
    """A run being bisected: its History record, its out directory and its RunRecord."""

    def __init__(self, history: Any, run: Any, out_dir: Path, record: Any) -> None:
        self.history, self.run, self.out_dir, self.record = history, run, out_dir, record


def _run_targets(
    args: argparse.Namespace, limits: Any, settings: Settings
) -> tuple[list[Any], _RunState]:
    """One target per window of the run's forensics (only `--variant` ids when given)."""
    from dashboard_export.model import RunRecord
    from workflows.drivers.bisect import Target
    from workflows.run.forensics import UPSTREAM_REPO
    from workflows.run.run_folder import load_planned
    from workflows.run.run_model import PipelineError

    history = history_store(settings)
    run = history.get_run(args.run)  # a store that is down: exit 3, from the CLI's one mapping
    if run is None:
        raise CommandError(f"no run {args.run!r} in History; `spyre-ci runs list` shows the ids")
    out_dir = Path(run.summary.out_dir)
    try:
        data = json.loads((out_dir / "run.json").read_text(encoding="utf-8"))
        record = RunRecord.from_json(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(
            f"run {args.run}: its record {out_dir / 'run.json'} cannot be read ({exc}); "
            "give the window with --last-good, --first-bad and --variant"
        ) from None
    specs: Sequence[str] = tuple(args.specs)
    if not specs:  # the specs the run ran its variants from
        with contextlib.suppress(PipelineError):
            specs = load_planned(out_dir, args.run).request.specs
    wanted = set(args.variant)
    windows: dict[tuple[str, str], list[str]] = {}
    for vid, entry in sorted(record.forensics.items()):
        good, bad = entry.get("last_good_sha"), entry.get("first_bad_sha")
        if wanted and vid not in wanted:
            continue
        if good and bad and good != bad:
            windows.setdefault((str(good), str(bad)), []).append(vid)
        else:
            print(
                f"spyre-ci: {vid}: no window to bisect (last good {good or 'unknown'}, first bad "
                f"{bad or 'unknown'})",
                file=sys.stderr,
            )
    unknown = wanted - set(record.forensics)
    if unknown:
        raise CommandError(
            f"run {args.run} has no new failure {', '.join(sorted(unknown))} in its forensics"
        )
    if not windows:
        raise CommandError(
            f"run {args.run}: its forensics found no window to bisect (a new failure with a "
            "last good and a first bad sha); give the shas with --last-good and --first-bad"
        )
    repo = args.repo or getattr(record.event, "repo", "") or UPSTREAM_REPO
    targets = [
        Target(repo, good, bad, tuple(ids), tuple(specs), limits)
        for (good, bad), ids in windows.items()
    ]
    return targets, _RunState(history, run, out_dir, record)


def _add_to_run(state: _RunState, answers: Mapping[str, Mapping[str, Any]]) -> None:
    """The answers into the run's forensics (History's summary: `runs show`, the run
    browser) and its outputs (run.json, forensics.json, report, callback's verdict)."""
    from dataclasses import replace

    from dashboard_export.layout import write_run
    from workflows.drivers.bisect import record
    from workflows.stores.run_summary import ForensicsNote

    rec = state.record
    verdict = record.verdict_with_bisect(rec.triage_verdict, answers)
    updated = replace(
        rec, forensics=record.with_bisect(rec.forensics, answers), triage_verdict=verdict
    )
    write_run(updated, state.out_dir)
    kept = state.run.summary.forensics or ForensicsNote()
    kept = replace(
        kept,
        failures=tuple(
            record.with_bisect(
                {w.id: f for w, f in zip(kept.entries, kept.failures, strict=True)}, answers
            ).values()
        ),
    )
    if verdict:
        kept = replace(kept, triage=verdict.get("category"), confidence=verdict.get("confidence"))
    state.run.summary = replace(state.run.summary, forensics=kept)
    state.history.save_run(state.run)
    print(f"added to run {state.run.run_id}: {state.out_dir / 'forensics.json'}, report, callback")
