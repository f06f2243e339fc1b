"""The bisect itself, pure: over the points of a window (point `k` = the base with the first
`k` commits applied), which commit first makes each variant fail.

Points `0..top` can be run (`top`: the replayable prefix, commits replayed by assumption
included: their Python part). A point is run for every variant
still searching that needs it; each (point, variant) is decided by its runs (`decide`): two
agreeing runs decide it; runs that disagree get more, up to `MAX_RUNS`, and a lead of two
decides it, else it is `undecidable` (flaky) and that variant's search stops there with the
window it had. The base must pass and the top must fail (else there is nothing to bisect in
what can be replayed): a top that passes below a commit that cannot be replayed narrows the
window to that commit and the rest.

A bisect has a deadline (`expired`): once it has passed, no further run starts; each
search still open ends `stopped` with the bounds it had, and a step whose runs had not
decided it is dropped (its runs decided nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GOOD, BAD, UNDECIDABLE = "good", "bad", "undecidable"
MIN_RUNS = 2
MAX_RUNS = 5
LEAD = 2  # runs one side must lead by

# Answers of one variant's search.
CULPRIT = "culprit"  # the first commit that makes it fail
WINDOW = "window"  # the smallest window it can be narrowed to (a commit not replayable in it)
FLAKY = "flaky"  # a point could not be decided: the window it had then
FAILS_AT_BASE = "fails_at_base"  # it fails without any commit of the window
NOT_REPRODUCED = "not_reproduced"  # every commit replayed (or its Python part): it passes
STOPPED = "stopped"  # the deadline passed first: the bounds it had then


@dataclass(frozen=True)
class Step:
    """The runs of one variant at one point, and what they decided."""

    point: int
    statuses: tuple[str, ...]
    decision: str

    @property
    def clean(self) -> bool:
        """Decided by its first two runs, in agreement."""
        return self.decision != UNDECIDABLE and len(self.statuses) == MIN_RUNS

    def to_json(self) -> dict[str, Any]:
        return {"point": self.point, "runs": list(self.statuses), "decision": self.decision}


def decide(failed: Sequence[bool]) -> str | None:
    """GOOD or BAD once the runs decide it, UNDECIDABLE at the bound, None: run again."""
    bad = sum(failed)
    good = len(failed) - bad
    if len(failed) >= MIN_RUNS and abs(bad - good) >= LEAD:
        return BAD if bad > good else GOOD
    if len(failed) >= MAX_RUNS:
        return UNDECIDABLE
    return None


@dataclass
class Search:
    """One variant's search over points `0..top`; `good` and `bad` bound the culprit once
    both ends are known."""

    variant: str
    top: int
    complete: bool  # `top` is the window's end (every commit replayable)
    steps: list[Step] = field(default_factory=list)
    good: int | None = None
    bad: int | None = None
    answer: str | None = None

    def needed(self) -> int | None:
        """The point this search runs next; None when it has its answer."""
        if self.answer is not None:
            return None
        if self.good is None:
            return 0
        if self.bad is None:
            return self.top
        return (self.good + self.bad) // 2

    def learn(self, step: Step) -> None:
        self.steps.append(step)
        point = step.point
        if step.decision == UNDECIDABLE:
            self.answer = FLAKY
            return
        if self.good is None:  # the base
            if step.decision == BAD:
                self.answer = FAILS_AT_BASE
                return
            self.good = 0
            if self.top == 0:  # nothing replayable before a commit that needs a build
                self.answer = NOT_REPRODUCED if self.complete else WINDOW
            return
        if self.bad is None:  # the top
            if step.decision == BAD:
                self.bad = point
            else:
                self.good = point
                self.answer = NOT_REPRODUCED if self.complete else WINDOW
                return
        elif step.decision == BAD:
            self.bad = point
        else:
            self.good = point
        if self.bad is not None and self.bad - self.good <= 1:
            self.answer = CULPRIT


RunPoint = Callable[[int, Sequence[str]], Mapping[str, str]]  # (point, ids) -> id: status


def _never() -> bool:
    return False


def bisect(
    variants: Sequence[str],
    top: int,
    complete: bool,
    run_point: RunPoint,
    is_failure: Callable[[str], bool],
    on_step: Callable[[int, Mapping[str, Step]], None] | None = None,
    expired: Callable[[], bool] = _never,
) -> dict[str, Search]:
    """Every variant's search, points shared: each round runs the point most searches need
    (the lowest on a tie) for those variants, `MIN_RUNS` times and more for those whose
    runs disagree. `run_point` runs the ids once at a point (id -> status) and raises on an
    infrastructure fault; `on_step` hears each point's steps. Once `expired()`, no run
    starts: every open search ends `STOPPED`."""
    searches = {vid: Search(vid, top, complete) for vid in variants}
    while True:
        wanted: dict[int, list[str]] = {}
        for vid, search in searches.items():
            point = search.needed()
            if point is not None:
                wanted.setdefault(point, []).append(vid)
        if not wanted:
            return searches
        if expired():
            for ids in wanted.values():
                for vid in ids:
                    searches[vid].answer = STOPPED
            return searches
        point = min(wanted, key=lambda p: (-len(wanted[p]), p))
        steps = run_step(point, wanted[point], run_point, is_failure, expired)
        for vid, step in steps.items():
            searches[vid].learn(step)
        if on_step is not None:
            on_step(point, steps)


def run_step(
    point: int,
    ids: Sequence[str],
    run_point: RunPoint,
    is_failure: Callable[[str], bool],
    expired: Callable[[], bool] = _never,
) -> dict[str, Step]:
    """The ids' steps at one point: runs until each is decided (see `decide`); an id whose
    runs had not decided it when `expired()` has no step."""
    runs: dict[str, list[str]] = {vid: [] for vid in ids}
    decided: dict[str, str] = {}
    while len(decided) < len(ids):
        if any(runs.values()) and expired():
            break
        pending = [vid for vid in ids if vid not in decided]
        found = run_point(point, pending)
        for vid in pending:
            runs[vid].append(found[vid])
            decision = decide([is_failure(s) for s in runs[vid]])
            if decision is not None:
                decided[vid] = decision
    return {vid: Step(point, tuple(runs[vid]), decided[vid]) for vid in ids if vid in decided}
