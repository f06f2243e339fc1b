"""Glue between the pipeline steps and the pure packages: the selector and dashboard_export.

Finish reads the selector's Plan back from the planned run (`Plan.from_json`) with the
History snapshot taken at plan time, so a finish task on another machine judges exactly the
plan that ran, without loading the impact map or planning again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import selector
from dashboard_export.layout import write_run
from dashboard_export.model import (
    Classification,
    Environment,
    PlanSummary,
    RunRecord,
    VariantResult,
)
from suites.model import Inventory, Outcome

if TYPE_CHECKING:
    from workflows.pipeline import FinishedRun, PlannedRun, RunRequest

Execute = Callable[[str, Sequence[str]], list[Outcome]]
BASELINE_KINDS = ("push", "nightly", "periodic")


@dataclass(frozen=True)
class PlanResult:
    plan: selector.Plan
    plan_json: dict[str, Any]
    shards: list[list[str]]
    holdout: list[str]

    @property
    def selected_ids(self) -> tuple[str, ...]:
        return self.plan.selected_ids


@dataclass(frozen=True)
class Verdict:
    outcomes: dict[str, Outcome]  # final per variant (a flaky failure shows its passing rerun)
    classification: dict[str, str]
    verdict: selector.Verdict

    @property
    def metrics(self) -> dict[str, Any]:
        return self.verdict.metrics.to_json()


def _config(request: RunRequest) -> selector.PlanConfig:
    return selector.PlanConfig(
        budget_count=request.budget_count, budget_seconds=request.budget_time_s,
        holdout_rate=request.holdout, shards=request.shards, force_full=request.full,
    )


def change_set(request: RunRequest) -> selector.ChangeSet:
    return selector.ChangeSet.from_event(request.trigger, request.diff_text)


def load_impact(path: str, inventory: Inventory) -> tuple[selector.ImpactMap, dict[str, Any]]:
    """The impact map at `path` and what plan.json says of it; errors name the file."""
    from workflows.pipeline import PipelineError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PipelineError(f"{path}: no impact map there; record one with `spyre-ci "
                            f"impact-map --out {path}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PipelineError(f"{path}: not a readable impact map: {exc}") from None
    if not isinstance(data, dict):
        raise PipelineError(f"{path}: not an impact map (a JSON object is expected)")
    try:
        impact = selector.ImpactMap.from_json(data, path)
    except selector.SelectorError as exc:
        raise PipelineError(str(exc)) from None
    known = {v.id for v in inventory.variants}
    traced = set(impact.functions) | set(impact.aten_ops)
    about = {"path": path, "torch_version": impact.torch_version,
             "variants": len(traced), "inventory_variants_traced": len(traced & known)}
    if impact.torch_version and impact.torch_version != inventory.torch_version:
        about["note"] = (f"recorded on torch {impact.torch_version}, the Inventory is torch "
                         f"{inventory.torch_version}: record it again for this torch")
    return impact, about


def make_plan(request: RunRequest, inventory: Inventory, history: selector.History) -> PlanResult:
    changes = change_set(request)
    impact, about = (load_impact(request.impact_map, inventory) if request.impact_map
                     else (None, None))
    result = selector.plan(changes, inventory, history, _config(request), impact=impact)
    plan_json = result.to_json()
    if about is not None:
        plan_json["impact_map"] = about
    shards = [list(shard["ids"]) for shard in plan_json["shards"]]
    return PlanResult(result, plan_json, [s for s in shards if s], list(result.holdout))


def verify(
    planned: PlannedRun,
    inventory: Inventory,
    first: Mapping[str, Outcome],
    execute: Execute,
) -> tuple[Verdict, selector.HistoryUpdate]:
    """Stage 4: rerun failures, judge against the baseline, run the expansion, judge again."""
    from workflows.pipeline import PipelineError

    request = planned.request
    history = selector.History.from_json(planned.history)
    try:  # the plan that ran, as stored at plan time: finish never plans again
        plan = selector.Plan.from_json(planned.plan)
    except (selector.SelectorError, KeyError, TypeError, ValueError) as exc:
        raise PipelineError(f"run {request.run_id}: its stored plan is unreadable: "
                            f"{exc}; start the run again") from None
    on_baseline = (request.trigger.kind in BASELINE_KINDS if request.baseline is None
                   else request.baseline)
    outcomes = dict(first)
    reruns: list[Outcome] = []

    def judge() -> selector.Verdict:
        if request.rerun_failures:
            again = [vid for vid in selector.to_rerun(outcomes.values())
                     if vid not in {r.id for r in reruns}]
            if again:
                reruns.extend(execute("rerun", again))
        return selector.verify(plan, list(outcomes.values()), reruns, history, inventory,
                               on_baseline=on_baseline)

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
                str(Classification.NEW) if failure.novelty == "new"
                else str(Classification.PRE_EXISTING)
            )
    return Verdict(final, classification, verdict), verdict.history_update


def environment() -> Environment:
    """Where the tests ran: read from the installed distributions, without importing torch."""
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "unknown"

    return Environment(
        torch_version=version("torch"), torch_git_version=_torch_git_version(),
        backend="backend_under_test (emulated IBM Spyre)", backend_version=version("spyre-ci"),
        device="spyre (emulated: 32 cores, 2 MB scratchpads, 128-byte sticks)",
    )


def _torch_git_version() -> str:
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("torch")
    if spec is None or spec.origin is None:
        return "unknown"
    version_file = Path(spec.origin).parent / "version.py"
    try:
        for line in version_file.read_text(encoding="utf-8").splitlines():
            if line.startswith("git_version"):
                return line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        pass
    return "unknown"


def export(finished: FinishedRun, completed_at: str, verdict: Verdict | None) -> None:
    """Write every output format of the run into its out directory.

    `verdict` is None when the run could not be verified (an infrastructure error): the
    record then carries the faults and the outcomes of the tests that did run.
    """
    request = finished.planned.request
    plan_json = finished.planned.plan
    holdout = set(finished.planned.holdout)
    results = tuple(
        VariantResult.of(outcome, finished.classification.get(vid), vid in holdout)
        for vid, outcome in sorted(finished.outcomes.items())
    )
    reasons: dict[str, int] = {}
    for selected in plan_json.get("selected", ()):
        for reason in selected.get("reasons", ())[:1]:
            key = f"{reason['heuristic']}: {reason['reason']}"
            reasons[key] = reasons.get(key, 0) + 1
    metrics = verdict.verdict.metrics if verdict is not None else None
    summary = PlanSummary(
        selected=len(plan_json.get("selected", ())),
        inventory=int(plan_json.get("totals", {}).get("variants", 0)),
        fallback_reason=plan_json.get("fallback"),
        top_reasons=tuple(sorted(reasons.items(), key=lambda kv: -kv[1])[:10]),
        skipped={str(k): int(v) for k, v in plan_json.get("skipped", {}).items()},
        holdout=len(holdout),
        holdout_misses=tuple(metrics.holdout_misses) if metrics else (),
        metrics={k: float(v) for k, v in (metrics.to_json() if metrics else {}).items()
                 if isinstance(v, int | float) and not isinstance(v, bool)},
    )
    record = RunRecord(
        run_id=request.run_id, attempt=request.attempt, downstream_repo=request.downstream_repo,
        workflow=request.workflow, job=request.job, event=request.trigger,
        environment=environment(), results=results, started_at=finished.planned.started_at,
        completed_at=completed_at, plan=summary,
        infrastructure=tuple(f"{f.summary}\n{f.cause}" for f in finished.faults),
        held_back=finished.held_back, **RunRecord.ci_fields(request.run_id),
    )
    write_run(record, finished.out_dir)
