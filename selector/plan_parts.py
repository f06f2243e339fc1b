"""The Plan's small records: its budget, its totals, what each trial heuristic would have
done, and the digest of the change it was planned for.

Each is read as attributes in the process; `to_json` writes the object `plan.json` has always
held under its key (`budget`, `totals`, `trial`, `change`), numbers as they were computed (a
sum of nothing stays `0`, not `0.0`), and `from_json` reads it back so that a plan saved again
is the plan it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from selector.errors import SelectorError


def _number(data: Mapping[str, Any], key: str) -> float:
    """`data[key]` as it was written (an int stays an int: it is written back the same)."""
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SelectorError(f"plan {key!r} must be a number, not {value!r}")
    return value


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise SelectorError(f"plan {key!r} must be a whole number, not {value!r}")
    return value


def _opt_count(data: Mapping[str, Any], key: str) -> int | None:
    return None if data.get(key) is None else _count(data, key)


@dataclass(frozen=True)
class Budget:
    """The budget a plan was made under and what it used (`--budget N`, `--budget-time S`)."""

    kind: str = "none"  # none | count | time
    limit: float | None = None  # variants (count) or seconds (time); None without a budget
    used: float = 0  # variants run (count, none), or their estimated seconds (time)
    applied: bool = False
    # Why a budget that was given did not bound the run (a full run runs everything).
    not_applied: str | None = None
    mandatory: int | None = None  # failing and new variants taken before the budget's room
    holdout_reserved: int | None = None  # of a count budget, the room kept for the holdout
    holdout: int | None = None  # of a count budget, what the holdout took of it

    OPTIONAL = ("not_applied", "mandatory", "holdout_reserved", "holdout")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "limit": self.limit,
            "used": self.used,
            "applied": self.applied,
        }
        for key in self.OPTIONAL:
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budget:
        limit = None if data.get("limit") is None else _number(data, "limit")
        not_applied = data.get("not_applied")
        return cls(
            kind=str(data["kind"]),
            limit=limit,
            used=_number(data, "used"),
            applied=bool(data["applied"]),
            not_applied=None if not_applied is None else str(not_applied),
            mandatory=_opt_count(data, "mandatory"),
            holdout_reserved=_opt_count(data, "holdout_reserved"),
            holdout=_opt_count(data, "holdout"),
        )


@dataclass(frozen=True)
class Totals:
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

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Totals:
        return cls(
            variants=_count(data, "variants"),
            eligible=_count(data, "eligible"),
            selected=_count(data, "selected"),
            holdout=_count(data, "holdout"),
            selected_s=_number(data, "selected_s"),
            holdout_s=_number(data, "holdout_s"),
            eligible_s=_number(data, "eligible_s"),
            ratio_count=_number(data, "ratio_count"),
            ratio_time=_number(data, "ratio_time"),
        )


@dataclass(frozen=True)
class TrialNote:
    """What a trial heuristic (recorded, not counted) scored, and what it alone would add."""

    scored: int
    would_add: int
    would_add_sample: tuple[str, ...] = ()  # the first ten ids, sorted

    def to_json(self) -> dict[str, Any]:
        return {
            "scored": self.scored,
            "would_add": self.would_add,
            "would_add_sample": list(self.would_add_sample),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialNote:
        return cls(
            _count(data, "scored"),
            _count(data, "would_add"),
            tuple(str(v) for v in data.get("would_add_sample") or ()),
        )


@dataclass(frozen=True)
class ChangeNote:
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

    KEYS = (
        "kind",
        "repo",
        "head_sha",
        "base_sha",
        "delivery_id",
        "files",
        "files_with_patch",
        "files_with_source",
        "complete",
        "truncated",
        "labels",
    )

    def to_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.KEYS if k not in self.missing}
        if "labels" in data:
            data["labels"] = list(self.labels)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChangeNote:
        base = data.get("base_sha")
        return cls(
            kind=str(data.get("kind") or ""),
            repo=str(data.get("repo") or ""),
            head_sha=str(data.get("head_sha") or ""),
            base_sha=None if base is None else str(base),
            delivery_id=str(data.get("delivery_id") or ""),
            files=_count(data, "files") if "files" in data else 0,
            files_with_patch=_count(data, "files_with_patch") if "files_with_patch" in data else 0,
            files_with_source=(
                _count(data, "files_with_source") if "files_with_source" in data else 0
            ),
            complete=bool(data.get("complete", True)),
            truncated=bool(data.get("truncated", False)),
            labels=tuple(str(v) for v in data.get("labels") or ()),
            missing=frozenset(cls.KEYS) - data.keys(),
        )
