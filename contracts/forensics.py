"""A run's forensics as its records carry them: per failure its regression window, triage
class and where it last passed upstream, and the run's triage verdict.

`workflows.run.exporting.failure_forensics` makes them (windows from History, classes and
the verdict from `dashboard_export.triage`); the run's record (run.json, forensics.json)
keeps them, History's summary keeps the first few (`contracts.run_summary.ForensicsNote`), a
bisect adds its answer (`spyre-ci bisect --run`), and the callback, the HUD row and the
report read them. The JSON forms are the objects those files have always held; keys a
record written by another version lacks are not written back, keys it has that this one
does not know are kept as read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from contracts.codec import EMPTY, NONE, Record, wire


@dataclass(frozen=True)
class FailureTriage(Record):
    """One failure's class, the category it maps to, and the evidence that decided it
    (`dashboard_export.triage.triage`)."""

    id: str = ""
    # device-rule | precision | related | unknown
    failure_class: str = field(default="", metadata=wire("class"))
    category: str = ""  # upstream | backend | infra | flake | unknown
    related: bool = False
    why: str = field(default="", metadata=wire(omit=EMPTY))


@dataclass(frozen=True)
class BisectAnswer(Record):
    """What `spyre-ci bisect --run` found for one failure, as its forensics entry keeps it
    (`bisect`: `workflows.drivers.bisect.answer.forensics_entry`)."""

    summary: str = ""
    confidence: str | None = None  # high | medium | low
    outcome: str = ""  # culprit | window | flaky | stopped | fails-at-base | not-reproduced
    missing: frozenset[str] = frozenset()
    # The culprit or the window and the commits replayed by assumption, as the bisect wrote
    # them, and keys this version does not know.
    extra: Mapping[str, Any] = field(default_factory=dict)

    WIRE_ORDER: ClassVar[tuple[str, ...]] = ("outcome", "confidence", "summary")

    @property
    def line(self) -> str:
        return f"{self.summary} ({self.confidence} confidence)"


@dataclass(frozen=True)
class FailureForensics(Record):
    """One failure that is not flaky: its window on upstream's line (passed at
    `last_good_sha`, None when never seen passing; failed from `first_bad_sha` on), its
    triage, the upstream sha where it last passed with the backend under test on another
    torch (`passed_before`), and the bisect's answer once there is one.

    Its triage's keys sit in its own object; `why` and `bisect` are written only when set."""

    id: str = ""
    last_good_sha: str | None = None
    first_bad_sha: str | None = None
    last_good_run: str | None = None
    first_bad_run: str | None = None
    compare_url: str | None = None  # GitHub's compare of last_good...first_bad
    triage: FailureTriage | None = field(default=None, metadata=wire(flat=True))
    passed_before: str | None = None
    # A bisect this version cannot read is kept in `extra` as it was.
    bisect: BisectAnswer | None = field(
        default=None, metadata=wire(omit=NONE, keep_unreadable=True)
    )
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bisectable(self) -> bool:
        """A window to bisect: a last good sha the first bad is not."""
        return bool(self.last_good_sha) and self.first_bad_sha != self.last_good_sha


@dataclass(frozen=True)
class SuspectedCommit(Record):
    """The upstream commit a verdict suspects: the culprit a bisect found, else the first
    run where the failures appeared."""

    commit: str
    reason: str = field(default="", metadata=wire(omit=EMPTY))


@dataclass(frozen=True)
class TriageEvidence(Record):
    """One failure a verdict rests on: the job, the test and an excerpt of its message."""

    job: str
    test: str
    excerpt: str


@dataclass(frozen=True)
class TriageVerdict(Record):
    """The callback's `workflow.triage_verdict` for a run with new failures, in the shape
    pytorch/test-infra's relay validates (`utils/triage_verdict.py`); `suspected_upstream`
    and `analyzed_at` are written only when set."""

    category: str  # upstream | backend | unknown | flake | infra
    confidence: str  # high | medium | low
    summary: str
    evidence: tuple[TriageEvidence, ...] = ()
    analyzer_version: str = field(default="unknown", metadata=wire("analyzer.version"))
    suspected_upstream: SuspectedCommit | None = field(default=None, metadata=wire(omit=NONE))
    analyzed_at: str | None = field(default=None, metadata=wire(omit=NONE))
    schema_version: int = 1
    analyzer_name: str = field(default="spyre-ci", metadata=wire("analyzer.name"))
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    WIRE_ORDER: ClassVar[tuple[str, ...]] = (
        *("schema_version", "category", "confidence", "summary", "evidence"),
        *("analyzer_name", "analyzer_version", "suspected_upstream", "analyzed_at"),
    )


@dataclass(frozen=True)
class RunForensics:
    """What `failure_forensics` found for one run: per failure that is not flaky its
    forensics, and the verdict over its new failures (None without any)."""

    failures: Mapping[str, FailureForensics] = field(default_factory=dict)
    verdict: TriageVerdict | None = None
