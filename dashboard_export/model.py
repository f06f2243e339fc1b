"""The input record of every exporter: one finished run, as plain frozen data with JSON round trip.

Long on purpose: it is the one exported record, every dataclass with its JSON round trip
beside it, so that a field added to one side cannot be forgotten on the other; the exporters
read only this module.

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
from typing import Any

from contracts.change import ChangeNote
from contracts.classification import Classification
from contracts.codec import CodecError
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


@dataclass(frozen=True)
class Environment:
    """Where the run ran: upstream torch and the backend under test."""

    torch_version: str
    torch_git_version: str
    backend: str
    backend_version: str
    device: str
    extra: Mapping[str, str] = field(default_factory=dict)
    # The environment under test (`workflows.run.under_test`): where torch came from, the change
    # applied on top of it, and whether that tested the change ("" when not resolved: an
    # upgrade run, a record written before it was).
    torch_source: str = ""
    change: ChangeNote | None = None
    tested: Tested | None = None
    notes: tuple[str, ...] = ()

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

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "torch_version": self.torch_version,
            "torch_git_version": self.torch_git_version,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "device": self.device,
            "extra": dict(self.extra),
        }
        if self.tested:
            data.update(
                torch_source=self.torch_source,
                change=self.change.to_json() if self.change is not None else {},
                tested=self.tested.value,
                notes=list(self.notes),
            )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Environment:
        where = "environment"
        return cls(
            torch_version=_req(data, "torch_version", where),
            torch_git_version=_req(data, "torch_git_version", where),
            backend=_req(data, "backend", where),
            backend_version=_req(data, "backend_version", where),
            device=_req(data, "device", where),
            extra=dict(data.get("extra") or {}),
            torch_source=str(data.get("torch_source") or ""),
            change=_change(data.get("change")),
            tested=data.get("tested") or None,  # read as a Tested by __post_init__
            notes=tuple(str(n) for n in data.get("notes") or ()),
        )


@dataclass(frozen=True)
class VariantResult:
    """One variant's outcome plus what Verify concluded about it."""

    outcome: Outcome
    suite: str
    template: str
    subject: str
    classification: Classification | None = None  # set for failures (and flaky passes)
    holdout: bool = False  # ran only as part of the seeded holdout sample
    # A/B (a run that applied a change): the status of a failing variant on the base torch,
    # without the change; None when it did not run there.
    base_status: str | None = None
    # The run whose base outcome this is, when it was read from the kept base outcomes
    # rather than run by this run (None: run now, or no base outcome).
    base_read: str | None = None

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

    def to_json(self) -> dict[str, Any]:
        data = {
            **self.outcome.to_json(),
            "suite": self.suite,
            "template": self.template,
            "subject": self.subject,
            "classification": str(self.classification) if self.classification else None,
            "holdout": self.holdout,
        }
        if self.base_status is not None:
            data["base_status"] = self.base_status
        if self.base_read is not None:
            data["base_read"] = self.base_read
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantResult:
        where = f"results[{data.get('id', '?')}]"
        try:
            outcome = Outcome.from_json(data)
            classification = data.get("classification")
            return cls(
                outcome=outcome,
                suite=_req(data, "suite", where),
                template=_req(data, "template", where),
                subject=_req(data, "subject", where),
                classification=Classification(classification) if classification else None,
                holdout=bool(data.get("holdout", False)),
                base_status=data.get("base_status"),
                base_read=data.get("base_read"),
            )
        except (KeyError, ValueError) as exc:
            raise ExportError(f"run record {where}: {exc}") from None


@dataclass(frozen=True)
class PlanSummary:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "selected": self.selected,
            "inventory": self.inventory,
            "fallback_reason": self.fallback_reason,
            "top_reasons": [[r, n] for r, n in self.top_reasons],
            "skipped": dict(self.skipped),
            "holdout": self.holdout,
            "holdout_misses": list(self.holdout_misses),
            "metrics": dict(self.metrics),
            "canaries": self.canaries,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanSummary:
        return cls(
            selected=int(_req(data, "selected", "plan")),
            inventory=int(data.get("inventory", 0)),
            fallback_reason=data.get("fallback_reason"),
            top_reasons=tuple((str(r), int(n)) for r, n in data.get("top_reasons", ())),
            skipped={str(k): int(v) for k, v in (data.get("skipped") or {}).items()},
            holdout=int(data.get("holdout", 0)),
            holdout_misses=tuple(data.get("holdout_misses", ())),
            metrics={str(k): float(v) for k, v in (data.get("metrics") or {}).items()},
            canaries=int(data.get("canaries", 0)),
        )


@dataclass(frozen=True)
class DiffRow:
    id: str
    category: DiffCategory
    before: Status | None  # None: the variant does not exist on the old version
    after: Status | None  # None: removed in the new version
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": str(self.category),
            "before": str(self.before) if self.before else None,
            "after": str(self.after) if self.after else None,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DiffRow:
        where = f"upgrade.rows[{data.get('id', '?')}]"
        try:
            return cls(
                id=_req(data, "id", where),
                category=DiffCategory(_req(data, "category", where)),
                before=Status(data["before"]) if data.get("before") else None,
                after=Status(data["after"]) if data.get("after") else None,
                message=data.get("message", ""),
            )
        except ValueError as exc:
            raise ExportError(f"run record {where}: {exc}") from None


@dataclass(frozen=True)
class UpgradeDiff:
    """For version-upgrade runs: how each affected variant moved between two torch versions."""

    from_version: str
    to_version: str
    rows: tuple[DiffRow, ...] = ()

    def by_category(self) -> dict[DiffCategory, list[DiffRow]]:
        grouped: dict[DiffCategory, list[DiffRow]] = {c: [] for c in DiffCategory}
        for row in self.rows:
            grouped[row.category].append(row)
        return grouped

    def to_json(self) -> dict[str, Any]:
        return {
            "from_version": self.from_version,
            "to_version": self.to_version,
            "rows": [r.to_json() for r in self.rows],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UpgradeDiff:
        return cls(
            from_version=_req(data, "from_version", "upgrade"),
            to_version=_req(data, "to_version", "upgrade"),
            rows=tuple(DiffRow.from_json(r) for r in data.get("rows", ())),
        )


@dataclass(frozen=True)
class RunRecord:
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
    forensics: Mapping[str, FailureForensics] = field(default_factory=dict)
    # The run's `workflow.triage_verdict` (`triage.run_verdict`), made with the forensics.
    triage_verdict: TriageVerdict | None = None
    # Where the run's JUnit disagrees with `results` (`evidence.junit_gaps`, set by
    # `layout.write_run`): each keeps the run from `success`.
    evidence_gaps: tuple[str, ...] = ()

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
        return {
            "format": RECORD_FORMAT,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "downstream_repo": self.downstream_repo,
            "workflow": self.workflow,
            "job": self.job,
            "check_run_id": self.check_run_id,
            "run_url": self.run_url,
            "artifact_url": self.artifact_url,
            "level": self.level,
            "conclusion": self.conclusion,
            "queued_at": self.queued_at,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
            "event": self.event.to_json(),
            "environment": self.environment.to_json(),
            "results": [r.to_json() for r in self.results],
            "plan": self.plan.to_json() if self.plan else None,
            "upgrade": self.upgrade.to_json() if self.upgrade else None,
            "infrastructure": list(self.infrastructure),
            "held_back": self.held_back,
            "ci_run_id": self.ci_run_id,
            # Only when made: a record without forensics keeps the bytes it always had.
            **(
                {"forensics": {k: v.to_json() for k, v in self.forensics.items()}}
                if self.forensics
                else {}
            ),
            **({"triage_verdict": self.triage_verdict.to_json()} if self.triage_verdict else {}),
            **({"evidence_gaps": list(self.evidence_gaps)} if self.evidence_gaps else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        if not isinstance(data, Mapping):
            raise ExportError("run record: not a JSON object")
        if data.get("format") != RECORD_FORMAT:
            raise ExportError(
                f"run record: format {data.get('format')!r} is not {RECORD_FORMAT}; "
                "re-create it with the pipeline that wrote it"
            )
        where = "run record"
        try:
            event = TriggerEvent.from_json(_req(data, "event", where))
        except CodecError as exc:
            raise ExportError(f"run record: event.{exc}") from None
        plan = data.get("plan")
        upgrade = data.get("upgrade")
        return cls(
            run_id=str(_req(data, "run_id", where)),
            attempt=int(data.get("attempt", 1)),
            downstream_repo=_req(data, "downstream_repo", where),
            workflow=_req(data, "workflow", where),
            job=_req(data, "job", where),
            check_run_id=str(data.get("check_run_id") or ""),
            run_url=data.get("run_url", ""),
            artifact_url=data.get("artifact_url", ""),
            level=data.get("level", "L2"),
            conclusion=data.get("conclusion"),
            queued_at=data.get("queued_at"),
            started_at=data.get("started_at"),
            completed_at=data.get("completed_at"),
            event=event,
            environment=Environment.from_json(_req(data, "environment", where)),
            results=tuple(VariantResult.from_json(r) for r in data.get("results", ())),
            plan=PlanSummary.from_json(plan) if plan else None,
            upgrade=UpgradeDiff.from_json(upgrade) if upgrade else None,
            infrastructure=tuple(str(m) for m in data.get("infrastructure") or ()),
            held_back=data.get("held_back"),
            ci_run_id=str(data.get("ci_run_id") or ""),
            forensics={
                str(k): FailureForensics.from_json(v)
                for k, v in (data.get("forensics") or {}).items()
            },
            triage_verdict=(
                TriageVerdict.from_json(data["triage_verdict"])
                if data.get("triage_verdict")
                else None
            ),
            evidence_gaps=tuple(str(g) for g in data.get("evidence_gaps") or ()),
        )

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


def _change(data: Any) -> ChangeNote | None:
    """The environment's change (None for none: an upgrade run, an older record)."""
    if not data:
        return None
    try:
        return ChangeNote.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ExportError(f"environment.change: not a change ({exc!r})") from None


def _req(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data or data[key] is None:
        raise ExportError(f"{where}: missing field {key!r}")
    return data[key]
