"""Verification (selector stage 4) of a planned run: reruns, baseline, expansion.

It judges the plan that ran, as stored at plan time (the planned run's Plan with the History
snapshot taken then), so a finish task on another machine never plans again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import selector
from contracts.classification import Classification
from contracts.tested import Tested
from suites.model import Inventory, Outcome, Status
from workflows.run.layout import RERUN_SHARD
from workflows.run.run_model import PlannedRun

Execute = Callable[[str, Sequence[str]], list[Outcome]]
BaseExecute = Callable[[Sequence[str]], dict[str, Outcome]]
BASELINE_KINDS = ("push", "nightly", "periodic")


@dataclass(frozen=True)
class VerifiedRun:
    """The selector's Verdict with the outcomes and classification it implies."""

    outcomes: dict[str, Outcome]  # final per variant (a flaky failure shows its passing rerun)
    classification: dict[str, Classification]
    verdict: selector.Verdict
    base: dict[str, Outcome] = field(default_factory=dict)  # A/B: failures on the base torch
    # Failures the verdict does not pin on what was tested: the change was not applied (or
    # only in part, and no A/B run showed it passing without it), or a scheduled run's
    # variant that its reference torch does not have. Each is the torch's own.
    unattributed: tuple[str, ...] = ()

    @property
    def metrics(self) -> dict[str, Any]:
        return self.verdict.metrics.to_json()


def failed_there(outcome: Outcome) -> bool:
    """Whether a test failed on the other side of an A/B comparison: a failure, or one its
    expectations there call expected (xfailed). A scheduled run's reference torch is another
    version than the build's, with expectations of its own: a variant the build expects to
    pass and the reference expects to fail failed there all the same, and is no regression."""
    return outcome.status.is_failure or outcome.status is Status.XFAILED


def verify(
    planned: PlannedRun,
    inventory: Inventory,
    first: Mapping[str, Outcome],
    execute: Execute,
    base: BaseExecute | None = None,
    *,
    reference: bool = False,
) -> tuple[VerifiedRun, selector.HistoryUpdate]:
    """Stage 4: rerun failures, judge against the baseline, run the expansion, judge again.

    `base` (a run that applied a change): runs ids on the base torch, without the change.
    Then a failure that is not flaky is new when it passes on the base and pre-existing
    when it fails there too (the A/B comparison), whatever History's baseline says.
    `reference`: `base` runs them on the reference torch of a scheduled run on a build (the
    installed one the expectations were written for) instead; a variant it does not have is
    new on the build, and its first outcome is the build's own, never a regression.

    A change that was not tested is never blamed: when the environment says the change was
    not applied, or applied in part, a failure is new only where the A/B run showed it
    passing without the change; every other failure is the torch's own (`unattributed`)."""
    request = planned.request
    history = selector.History.from_json(planned.history)
    plan = planned.plan  # the plan that ran, as stored at plan time: finish never plans again
    on_baseline = (
        request.event.kind in BASELINE_KINDS if request.baseline is None else request.baseline
    )
    # Outcomes on a torch with a change applied are the change's: a tried patch (a diff the
    # user gave), or a change applied in part or on another torch, never teaches History
    # what upstream does. Without anything applied they are the installed torch's own.
    environment = planned.environment
    if (
        environment is not None
        and environment.change.applied
        and (request.change_strict or environment.tested is not Tested.TESTED)
    ):
        on_baseline = False
    outcomes = dict(first)
    reruns: list[Outcome] = []

    def judge() -> selector.Verdict:
        if request.rerun_failures:
            again = [
                vid
                for vid in selector.to_rerun(outcomes.values())
                if vid not in {r.id for r in reruns}
            ]
            if again:
                reruns.extend(execute(RERUN_SHARD, again))
        return selector.verify(
            plan, list(outcomes.values()), reruns, history, inventory, on_baseline=on_baseline
        )

    verdict = judge()
    if request.expand and verdict.expansion:
        outcomes.update({o.id: o for o in execute("expansion", verdict.expansion)})
        verdict = judge()
    final = dict(outcomes)
    rerun_by_id = {r.id: r for r in reruns}
    classification: dict[str, Classification] = {}
    for failure in verdict.failures:
        classification[failure.id] = failure.classification
        if failure.classification is Classification.FLAKY:
            final[failure.id] = rerun_by_id.get(failure.id, final[failure.id])
    base_outcomes: dict[str, Outcome] = {}
    unattributed: list[str] = []
    if base is not None:
        failing = sorted(v for v, c in classification.items() if c is not Classification.FLAKY)
        if failing:
            base_outcomes = base(failing)
        for vid in failing:
            on_base = base_outcomes.get(vid)
            if on_base is None:
                if reference:  # only the build has it: its first failure is the build's own
                    classification[vid] = Classification.PRE_EXISTING
                    unattributed.append(vid)
                continue  # not run on the base (removed there): History's judgement stands
            classification[vid] = (
                Classification.PRE_EXISTING if failed_there(on_base) else Classification.NEW
            )
    if environment is not None and environment.tested is not Tested.TESTED:
        for vid, judged in classification.items():
            on_base = base_outcomes.get(vid)
            shown = on_base is not None and not failed_there(on_base)
            if judged is Classification.NEW and not shown:
                classification[vid] = Classification.PRE_EXISTING
                unattributed.append(vid)
    return (
        VerifiedRun(final, classification, verdict, base_outcomes, tuple(sorted(unattributed))),
        verdict.history_update,
    )
