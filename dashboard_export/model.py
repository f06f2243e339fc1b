"""The input record of every exporter: one finished run, as plain frozen data with JSON round trip.

Its JSON is `contracts.codec`'s, each field written and read from its declaration (a field
cannot be added on one side only); the exporters read only this module.

The workflows layer builds a `RunRecord` once a run is verified; every builder in this package
is a pure function of it (plus JUnit files for per-test rows).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from contracts.change import ChangeNote
from contracts.classification import Classification
from contracts.codec import EMPTY, NONE, CodecError, Record, from_json, to_json, wire
from contracts.event import TriggerEvent
from contracts.forensics import FailureForensics, TriageVerdict
from contracts.tested import Tested
from dashboard_export import ExportError, evidence
from dashboard_export.validation import errors
from suites.model import Outcome, Status, split_variant_id

RECORD_FORMAT = 1
EPOCH = "1970-01-01 00:00:00.000000000"  # what a non-nullable DateTime64 holds for "no time"
LEVELS = ("L1", "L2", "L3", "L4")
# `neutral` (GitHub's check-run conclusion for neither a pass nor a failure): no new failure,
# but the change was tested only in part, or not at all (`Environment.tested`).
CONCLUSIONS = ("success", "failure", "neutral", "cancelled", "timed_out")


class DiffCategory(StrEnum):
    """One line of an upgrade diff (old torch -> new torch)."""

    REGRESSED = "regressed"
    FIXED = "fixed"
    NEW_FAILING = "new-failing"
    NEW_PASSING = "new-passing"
    REMOVED = "removed"
    UNCHANGED_FAILING = "unchanged-failing"


_RESOLVED = wire(unless="tested")
# None (an upgrade run, an older record) written and read as {}
_CHANGE = wire(
    unless="tested",
    encode=lambda c: c.to_json() if c is not None else {},
    decode=lambda d: ChangeNote.from_json(d) if d else None,
)
_TESTED = wire(unless="tested", decode=lambda t: t or None)  # Tested by __post_init__


@dataclass(frozen=True)
class Environment(Record):
    """Where the run ran: upstream torch and the backend under test."""

    torch_version: str
    torch_git_version: str
    backend: str
    backend_version: str
    device: str
    extra: Mapping[str, str] = field(default_factory=dict, metadata=wire("extra"))
    # The environment under test (`workflows.run.under_test`): where torch came from, the change
    # applied on top of it, and whether that tested the change ("" when not resolved: an
    # upgrade run, a record written before it was); written only when resolved.
    torch_source: str = field(default="", metadata=_RESOLVED)
    change: ChangeNote | None = field(default=None, metadata=_CHANGE)
    tested: Tested | None = field(default=None, metadata=_TESTED)
    notes: tuple[str, ...] = field(default=(), metadata=_RESOLVED)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "tested", Tested.of(self.tested))
        except ValueError as exc:
            raise ExportError(f"environment: {exc}") from None

    @property
    def headline(self) -> str:
        """One line on what the run tested of the change (empty when not resolved)."""
        if self.tested is None:
            return ""
        what = self.tested.headline
        return f"{what}: {'; '.join(self.notes)}" if self.notes else what


@dataclass(frozen=True)
class VariantResult(Record):
    """One variant's outcome plus what Verify concluded about it."""

    outcome: Outcome = field(metadata=wire(flat=True))
    suite: str
    template: str
    subject: str
    classification: Classification | None = None  # set for failures (and flaky passes)
    holdout: bool = False  # ran only as part of the seeded holdout sample
    # A/B (a run that applied a change): the status of a failing variant on the base torch,
    # without the change; None when it did not run there.
    base_status: str | None = field(default=None, metadata=wire(omit=NONE))
    # The run whose base outcome this is, when it was read from the kept base outcomes
    # rather than run by this run (None: run now, or no base outcome).
    base_read: str | None = field(default=None, metadata=wire(omit=NONE))

    @property
    def id(self) -> str:
        return self.outcome.id

    @property
    def status(self) -> Status:
        return self.outcome.status

    @classmethod
    def of(
        cls,
        outcome: Outcome,
        classification: Classification | str | None = None,
        holdout: bool = False,
        base_status: str | None = None,
        base_read: str | None = None,
    ) -> VariantResult:
        """Build from an Outcome, taking suite/template/subject from its variant id."""
        suite, template, subject, _dtype = split_variant_id(outcome.id)
        return cls(
            outcome=outcome,
            suite=suite,
            template=template,
            subject=subject,
            classification=Classification(classification) if classification else None,
            holdout=holdout,
            base_status=base_status,
            base_read=base_read,
        )


@dataclass(frozen=True)
class PlanSummary(Record):
    """What the selector concluded, in the few numbers a reader needs."""

    selected: int
    inventory: int = 0
    fallback_reason: str | None = None  # set when the plan fell back to a full run
    top_reasons: tuple[tuple[str, int], ...] = ()  # (reason, variants it selected)
    skipped: Mapping[str, int] = field(default_factory=dict)  # reason -> variants not run
    holdout: int = 0  # size of the seeded holdout sample (canaries included)
    holdout_misses: tuple[str, ...] = ()  # holdout variants that failed: selector misses
    metrics: Mapping[str, float] = field(default_factory=dict)
    canaries: int = 0  # the part of `holdout` that is one chosen variant per op (upgrades)


@dataclass(frozen=True)
class DiffRow(Record):
    id: str
    category: DiffCategory
    before: Status | None  # None: the variant does not exist on the old version
    after: Status | None  # None: removed in the new version
    message: str = ""


@dataclass(frozen=True)
class UpgradeDiff(Record):
    """For version-upgrade runs: how each affected variant moved between two torch versions."""

    from_version: str
    to_version: str
    rows: tuple[DiffRow, ...] = ()

    def by_category(self) -> dict[DiffCategory, list[DiffRow]]:
        grouped: dict[DiffCategory, list[DiffRow]] = {c: [] for c in DiffCategory}
        for row in self.rows:
            grouped[row.category].append(row)
        return grouped


_MADE = wire(omit=EMPTY)


@dataclass(frozen=True)
class RunRecord(Record):
    """One finished run of one job: everything every exporter needs."""

    run_id: str  # the workflow run id (HUD `run_id`, S3 `workflow_run_id`)
    attempt: int
    downstream_repo: str  # owner/repo that ran the tests (HUD `downstream_repo`)
    workflow: str
    job: str
    event: TriggerEvent
    environment: Environment
    results: tuple[VariantResult, ...]
    started_at: str | None  # ISO 8601 UTC, e.g. 2026-11-29T14:00:00Z
    completed_at: str | None
    check_run_id: str = ""  # empty: `{run_id}-{attempt}`, as the relay falls back
    run_url: str = ""
    artifact_url: str = ""
    queued_at: str | None = None  # when the job was dispatched, for HUD's queue_time
    level: str = "L2"  # allowlist level of downstream_repo
    conclusion: str | None = None  # None: derived from results (see `effective_conclusion`)
    plan: PlanSummary | None = None
    upgrade: UpgradeDiff | None = None
    # Why tests could not run (each names the shard and the cause): an infrastructure error,
    # which is a failed run whose results say nothing about the change.
    infrastructure: tuple[str, ...] = ()
    held_back: str | None = None  # why History did not learn from this run, when it did not
    # The CI system's own run id (GitHub Actions `github.run_id`, Buildkite's build id): what
    # the callback sends as `workflow.run_id`, since the reference relay keys runs by it.
    ci_run_id: str = ""
    # Regression forensics of the failures that are not flaky (`workflows.run.forensics`,
    # `triage`): per id its window, triage class and where it last passed, as in
    # forensics.json; empty when none were made (no such failure, History unreadable).
    # Written only when made, as the next two: a record without them keeps its bytes.
    forensics: Mapping[str, FailureForensics] = field(default_factory=dict, metadata=_MADE)
    # The run's `workflow.triage_verdict` (`triage.run_verdict`), made with the forensics.
    triage_verdict: TriageVerdict | None = field(default=None, metadata=_MADE)
    # Where the run's JUnit disagrees with `results` (`evidence.junit_gaps`, set by
    # `layout.write_run`): each keeps the run from `success`.
    evidence_gaps: tuple[str, ...] = field(default=(), metadata=_MADE)

    WIRE_ORDER: ClassVar[tuple[str, ...]] = (
        *("run_id", "attempt", "downstream_repo", "workflow", "job", "check_run_id"),
        *("run_url", "artifact_url", "level", "conclusion", "queued_at", "started_at"),
        *("completed_at", "event", "environment", "results", "plan", "upgrade"),
        *("infrastructure", "held_back", "ci_run_id"),
    )

    def __post_init__(self) -> None:
        for name in ("started_at", "completed_at", "queued_at"):
            value = getattr(self, name)
            if value is not None:
                parse_time(value, name)
        if self.attempt < 1:
            raise ExportError(f"run record: attempt must be >= 1, not {self.attempt}")
        if self.level not in LEVELS:
            raise ExportError(f"run record: level must be one of {LEVELS}, not {self.level!r}")
        if self.conclusion is not None and self.conclusion not in CONCLUSIONS:
            raise ExportError(
                f"run record: conclusion must be one of {CONCLUSIONS} or null, "
                f"not {self.conclusion!r}"
            )
        seen: set[str] = set()
        for result in self.results:
            if result.id in seen:
                raise ExportError(f"run record: variant {result.id} appears twice in results")
            seen.add(result.id)

    @property
    def effective_check_run_id(self) -> str:
        """The callback action's fallback: `{RUN_ID}-{RUN_ATTEMPT}` of the CI run."""
        return self.check_run_id or f"{self.callback_run_id}-{self.attempt}"

    @property
    def callback_run_id(self) -> str:
        """`workflow.run_id` as the callback sends it: the CI's run id when known."""
        return self.ci_run_id or self.run_id

    @staticmethod
    def ci_fields(run_id: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """`ci_run_id`, `run_url` and `artifact_url` of a run, from the CI's environment.

        GitHub Actions (`GITHUB_RUN_ID`, `GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`) or Buildkite
        (`BUILDKITE_BUILD_ID`, `BUILDKITE_BUILD_URL`); `SPYRE_CI_RUNS_URL` is where a person
        opens run pages (`spyre-ci serve`'s `/runs`, or wherever reports are uploaded):
        the run's `artifact_url` is `{SPYRE_CI_RUNS_URL}/{run_id}`.
        """
        import os

        env = os.environ if env is None else env
        fields: dict[str, str] = {}
        if env.get("GITHUB_RUN_ID"):
            fields["ci_run_id"] = env["GITHUB_RUN_ID"]
            if env.get("GITHUB_REPOSITORY"):
                server = (env.get("GITHUB_SERVER_URL") or "https://github.com").rstrip("/")
                fields["run_url"] = (
                    f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
                )
        elif env.get("BUILDKITE_BUILD_ID"):
            fields["ci_run_id"] = env["BUILDKITE_BUILD_ID"]
            if env.get("BUILDKITE_BUILD_URL"):
                fields["run_url"] = env["BUILDKITE_BUILD_URL"]
        if env.get("SPYRE_CI_RUNS_URL"):
            fields["artifact_url"] = f"{env['SPYRE_CI_RUNS_URL'].rstrip('/')}/{run_id}"
        return fields

    @property
    def failures(self) -> tuple[VariantResult, ...]:
        return tuple(r for r in self.results if r.status.is_failure)

    @property
    def new_failures(self) -> tuple[VariantResult, ...]:
        # A failure nobody classified counts as new: better a false alarm than a silent one.
        return tuple(r for r in self.failures if r.classification in (None, Classification.NEW))

    @property
    def gaps(self) -> tuple[str, ...]:
        """Why the outcomes cannot be vouched for as a pass (`evidence`): results the plan
        promises and the record lacks, results that contradict each other, and where the
        JUnit disagrees with them (`evidence_gaps`). Empty for a run that can be green."""
        return evidence.record_gaps(self) + self.evidence_gaps

    @property
    def effective_conclusion(self) -> str:
        """`failure` when a failure is new (or unclassified), or when the tests could not run;
        pre-existing and flaky failures stay green; `neutral` instead of `success` when the
        change was tested only in part or not at all (never a plain success about it), or
        when the outcomes and their evidence disagree (`gaps`: fail closed). A `success`
        set in the record is held to the same evidence."""
        if self.conclusion:
            return "neutral" if self.conclusion == "success" and self.gaps else self.conclusion
        if self.new_failures or self.infrastructure:
            return "failure"
        if self.gaps or self.environment.tested in (Tested.PARTIAL, Tested.NOT_TESTED):
            return "neutral"
        return "success"

    @property
    def gaps_message(self) -> str:
        """One line on `gaps` for places that take one (a check run's title, HUD's
        environment); empty without any."""
        return evidence.headline(self.gaps)

    @property
    def infrastructure_message(self) -> str:
        """One line for places that take one (HUD's environment, a check run's title)."""
        if not self.infrastructure:
            return ""
        first = self.infrastructure[0].splitlines()[0]
        more = f" (and {len(self.infrastructure) - 1} more)" if len(self.infrastructure) > 1 else ""
        return f"infrastructure error, not a test result: {first}{more}"

    def to_json(self) -> dict[str, Any]:
        return {"format": RECORD_FORMAT, **to_json(self)}

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        if not isinstance(data, Mapping):
            raise ExportError("run record: not a JSON object")
        if data.get("format") != RECORD_FORMAT:
            raise ExportError(
                f"run record: format {data.get('format')!r} is not {RECORD_FORMAT}; "
                "re-create it with the pipeline that wrote it"
            )
        try:
            return from_json(cls, data)
        except (CodecError, KeyError, ValueError) as exc:
            raise ExportError(f"run record: {exc}") from None

    def save(self, path: str | Path) -> None:
        text = json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)
        Path(path).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> RunRecord:
        """Read a record written by `save`; errors name the file."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ExportError(f"{path}: no such run record") from None
        except json.JSONDecodeError as exc:
            raise ExportError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        problems = errors("run_record", data)
        if problems:
            raise ExportError(f"{path}: not a run record: {'; '.join(problems[:5])}")
        try:
            return cls.from_json(data)
        except ExportError as exc:
            raise ExportError(f"{path}: {exc}") from None


def parse_time(value: str, name: str = "timestamp") -> datetime:
    """An ISO 8601 timestamp as an aware UTC datetime; naive times are taken as UTC."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise ExportError(
            f"{name} {value!r} is not an ISO 8601 time (want 2026-11-29T14:00:00Z)"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def iso_z(moment: datetime) -> str:
    """`2026-11-29T14:00:00Z`: the callback's timestamp form (seconds, UTC, Z)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def datetime64(value: str | None) -> str:
    """ClickHouse DateTime64(9) text, `YYYY-MM-DD hh:mm:ss.nnnnnnnnn` in UTC."""
    if not value:
        return EPOCH
    moment = parse_time(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond * 1000:09d}"
