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


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _str(value: object) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class FailureTriage:
    """One failure's class, the category it maps to, and the evidence that decided it
    (`dashboard_export.triage.triage`)."""

    id: str
    failure_class: str  # device-rule | precision | related | unknown
    category: str  # upstream | backend | infra | flake | unknown
    related: bool
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "class": self.failure_class,
            "category": self.category,
            "related": self.related,
        }
        if self.why:
            data["why"] = self.why
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FailureTriage:
        return cls(
            _str(data.get("id")),
            _str(data.get("class")),
            _str(data.get("category")),
            bool(data.get("related")),
            _str(data.get("why")),
        )


@dataclass(frozen=True)
class BisectAnswer:
    """What `spyre-ci bisect --run` found for one failure, as its forensics entry keeps it
    (`bisect`: `workflows.drivers.bisect.answer.forensics_entry`)."""

    summary: str
    confidence: str | None = None  # high | medium | low
    outcome: str = ""  # culprit | window | flaky | stopped | fails-at-base | not-reproduced
    missing: frozenset[str] = frozenset()
    # The culprit or the window and the commits replayed by assumption, as the bisect wrote
    # them, and keys this version does not know.
    extra: Mapping[str, Any] = field(default_factory=dict)

    KEYS: ClassVar[tuple[str, ...]] = ("outcome", "confidence", "summary")

    @property
    def line(self) -> str:
        return f"{self.summary} ({self.confidence} confidence)"

    def to_json(self) -> dict[str, Any]:
        data = {"outcome": self.outcome, "confidence": self.confidence, "summary": self.summary}
        return {**{k: v for k, v in data.items() if k not in self.missing}, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BisectAnswer:
        return cls(
            _str(data.get("summary")),
            _opt_str(data.get("confidence")),
            _str(data.get("outcome")),
            missing=frozenset(cls.KEYS) - data.keys(),
            extra={k: v for k, v in data.items() if k not in cls.KEYS},
        )


@dataclass(frozen=True)
class FailureForensics:
    """One failure that is not flaky: its window on upstream's line (passed at
    `last_good_sha`, None when never seen passing; failed from `first_bad_sha` on), its
    triage, the upstream sha where it last passed with the backend under test on another
    torch (`passed_before`), and the bisect's answer once there is one."""

    id: str
    last_good_sha: str | None = None
    first_bad_sha: str | None = None
    last_good_run: str | None = None
    first_bad_run: str | None = None
    compare_url: str | None = None  # GitHub's compare of last_good...first_bad
    triage: FailureTriage | None = None
    passed_before: str | None = None
    bisect: BisectAnswer | None = None
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    # Written always (unless a record read lacked them); `why` and `bisect` only when set.
    WRITTEN: ClassVar[tuple[str, ...]] = (
        *("id", "last_good_sha", "first_bad_sha", "last_good_run", "first_bad_run"),
        *("compare_url", "class", "category", "related", "passed_before"),
    )
    KEYS: ClassVar[tuple[str, ...]] = (*WRITTEN, "why", "bisect")

    @property
    def bisectable(self) -> bool:
        """A window to bisect: a last good sha the first bad is not."""
        return bool(self.last_good_sha) and self.first_bad_sha != self.last_good_sha

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "last_good_sha": self.last_good_sha,
            "first_bad_sha": self.first_bad_sha,
            "last_good_run": self.last_good_run,
            "first_bad_run": self.first_bad_run,
            "compare_url": self.compare_url,
        }
        if self.triage is not None:
            data.update({k: v for k, v in self.triage.to_json().items() if k != "id"})
        data["passed_before"] = self.passed_before
        if self.bisect is not None:
            data["bisect"] = self.bisect.to_json()
        return {**{k: v for k, v in data.items() if k not in self.missing}, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FailureForensics:
        triaged = any(k in data for k in ("class", "category", "related", "why"))
        bisect = data.get("bisect")
        extra = {k: v for k, v in data.items() if k not in cls.KEYS}
        if "bisect" in data and not isinstance(bisect, Mapping):
            extra["bisect"] = bisect  # not an answer this version reads: kept as it was
        return cls(
            _str(data.get("id")),
            _opt_str(data.get("last_good_sha")),
            _opt_str(data.get("first_bad_sha")),
            _opt_str(data.get("last_good_run")),
            _opt_str(data.get("first_bad_run")),
            _opt_str(data.get("compare_url")),
            FailureTriage.from_json(data) if triaged else None,
            _opt_str(data.get("passed_before")),
            BisectAnswer.from_json(bisect) if isinstance(bisect, Mapping) else None,
            missing=frozenset(cls.WRITTEN) - data.keys(),
            extra=extra,
        )


@dataclass(frozen=True)
class SuspectedCommit:
    """The upstream commit a verdict suspects: the culprit a bisect found, else the first
    run where the failures appeared."""

    commit: str
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"commit": self.commit, **({"reason": self.reason} if self.reason else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SuspectedCommit:
        return cls(_str(data.get("commit")), _str(data.get("reason")))


@dataclass(frozen=True)
class TriageEvidence:
    """One failure a verdict rests on: the job, the test and an excerpt of its message."""

    job: str
    test: str
    excerpt: str

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "test": self.test, "excerpt": self.excerpt}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TriageEvidence:
        return cls(_str(data.get("job")), _str(data.get("test")), _str(data.get("excerpt")))


@dataclass(frozen=True)
class TriageVerdict:
    """The callback's `workflow.triage_verdict` for a run with new failures, in the shape
    pytorch/test-infra's relay validates (`utils/triage_verdict.py`)."""

    category: str  # upstream | backend | unknown | flake | infra
    confidence: str  # high | medium | low
    summary: str
    evidence: tuple[TriageEvidence, ...] = ()
    analyzer_version: str = "unknown"  # of the analyzer, spyre-ci
    suspected_upstream: SuspectedCommit | None = None
    analyzed_at: str | None = None
    schema_version: int = 1
    analyzer_name: str = "spyre-ci"
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    # Written always (unless a record read lacked them); the others only when set.
    WRITTEN: ClassVar[tuple[str, ...]] = (
        *("schema_version", "category", "confidence", "summary", "evidence", "analyzer"),
    )
    KEYS: ClassVar[tuple[str, ...]] = (*WRITTEN, "suspected_upstream", "analyzed_at")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "category": self.category,
            "confidence": self.confidence,
            "summary": self.summary,
            "evidence": [e.to_json() for e in self.evidence],
            "analyzer": {"name": self.analyzer_name, "version": self.analyzer_version},
        }
        if self.suspected_upstream is not None:
            data["suspected_upstream"] = self.suspected_upstream.to_json()
        if self.analyzed_at is not None:
            data["analyzed_at"] = self.analyzed_at
        return {**{k: v for k, v in data.items() if k not in self.missing}, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TriageVerdict:
        analyzer = data.get("analyzer")
        analyzer = analyzer if isinstance(analyzer, Mapping) else {}
        suspected = data.get("suspected_upstream")
        evidence = data.get("evidence")
        version = data.get("schema_version", 1)
        return cls(
            _str(data.get("category")),
            _str(data.get("confidence")),
            _str(data.get("summary")),
            tuple(
                TriageEvidence.from_json(e)
                for e in (evidence if isinstance(evidence, list | tuple) else ())
                if isinstance(e, Mapping)
            ),
            _str(analyzer.get("version")),
            SuspectedCommit.from_json(suspected) if isinstance(suspected, Mapping) else None,
            _opt_str(data.get("analyzed_at")),
            version if isinstance(version, int) else 1,
            _str(analyzer.get("name")),
            missing=frozenset(cls.WRITTEN) - data.keys(),
            extra={k: v for k, v in data.items() if k not in cls.KEYS},
        )


@dataclass(frozen=True)
class RunForensics:
    """What `failure_forensics` found for one run: per failure that is not flaky its
    forensics, and the verdict over its new failures (None without any)."""

    failures: Mapping[str, FailureForensics] = field(default_factory=dict)
    verdict: TriageVerdict | None = None
