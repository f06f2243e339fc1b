"""A run's summary as History keeps it (`runs list/show`, the run browser, readiness, forensics).

`workflows.stores.history` keeps it and `dashboard_export.readiness` reads it, so it lives
here, under both. One flat JSON object in a History row, written in parts by the steps of a
run: the plan's facts when it is planned, the results when it finishes (with the environment
under test and, after new failures, their forensics), and a note when it stops or is
forgotten. Each part is a frozen record here; `RunSummary.to_json` writes the same flat
object the rows have always held and `RunSummary.from_json` reads any row back, keys a part
does not know kept as read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from contracts.backend import BackendId
from contracts.forensics import FailureForensics

JSON = Mapping[str, Any]
_SHA = re.compile(r"[0-9a-f]{7,40}")


def _str(value: object) -> str:
    return "" if value is None else str(value)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _opt_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _strs(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class PlanFacts:
    """What the plan step records (and finish records again): the event, the selection."""

    event: str  # a label for people ("push 0123456789ab"); kind and head_sha are the data
    kind: str = ""
    head_sha: str = ""
    selected: int = 0
    holdout: int = 0
    fallback: str | None = None
    out_dir: str = ""
    # The backend and the torch git sha the run tested: a failure that passed at an earlier
    # sha with the same backend was broken upstream.
    backend: BackendId = field(default_factory=BackendId)
    torch_sha: str = ""
    missing: frozenset[str] = frozenset()  # see `RunResults.missing`
    tried: bool = False  # a patch given with `--diff`: no CI job (`spyre-ci readiness`)

    KEYS = (
        "event",
        "kind",
        "head_sha",
        "backend",
        "torch_sha",
        "selected",
        "holdout",
        "fallback",
        "out_dir",
        "tried",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.backend, BackendId):  # given as its JSON
            object.__setattr__(self, "backend", BackendId.from_json(self.backend))

    def to_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.KEYS if k not in self.missing}
        if "backend" in data:
            data["backend"] = self.backend.to_json()
        return data

    @classmethod
    def from_json(cls, data: JSON) -> PlanFacts:
        """The facts of a row; a row written before `kind` and `head_sha` were kept gives
        those of its event label (`push 0123456789ab`: the sha's first 12 characters)."""
        event = _str(data.get("event"))
        kind, _, rest = event.partition(" ")
        sha = _str(data.get("head_sha")) or (rest if _SHA.fullmatch(rest) else "")
        return cls(
            event=event,
            kind=_str(data.get("kind")) or kind,
            head_sha=sha,
            selected=_int(data.get("selected")),
            holdout=_int(data.get("holdout")),
            fallback=_opt_str(data.get("fallback")),
            out_dir=_str(data.get("out_dir")),
            backend=BackendId.from_json(data.get("backend")),
            torch_sha=_str(data.get("torch_sha")),
            missing=frozenset(cls.KEYS) - data.keys(),
            tried=bool(data.get("tried")),
        )


@dataclass(frozen=True)
class RunResults:
    """What finish records: counts by status, the verdict's metrics, why nothing or all ran."""

    ran: int = 0
    failed: int = 0
    new_failures: int = 0
    new_timeouts: int = 0  # new failures that were a test (or its shard) out of time
    counts: Mapping[str, int] = field(default_factory=dict)  # status -> count
    metrics: Mapping[str, Any] = field(default_factory=dict)  # the verdict's numbers
    decision: str | None = None
    why: str = ""
    infrastructure: tuple[str, ...] = ()  # the faults' one-line summaries
    held_back: str | None = None
    removed: int = 0
    removed_ids: tuple[str, ...] = ()  # the first few of them
    new_variants: int = 0
    started_at: float | None = None  # when the first shard started (epoch seconds)
    # Keys a row written by an earlier version does not have (read as their defaults): not
    # written back either, so a reader of rows that tells an older row by a key it lacks
    # (`dashboard_export.readiness` and `new_timeouts`) still can after the row is saved again.
    missing: frozenset[str] = frozenset()

    KEYS = (
        "ran",
        "failed",
        "new_failures",
        "new_timeouts",
        "counts",
        "metrics",
        "decision",
        "why",
        "infrastructure",
        "held_back",
        "removed",
        "removed_ids",
        "new_variants",
        "started_at",
    )

    def to_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.KEYS}
        data.update(
            counts=dict(self.counts),
            metrics=dict(self.metrics),
            infrastructure=list(self.infrastructure),
            removed_ids=list(self.removed_ids),
        )
        return {k: v for k, v in data.items() if k not in self.missing}

    @classmethod
    def from_json(cls, data: JSON) -> RunResults:
        return cls(
            ran=_int(data.get("ran")),
            failed=_int(data.get("failed")),
            new_failures=_int(data.get("new_failures")),
            new_timeouts=_int(data.get("new_timeouts")),
            counts={str(k): _int(v) for k, v in _mapping(data.get("counts")).items()},
            metrics=_mapping(data.get("metrics")),
            decision=_opt_str(data.get("decision")),
            why=_str(data.get("why")),
            infrastructure=_strs(data.get("infrastructure")),
            held_back=_opt_str(data.get("held_back")),
            removed=_int(data.get("removed")),
            removed_ids=_strs(data.get("removed_ids")),
            new_variants=_int(data.get("new_variants")),
            started_at=_opt_float(data.get("started_at")),
            missing=frozenset(cls.KEYS) - data.keys(),
        )


@dataclass(frozen=True)
class UnderTestNote:
    """What the summary keeps of the environment under test (`workflows.run.under_test`)."""

    tested: str | None
    torch: str  # "2.13.0 (0123456789ab)"
    change: Mapping[str, Any]  # state, applied and not_applied paths (the first 20)
    notes: tuple[str, ...] = ()

    KEYS = ("tested", "torch", "change", "under_test_notes")

    def to_json(self) -> dict[str, Any]:
        return {
            "tested": self.tested,
            "torch": self.torch,
            "change": dict(self.change),
            "under_test_notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: JSON) -> UnderTestNote:
        return cls(
            _opt_str(data.get("tested")),
            _str(data.get("torch")),
            _mapping(data.get("change")),
            _strs(data.get("under_test_notes")),
        )


@dataclass(frozen=True)
class ForensicsNote:
    """What the summary keeps of a run's forensics: the verdict's category and confidence,
    and the first new failures' forensics (each as `failure_forensics` made it, with a
    bisect's answer once `spyre-ci bisect --run` added it)."""

    triage: str | None = None
    confidence: str | None = None
    failures: tuple[FailureForensics, ...] = ()
    more: int = 0  # new failures beyond those kept

    def to_json(self) -> dict[str, Any]:
        return {
            "triage": self.triage,
            "confidence": self.confidence,
            "failures": [f.to_json() for f in self.failures],
            "more": self.more,
        }

    @classmethod
    def from_json(cls, data: JSON) -> ForensicsNote:
        failures = data.get("failures")
        return cls(
            _opt_str(data.get("triage")),
            _opt_str(data.get("confidence")),
            tuple(FailureForensics.from_json(f) for f in failures if isinstance(f, Mapping))
            if isinstance(failures, list | tuple)
            else (),
            _int(data.get("more")),
        )

    def windows(self) -> list[FailureForensics]:
        """The failures with a window to bisect: a last good sha the first bad is not."""
        return [f for f in self.failures if f.bisectable]

    def bisected(self, vid: str) -> str | None:
        """The bisect's answer for `vid`, as a line (`spyre-ci bisect --run` kept it)."""
        for entry in self.failures:
            if entry.id == vid and entry.bisect is not None and entry.bisect.summary:
                return entry.bisect.line
        return None


_GROUPED = frozenset((*PlanFacts.KEYS, *RunResults.KEYS, *UnderTestNote.KEYS))
_NOTES = ("forensics", "finished_at", "stopped_because", "was")


@dataclass(frozen=True)
class RunSummary:
    """History's summary of one run; each part is None until the step that writes it ran."""

    plan: PlanFacts | None = None
    results: RunResults | None = None
    under_test: UnderTestNote | None = None
    forensics: ForensicsNote | None = None
    finished_at: float | None = None
    stopped_because: str | None = None  # why the run stopped (`runs resume` goes on)
    was: str | None = None  # the state a forgotten run had
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know

    def merged(self, newer: RunSummary) -> RunSummary:
        """This summary with every part `newer` has taking the place of this one's."""
        changes = {
            f.name: getattr(newer, f.name)
            for f in fields(self)
            if f.name != "extra" and getattr(newer, f.name) is not None
        }
        return replace(self, **changes, extra={**self.extra, **newer.extra})

    @property
    def event(self) -> str:
        return self.plan.event if self.plan else ""

    @property
    def out_dir(self) -> str:
        return self.plan.out_dir if self.plan else ""

    def to_json(self) -> dict[str, Any]:
        data = dict(self.extra)
        for part in (self.plan, self.results, self.under_test):
            if part is not None:
                data.update(part.to_json())
        if self.forensics is not None:
            data["forensics"] = self.forensics.to_json()
        for key in ("finished_at", "stopped_because", "was"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return data

    @classmethod
    def from_json(cls, data: JSON) -> RunSummary:
        """Any row's summary, from this version or an earlier one (parts it lacks are None)."""
        forensics = data.get("forensics")
        return cls(
            PlanFacts.from_json(data) if any(k in data for k in PlanFacts.KEYS) else None,
            RunResults.from_json(data) if any(k in data for k in RunResults.KEYS) else None,
            UnderTestNote.from_json(data) if any(k in data for k in UnderTestNote.KEYS) else None,
            ForensicsNote.from_json(forensics) if isinstance(forensics, Mapping) else None,
            _opt_float(data.get("finished_at")),
            _opt_str(data.get("stopped_because")),
            _opt_str(data.get("was")),
            {k: v for k, v in data.items() if k not in _GROUPED and k not in _NOTES},
        )
