"""The bisect as one job: the windows to bisect (given, or a run's forensics), each bisected
within one deadline, each answer kept, and a run's answers added to its outputs.

`spyre-ci bisect` parses its options into `BisectOptions` and calls `run_bisect`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.drivers.bisect import record
from workflows.drivers.bisect.replay import BisectInfra, Deadline, Target, run
from workflows.errors import CommandError, InfrastructureError
from workflows.run.forensics import UPSTREAM_REPO as UPSTREAM
from workflows.runner.shard_runner import Limits


@dataclass(frozen=True)
class BisectOptions:
    """What one bisect is asked for: a run's windows (`run_id`), or one window given by its
    shas and variants."""

    limits: Limits
    deadline_s: float
    run_id: str = ""
    last_good: str = ""
    first_bad: str = ""
    variants: tuple[str, ...] = ()
    repo: str = ""
    specs: tuple[str, ...] = ()


@dataclass
class BisectResult:
    """Each window's answer as kept (`record.save`), and whether the deadline or GitHub cut
    the later windows."""

    results: list[dict[str, Any]] = field(default_factory=list)
    cut: bool = False

    @property
    def answers(self) -> dict[str, Any]:
        return {vid: a for found in self.results for vid, a in found["variants"].items()}

    @property
    def code(self) -> ExitCode:
        return ExitCode.INFRASTRUCTURE if self.cut else exit_code(self.answers)


def run_bisect(
    options: BisectOptions,
    state: Path,
    history: Any,
    adapter: Any,
    *,
    warm: bool = True,
    found: Callable[[Mapping[str, Any], Path], None] = lambda _found, _path: None,
) -> BisectResult:
    """Bisect the windows `options` names under the state directory `state` (`history`: the
    run's History, for `run_id`); `found(answer, path)` hears each window's answer as it is
    kept. A run's answers are added to its forensics, report and verdict."""
    if options.run_id:
        targets, run_state = _run_targets(options, history)
        key = options.run_id
    else:
        targets = [
            Target(
                options.repo or UPSTREAM,
                options.last_good.lower(),
                options.first_bad.lower(),
                tuple(dict.fromkeys(options.variants)),
                options.specs,
                options.limits,
            )
        ]
        run_state = None
        key = record.window_key(options.last_good, options.first_bad)
    deadline = Deadline.after(options.deadline_s)  # GitHub's answers and the points' runs
    result = BisectResult()
    for target in targets:
        work = state / record.FOLDER / "work" / key
        try:
            answer = run(target, adapter, work, warm=warm, deadline=deadline)
        except BisectInfra as exc:
            if not result.results:
                raise InfrastructureError(f"the bisect stopped: {exc}") from exc
            print(f"spyre-ci: the bisect stopped: {exc}", file=sys.stderr)
            result.cut = True  # a later window could not be listed: the earlier ones are kept
            break
        path = record.save(state, key, answer)
        result.results.append(answer)
        found(answer, path)
    if run_state is not None:
        _add_to_run(run_state, result.answers)
    return result


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


class _RunState:
    """A run being bisected: its History record, its out directory and its RunRecord."""

    def __init__(self, history: Any, run: Any, out_dir: Path, record: Any) -> None:
        self.history, self.run, self.out_dir, self.record = history, run, out_dir, record


def _run_targets(options: BisectOptions, history: Any) -> tuple[list[Any], _RunState]:
    """One target per window of the run's forensics (only `--variant` ids when given)."""
    from dashboard_export.model import RunRecord
    from workflows.run.run_folder import load_planned
    from workflows.run.run_model import PipelineError

    # A store that is down: exit 3, from the CLI's one mapping.
    bisected = history.get_run(options.run_id)
    if bisected is None:
        raise CommandError(
            f"no run {options.run_id!r} in History; `spyre-ci runs list` shows the ids"
        )
    out_dir = Path(bisected.summary.out_dir)
    try:
        data = json.loads((out_dir / "run.json").read_text(encoding="utf-8"))
        record = RunRecord.from_json(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(
            f"run {options.run_id}: its record {out_dir / 'run.json'} cannot be read ({exc}); "
            "give the window with --last-good, --first-bad and --variant"
        ) from None
    specs: Sequence[str] = options.specs
    if not specs:  # the specs the run ran its variants from
        with contextlib.suppress(PipelineError):
            specs = load_planned(out_dir, options.run_id).request.specs
    wanted = set(options.variants)
    windows: dict[tuple[str, str], list[str]] = {}
    for vid, entry in sorted(record.forensics.items()):
        good, bad = entry.last_good_sha, entry.first_bad_sha
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
            f"run {options.run_id} has no new failure {', '.join(sorted(unknown))} in its forensics"
        )
    if not windows:
        raise CommandError(
            f"run {options.run_id}: its forensics found no window to bisect (a new failure with a "
            "last good and a first bad sha); give the shas with --last-good and --first-bad"
        )
    repo = options.repo or getattr(record.event, "repo", "") or UPSTREAM
    targets = [
        Target(repo, good, bad, tuple(ids), tuple(specs), options.limits)
        for (good, bad), ids in windows.items()
    ]
    return targets, _RunState(history, bisected, out_dir, record)


def _add_to_run(state: _RunState, answers: Mapping[str, Mapping[str, Any]]) -> None:
    """The answers into the run's forensics (History's summary: `runs show`, the run
    browser) and its outputs (run.json, forensics.json, report, callback's verdict)."""
    from dataclasses import replace

    from contracts.run_summary import ForensicsNote
    from dashboard_export.layout import write_run
    from workflows.drivers.bisect import record

    rec = state.record
    verdict = record.verdict_with_bisect(rec.triage_verdict, answers)
    updated = replace(
        rec, forensics=record.with_bisect(rec.forensics, answers), triage_verdict=verdict
    )
    write_run(updated, state.out_dir)
    kept = state.run.summary.forensics or ForensicsNote()
    kept = replace(
        kept,
        failures=tuple(record.with_bisect({f.id: f for f in kept.failures}, answers).values()),
    )
    if verdict is not None:
        kept = replace(kept, triage=verdict.category, confidence=verdict.confidence)
    state.run.summary = replace(state.run.summary, forensics=kept)
    state.history.save_run(state.run)
    print(f"added to run {state.run.run_id}: {state.out_dir / 'forensics.json'}, report, callback")
