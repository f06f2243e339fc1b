"""Verification (selector stage 4) of a planned run: reruns, baseline, expansion.

It judges the plan that ran, as stored at plan time (`Plan.from_json` with the History
snapshot taken then), so a finish task on another machine never plans again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import selector
from dashboard_export.model import Classification
from suites.model import Inventory, Outcome
from workflows.run_model import PipelineError, PlannedRun

Execute = Callable[[str, Sequence[str]], list[Outcome]]
BASELINE_KINDS = ("push", "nightly", "periodic")


@dataclass(frozen=True)
class VerifiedRun:
    """The selector's Verdict with the outcomes and classification it implies."""

    outcomes: dict[str, Outcome]  # final per variant (a flaky failure shows its passing rerun)
    classification: dict[str, str]
    verdict: selector.Verdict

    @property
    def metrics(self) -> dict[str, Any]:
        return self.verdict.metrics.to_json()


def verify(
    planned: PlannedRun,
    inventory: Inventory,
    first: Mapping[str, Outcome],
    execute: Execute,
) -> tuple[VerifiedRun, selector.HistoryUpdate]:
    """Stage 4: rerun failures, judge against the baseline, run the expansion, judge again."""
    request = planned.request
    history = selector.History.from_json(planned.history)
    try:  # the plan that ran, as stored at plan time: finish never plans again
        plan = selector.Plan.from_json(planned.plan)
    except (selector.SelectorError, KeyError, TypeError, ValueError) as exc:
        raise PipelineError(
            f"run {request.run_id}: its stored plan is unreadable: {exc}; start the run again"
        ) from None
    on_baseline = (
        request.trigger.kind in BASELINE_KINDS if request.baseline is None else request.baseline
    )
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
                reruns.extend(execute("rerun", again))
        return selector.verify(
            plan, list(outcomes.values()), reruns, history, inventory, on_baseline=on_baseline
        )

    verdict = judge()
    if request.expand and verdict.expansion:
        outcomes.update({o.id: o for o in execute("expansion", verdict.expansion)})
        verdict = judge()
    final = dict(outcomes)
    rerun_by_id = {r.id: r for r in reruns}
    classification: dict[str, str] = {}
    for failure in verdict.failures:
        if failure.kind == "flaky":
            classification[failure.id] = str(Classification.FLAKY)
            final[failure.id] = rerun_by_id.get(failure.id, final[failure.id])
        else:
            classification[failure.id] = (
                str(Classification.NEW)
                if failure.novelty == "new"
                else str(Classification.PRE_EXISTING)
            )
    return VerifiedRun(final, classification, verdict), verdict.history_update
