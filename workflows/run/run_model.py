"""The plain data of one run, as the pipeline's steps hand it on (JSON for Celery tasks).

RunRequest (everything a run needs) -> PlannedRun (the plan and the History snapshot it was
made from) -> ShardRun per shard -> FinishedRun. Kept apart from `workflows.run.pipeline` so that
planning, verification and exporting take these types without importing the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import selector
from contracts.backend import BackendId
from contracts.change import ChangeNote, ChangeState
from contracts.classification import Classification
from contracts.codec import EMPTY, NONE, Record, from_json, wire
from contracts.event import TriggerEvent
from contracts.exit_codes import ExitCode
from contracts.run_summary import RunSummary
from contracts.tested import Tested
from suites.model import Outcome
from workflows.errors import BadInput
from workflows.runner.change_overlay import AppliedChange, FileEffect
from workflows.runner.shard_runner import InfraFault, Limits
from workflows.tracing.traces import ImpactNote

PLANNED_FILE = "planned.json"  # everything `runs resume` needs to continue a stopped run


class PipelineError(BadInput):
    """A run cannot go on as asked; the message names the run and the step (exit 2)."""


@dataclass(frozen=True)
class RunRequest(Record):
    """Everything a run needs, as plain data (a Celery task argument)."""

    run_id: str
    event: TriggerEvent  # what triggered the run; its diff is `diff_text`, not the event's
    out_dir: str
    inventory: str
    diff_text: str | None = None
    # Where the diff came from (a file, the event's sibling patch, GitHub's compare): named in
    # errors and in the environment under test.
    diff_source: str = ""
    # Apply the change's Python files to the torch under test (`workflows.runner.change_overlay`);
    # strict: a hunk that does not apply is bad input (a diff the user gave), else that file
    # is named as not applied (an event's diff, made against upstream's base).
    apply_change: bool = True
    change_strict: bool = False
    full: bool = False
    budget_count: int | None = None
    budget_time_s: float | None = None
    holdout: float | None = None  # None: the selector's default holdout (cost-bounded)
    specs: tuple[str, ...] = ()
    test_timeout_s: float = 300.0
    shard_timeout_s: float = 3 * 3600.0
    memory_mb: int | None = 8192
    shards: int = 1
    rerun_failures: bool = True
    expand: bool = True
    baseline: bool | None = None  # record results as the baseline; None: by event kind
    impact_map: str | None = None  # `spyre-ci impact-map` output the selector also reads
    # Without an impact map, join the shipped trace of the Inventory's torch (if one ships).
    default_trace: bool = True
    # Share of the run's variants traced beside those with no fresh trace (0: only those).
    trace_share: float = 0.05
    record_traces: bool = True  # shards trace (see trace_share); False: nothing recorded
    # A run whose failing share is above this is held back from History until confirmed.
    mass_failure_share: float = 0.5
    downstream_repo: str = "torch-spyre/torch-spyre"
    workflow: str = "spyre-ci"
    job: str = "variant-tests"
    attempt: int = 1

    @property
    def limits(self) -> Limits:
        return Limits(self.test_timeout_s, self.shard_timeout_s, self.memory_mb)


@dataclass(frozen=True)
class Hub(Record):
    """A reason that reaches most of the inventory (`selector`'s hub share): how many
    variants it brought into the plan, and how many a budget left out, by why."""

    reason: str
    selected: int = 0
    left_out: Mapping[str, int] = field(default_factory=dict, metadata=wire(omit=EMPTY))


@dataclass(frozen=True)
class PlanNotes(Record):
    """What workflows adds to the selector's Plan in plan.json: the impact map it joined,
    and the hubs among its reasons."""

    impact_map: ImpactNote | None = field(default=None, metadata=wire(omit=NONE))
    hubs: tuple[Hub, ...] = field(default=(), metadata=wire(omit=EMPTY))


def plan_json(plan: selector.Plan, notes: PlanNotes) -> dict[str, Any]:
    """plan.json: the selector's Plan and workflows' notes, in one object."""
    return {**plan.to_json(), **notes.to_json()}


@dataclass(frozen=True)
class TorchUnderTest(Record):
    """The torch a run's tests ran on: version, git sha ("unknown" when not known) and where
    it came from (the installed one, or a prepared environment)."""

    version: str = "unknown"
    git_sha: str = "unknown"
    source: str = ""


@dataclass(frozen=True)
class ChangeUnderTest(Record):
    """The change applied on top of that torch (`AppliedChange`, as it was when the run was
    planned) with where its diff came from and the event's base and head shas. Its JSON is
    that of `contracts.change.ChangeNote`, the record `dashboard_export` reads."""

    id: str = ""
    state: str = ChangeState.NONE  # a ChangeState
    applied: tuple[FileEffect, ...] = ()
    not_applied: tuple[FileEffect, ...] = ()
    no_effect: tuple[FileEffect, ...] = ()
    broken: tuple[str, ...] = ()  # changed modules that do not compile
    source: str = ""
    base_sha: str = ""
    head_sha: str = ""
    # Keys a planned.json written by another version lacks (not written back) or has that
    # this one does not know (kept as read).
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, change: AppliedChange, source: str, base_sha: str, head_sha: str
    ) -> ChangeUnderTest:
        return cls(
            change.id,
            change.state,
            change.applied,
            change.not_applied,
            change.no_effect,
            change.broken,
            source,
            base_sha,
            head_sha,
        )

    def note(self) -> ChangeNote:
        """The change as planned.json and run.json carry it (the same fields)."""
        return ChangeNote(**{f.name: getattr(self, f.name) for f in fields(ChangeNote)})


_TESTED = wire(encode=lambda t: t or "", decode=Tested.of)  # None written ""


@dataclass(frozen=True)
class EnvironmentUnderTest(Record):
    """What a run tested (`workflows.run.under_test.resolve`, once, at plan time): the torch,
    the change applied on it, the backend, and the verdict on that (`Tested`; None in a
    planned.json from before it was kept) with its headline and the notes that decided it.
    planned.json's `environment`; run.json, the terminal, the report and the callback carry
    it on."""

    torch: TorchUnderTest = field(default_factory=TorchUnderTest)
    change: ChangeUnderTest = field(default_factory=ChangeUnderTest)
    # As `backend_identity.backend` found it: what History's plan facts and forensics
    # compare runs by.
    backend: BackendId = field(default_factory=BackendId)
    tested: Tested | None = field(default=None, metadata=_TESTED)
    headline: str = ""
    notes: tuple[str, ...] = ()
    missing: frozenset[str] = frozenset()  # see `ChangeUnderTest`
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tested", Tested.of(self.tested))
        if not isinstance(self.backend, BackendId):  # given as its JSON
            object.__setattr__(self, "backend", BackendId.from_json(self.backend))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvironmentUnderTest | None:  # type: ignore[override]
        """The environment in a planned.json; None for a run planned before it was recorded
        (an empty `environment`)."""
        if not data:
            return None
        return from_json(cls, data)


@dataclass
class PlannedRun:
    request: RunRequest
    plan: selector.Plan  # what runs and why, as the selector planned it
    shards: list[list[str]]
    holdout: list[str]
    started_at: str
    history: dict[str, Any]  # the History snapshot the plan was made from (selector JSON)
    # The environment under test (`workflows.run.under_test.resolve`): torch, change, backend;
    # None for a run planned before it was recorded.
    environment: EnvironmentUnderTest | None = None
    notes: PlanNotes = field(default_factory=PlanNotes)

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request.to_json(),
            "plan": plan_json(self.plan, self.notes),
            "shards": self.shards,
            "holdout": self.holdout,
            "started_at": self.started_at,
            "history": self.history,
            "environment": self.environment.to_json() if self.environment is not None else {},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlannedRun:
        """A planned run back (planned.json, a Celery argument); a plan in a format this
        version does not read is a `selector.SelectorError`."""
        return cls(
            RunRequest.from_json(data["request"]),
            selector.Plan.from_json(data["plan"]),
            [list(s) for s in data["shards"]],
            list(data["holdout"]),
            data["started_at"],
            dict(data["history"]),
            EnvironmentUnderTest.from_json(data.get("environment") or {}),
            PlanNotes.from_json(data["plan"]),
        )


@dataclass
class FinishedRun:
    planned: PlannedRun
    outcomes: dict[str, Outcome]
    classification: dict[str, Classification]  # failing id -> new | pre-existing | flaky
    summary: RunSummary
    out_dir: Path
    faults: tuple[InfraFault, ...] = ()  # shards that could not run: an infrastructure error
    held_back: str | None = None  # why History did not learn this run, when it did not
    traces_stored: int = 0  # variant traces this run stored beside History
    # A/B: each failing variant's outcome on the base torch (the change not applied), or on
    # the reference torch of a scheduled run on a build (`reference` then names it).
    base_outcomes: dict[str, Outcome] = field(default_factory=dict)
    reference: str = ""
    # Base outcomes read from the cache, not run by this run: id -> the run that ran it.
    base_read: dict[str, str] = field(default_factory=dict)
    # Failing ids that are the torch's own, not pinned on what was tested (VerifiedRun's).
    unattributed: tuple[str, ...] = ()

    @property
    def new_failures(self) -> list[str]:
        return sorted(v for v, c in self.classification.items() if c is Classification.NEW)

    @property
    def not_tested(self) -> bool:
        """Nothing of the change could be tested: the run has no verdict on it."""
        environment = self.planned.environment
        return environment is not None and environment.tested is Tested.NOT_TESTED

    @property
    def exit_code(self) -> ExitCode:
        """3 infrastructure fault (the tests could not run), 1 new test failures, 4 the
        change was not tested (whatever failed is the torch's own), else 0."""
        if self.faults:
            return ExitCode.INFRASTRUCTURE
        if self.new_failures:
            return ExitCode.NEW_FAILURES
        return ExitCode.NOT_TESTED if self.not_tested else ExitCode.OK
