"""The Plan's small records: its budget, its totals, what each trial heuristic would have
done, and the digest of the change it was planned for.

Each is read as attributes in the process; `to_json` (`contracts.codec`) writes the object
`plan.json` has always held under its key (`budget`, `totals`, `trial`, `change`), numbers as
they were computed (a sum of nothing stays `0`, not `0.0`), and `from_json` reads it back so
that a plan saved again is the plan it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.codec import NONE, Record, wire

_SET = wire(omit=NONE)


@dataclass(frozen=True)
class Budget(Record):
    """The budget a plan was made under and what it used (`--budget N`, `--budget-time S`);
    the last four are written only when set."""

    kind: str = "none"  # none | count | time
    limit: float | None = None  # variants (count) or seconds (time); None without a budget
    used: float = 0  # variants run (count, none), or their estimated seconds (time)
    applied: bool = False
    # Why a budget that was given did not bound the run (a full run runs everything).
    not_applied: str | None = field(default=None, metadata=_SET)
    # failing and new variants taken before the budget's room
    mandatory: int | None = field(default=None, metadata=_SET)
    # of a count budget, the room kept for the holdout, and what the holdout took of it
    holdout_reserved: int | None = field(default=None, metadata=_SET)
    holdout: int | None = field(default=None, metadata=_SET)


@dataclass(frozen=True)
class Totals(Record):
    """How much of the inventory a plan runs, by count and by estimated time."""

    variants: int  # in the inventory, declared skips included
    eligible: int  # runnable
    selected: int
    holdout: int
    selected_s: float  # estimated seconds (History's mean durations)
    holdout_s: float
    eligible_s: float
    ratio_count: float  # selected / eligible
    ratio_time: float  # selected_s / eligible_s

    @property
    def unselected(self) -> int:
        return self.eligible - self.selected

    @property
    def unselected_s(self) -> float:
        return self.eligible_s - self.selected_s


@dataclass(frozen=True)
class TrialNote(Record):
    """What a trial heuristic (recorded, not counted) scored, and what it alone would add."""

    scored: int
    would_add: int
    would_add_sample: tuple[str, ...] = ()  # the first ten ids, sorted


@dataclass(frozen=True)
class ChangeNote(Record):
    """The digest of the change a plan was made for (`ChangeSet.summary`: no patches)."""

    kind: str = ""
    repo: str = ""
    head_sha: str = ""
    base_sha: str | None = None
    delivery_id: str = ""
    files: int = 0
    files_with_patch: int = 0
    files_with_source: int = 0
    complete: bool = True
    truncated: bool = False
    labels: tuple[str, ...] = ()
    # Keys a plan from an earlier version did not write (read as the defaults): not written
    # back either, so the plan saved again is the plan it was.
    missing: frozenset[str] = frozenset()
