"""Regression forensics: for each new failure, the last upstream sha where it passed and the
first where it failed, from History.

The main line is the runs that set the baseline (push, nightly, periodic) in state
`completed`, ordered by `created_at`; each run record names its head sha (`summary.head_sha`,
else the sha in its event label). Walking back from the current run: earlier runs where the
variant failed move "first bad" back to them (the earliest of the consecutive failing runs),
the first run where it passed is "last good"; runs that did not run it are stepped over (the
window then spans them). A pull request's failure is located the same way, against the main
line. When the two shas differ, `compare_url` is GitHub's compare of `last_good...first_bad`,
the commits that may have caused it (a nightly spans many). Each run also names the backend
and the torch it ran with (`summary.backend`, `summary.torch_sha`): a window whose last good
run had the backend under test now, on another torch, says only upstream moved
(`dashboard_export.triage`).

History's stores keep outcomes keyed by (run, variant, attempt); this module reads them
(`outcomes_by_run`) from the same SQLite file or Redis keys, read-only.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contracts.backend import BackendId
from contracts.forensics import FailureForensics, FailureTriage
from workflows.stores.history import (
    HistoryError,
    HistoryStore,
    RedisHistory,
    RunHead,
    RunRecord,
    RunState,
    SQLiteHistory,
)

MAIN_LINE_KINDS = frozenset({"push", "nightly", "periodic"})
RUNS_READ = 500  # most recent runs considered
UPSTREAM_REPO = "pytorch/pytorch"
_FAILED = frozenset({"failed", "error", "timeout", "crashed"})
_PASSED = frozenset({"passed", "xpassed"})
_SHA = re.compile(r"[0-9a-f]{7,40}")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RunPoint:
    """A run on the time line: when it was planned, what started it, at which sha."""

    run_id: str
    created_at: float
    kind: str
    head_sha: str
    backend: BackendId | None = None  # None: not recorded
    torch_sha: str = ""  # the git sha of the torch its tests ran on ("": not recorded)


@dataclass(frozen=True)
class Window:
    """Where one failure appeared: passed at `last_good` (None: never seen passing), failed
    from `first_bad` on."""

    id: str
    last_good: str | None
    first_bad: str
    last_good_run: str | None
    first_bad_run: str
    compare_url: str | None
    last_good_backend: BackendId | None = None  # the backend it passed with
    last_good_torch: str = ""  # the torch it passed on ("": not recorded)

    def forensics(self, triage: FailureTriage, passed_before: str | None) -> FailureForensics:
        """The failure's forensics: this window, its triage, where it last passed upstream."""
        return FailureForensics(
            self.id,
            self.last_good,
            self.first_bad,
            self.last_good_run,
            self.first_bad_run,
            self.compare_url,
            triage,
            passed_before,
        )


def point_of(run: RunRecord | RunHead) -> RunPoint:
    """A run's place on the time line (a run not planned yet has none: no kind, no sha),
    with the backend and torch it ran on when the record keeps them."""
    facts = run.plan if isinstance(run, RunHead) else run.summary.plan
    if facts is None:
        return RunPoint(run.run_id, run.created_at, "", "")
    return RunPoint(
        run.run_id,
        run.created_at,
        facts.kind,
        facts.head_sha,
        facts.backend or None,
        facts.torch_sha,
    )


def main_line(history: HistoryStore, exclude: str) -> list[RunPoint]:
    """Completed main-line runs with a sha, oldest first, without run `exclude`."""
    points = [
        point_of(run)
        for run in history.list_run_heads(RUNS_READ)
        if run.run_id != exclude and run.state is RunState.COMPLETED
    ]
    return sorted(
        (p for p in points if p.kind in MAIN_LINE_KINDS and p.head_sha),
        key=lambda p: (p.created_at, p.run_id),
    )


def outcomes_by_run(history: HistoryStore, variants: Iterable[str]) -> dict[str, dict[str, str]]:
    """`{variant: {run_id: status}}`, the status of each run's last attempt."""
    wanted = sorted(set(variants))
    found: dict[str, dict[str, str]] = {v: {} for v in wanted}
    if isinstance(history, SQLiteHistory):
        try:
            db = sqlite3.connect(f"file:{history.path}?mode=ro", uri=True, timeout=30)
            try:
                for vid in wanted:
                    for run_id, status in db.execute(
                        "SELECT run_id, status FROM outcome WHERE variant = ? ORDER BY attempt",
                        (vid,),
                    ):
                        found[vid][run_id] = status
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise HistoryError(f"{history.path}: cannot read outcomes: {exc}") from exc
    elif isinstance(history, RedisHistory):
        # The store's own layout (`v:<variant>` lists of [status, duration, run, attempt]).
        with history._guard("reading outcomes by run"):  # noqa: SLF001
            pipe = history._redis.pipeline(transaction=False)  # noqa: SLF001
            for vid in wanted:
                pipe.lrange(history._key("v", vid), 0, -1)  # noqa: SLF001
            replies = pipe.execute()
        for vid, raw in zip(wanted, replies, strict=True):
            for item in raw:
                status, _duration, run_id, _attempt = json.loads(item)
                found[vid][str(run_id)] = str(status)
    return found


def locate(
    variant: str,
    current: RunPoint,
    line: list[RunPoint],
    outcomes: Mapping[str, str],
    repo: str = UPSTREAM_REPO,
) -> Window:
    """The window of one failure of `current` over the earlier runs of `line`."""
    first_bad, last_good = current, None
    for point in reversed([p for p in line if p.created_at <= current.created_at]):
        status = outcomes.get(point.run_id)
        if status in _FAILED:
            first_bad = point
        elif status in _PASSED:
            last_good = point
            break
    compare = None
    if last_good is not None and last_good.head_sha != first_bad.head_sha and first_bad.head_sha:
        compare = compare_url(repo, last_good.head_sha, first_bad.head_sha)
    return Window(
        variant,
        last_good.head_sha if last_good else None,
        first_bad.head_sha,
        last_good.run_id if last_good else None,
        first_bad.run_id,
        compare,
        last_good.backend if last_good else None,
        last_good.torch_sha if last_good else "",
    )


def compare_url(repo: str, good: str, bad: str) -> str:
    """GitHub's compare page of the commits after `good` up to `bad`."""
    repo = repo if _REPO.fullmatch(repo) else UPSTREAM_REPO
    return f"https://github.com/{repo}/compare/{good}...{bad}"


def windows(
    history: HistoryStore,
    current: RunPoint,
    failing: Iterable[str],
    repo: str = UPSTREAM_REPO,
) -> dict[str, Window]:
    """The window of every failing id of the current run."""
    ids = sorted(set(failing))
    if not ids:
        return {}
    line = main_line(history, exclude=current.run_id)
    outcomes = outcomes_by_run(history, ids)
    return {vid: locate(vid, current, line, outcomes[vid], repo) for vid in ids}
