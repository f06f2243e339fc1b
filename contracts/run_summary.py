"""A run's summary as History keeps it (`runs list/show`, the run browser, readiness, forensics).

`workflows.stores.history` keeps it and `dashboard_export.readiness` reads it, so it lives
here, under both. One flat JSON object in a History row, written in parts by the steps of a
run: the plan's facts when it is planned, the results when it finishes (with the environment
under test and, after new failures, their forensics), and a note when it stops or is
forgotten. Each part is a frozen record here whose keys sit flat in the summary's object
(`contracts.codec`); `RunSummary.to_json` writes the same object the rows have always held
and `RunSummary.from_json` reads any row back, keys no part knows kept as read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from contracts.backend import BackendId
from contracts.codec import NONE, Record, from_json, wire
from contracts.forensics import FailureForensics

JSON = Mapping[str, Any]
_SHA = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class PlanFacts(Record):
    """What the plan step records (and finish records again): the event, the selection."""

    event: str = ""  # a label for people ("push 0123456789ab"); kind and head_sha are the data
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

    WIRE_ORDER: ClassVar[tuple[str, ...]] = (
        *("event", "kind", "head_sha", "backend", "torch_sha"),
        *("selected", "holdout", "fallback", "out_dir", "tried"),
    )

    def __post_init__(self) -> None:
        if not isinstance(self.backend, BackendId):  # given as its JSON
            object.__setattr__(self, "backend", BackendId.from_json(self.backend))

    @classmethod
    def from_json(cls, data: object) -> PlanFacts:
        """The facts of a row; a row written before `kind` and `head_sha` were kept gives
        those of its event label (`push 0123456789ab`: the sha's first 12 characters)."""
        facts = from_json(cls, data)
        kind, _, rest = facts.event.partition(" ")
        sha = facts.head_sha or (rest if _SHA.fullmatch(rest) else "")
        return replace(facts, kind=facts.kind or kind, head_sha=sha)


@dataclass(frozen=True)
class RunResults(Record):
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


@dataclass(frozen=True)
class UnderTestNote(Record):
    """What the summary keeps of the environment under test (`workflows.run.under_test`)."""

    tested: str | None = None
    torch: str = ""  # "2.13.0 (0123456789ab)"
    # state, applied and not_applied paths (the first 20)
    change: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = field(default=(), metadata=wire("under_test_notes"))


@dataclass(frozen=True)
class ForensicsNote(Record):
    """What the summary keeps of a run's forensics: the verdict's category and confidence,
    and the first new failures' forensics (each as `failure_forensics` made it, with a
    bisect's answer once `spyre-ci bisect --run` added it)."""

    triage: str | None = None
    confidence: str | None = None
    failures: tuple[FailureForensics, ...] = ()
    more: int = 0  # new failures beyond those kept

    def windows(self) -> list[FailureForensics]:
        """The failures with a window to bisect: a last good sha the first bad is not."""
        return [f for f in self.failures if f.bisectable]

    def bisected(self, vid: str) -> str | None:
        """The bisect's answer for `vid`, as a line (`spyre-ci bisect --run` kept it)."""
        for entry in self.failures:
            if entry.id == vid and entry.bisect is not None and entry.bisect.summary:
                return entry.bisect.line
        return None


_FLAT = wire(flat=True)


@dataclass(frozen=True)
class RunSummary(Record):
    """History's summary of one run; each part is None until the step that writes it ran
    (a row without any of a part's keys reads it as None)."""

    plan: PlanFacts | None = field(default=None, metadata=_FLAT)
    results: RunResults | None = field(default=None, metadata=_FLAT)
    under_test: UnderTestNote | None = field(default=None, metadata=_FLAT)
    forensics: ForensicsNote | None = field(default=None, metadata=wire(omit=NONE))
    finished_at: float | None = field(default=None, metadata=wire(omit=NONE))
    # why the run stopped (`runs resume` goes on)
    stopped_because: str | None = field(default=None, metadata=wire(omit=NONE))
    was: str | None = field(default=None, metadata=wire(omit=NONE))  # a forgotten run's state
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know

    WIRE_ORDER: ClassVar[tuple[str, ...]] = ("extra", "plan", "results", "under_test")

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
