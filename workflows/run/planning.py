"""Planning (selector stages 1-3) for every command that plans: `select`, `run`, the intake,
and the upgrade diff run.

One way from a change to a Plan: the change set (event and diff), the impact map (read and
described for plan.json), and `selector.plan`. An upgrade is the same with a different Scout:
the change is the difference of two Inventories (`plan_upgrade`, `selector.upgrade`). Finish
never plans again: it reads the stored Plan back (`workflows.run.verification`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import selector
from suites.model import Inventory
from workflows.run.run_model import Hub, PipelineError, PlanNotes, RunRequest, plan_json
from workflows.stores.sources import GitHubSources, tests_root, with_old_sources
from workflows.tracing.trace_store import TraceStore, joined_trace
from workflows.tracing.traces import ImpactNote, TraceError, describe, read_trace

if TYPE_CHECKING:
    from selector.upgrade import InventoryDiff, UpgradeSelection

ImpactInfo = tuple[selector.ImpactMap, ImpactNote]  # the map, what plan.json says of it


@dataclass(frozen=True)
class PlanResult:
    plan: selector.Plan
    notes: PlanNotes
    shards: list[list[str]]
    holdout: list[str]
    trace: selector.ImpactMap | None = None  # the trace the plan joined

    @property
    def selected_ids(self) -> tuple[str, ...]:
        return self.plan.selected_ids

    def to_json(self) -> dict[str, Any]:
        """plan.json."""
        return plan_json(self.plan, self.notes)


def plan_config(request: RunRequest) -> selector.PlanConfig:
    return selector.PlanConfig(
        budget_count=request.budget_count,
        budget_seconds=request.budget_time_s,
        holdout_rate=request.holdout,
        shards=request.shards,
        force_full=request.full,
    )


def change_set(request: RunRequest) -> selector.ChangeSet:
    return selector.ChangeSet.from_event(request.event, request.diff_text)


def load_impact(path: str, inventory: Inventory) -> ImpactInfo:
    """The impact map (trace) at `path` and what plan.json says of it; errors name the file."""
    try:
        impact = read_trace(Path(path))
    except TraceError as exc:
        raise PipelineError(str(exc)) from None
    return impact, describe(impact, path, inventory)


def plan_change(
    changes: selector.ChangeSet,
    inventory: Inventory,
    history: selector.History,
    config: selector.PlanConfig,
    *,
    impact: ImpactInfo | None = None,
    previous: Inventory | None = None,
    github: GitHubSources | None,
) -> PlanResult:
    """Stages 1-3 over one change; the Plan, its JSON (with the impact map named) and shards.

    The old-side sources this machine has (`workflows.stores.sources`: the installed torch,
    and the checkout of upstream's tests the file suites import, `${TORCH_ROOT}`) are added to
    the change, so that the Scout places changed lines in their definitions whatever form the
    diff has (`github`: the GitHub that gives the files this machine lacks; None: none)."""
    changes = with_old_sources(
        changes, torch_version=inventory.torch_version, github=github, tests=tests_root()
    )
    result = selector.plan(
        changes, inventory, history, config, previous=previous, impact=impact[0] if impact else None
    )
    notes = PlanNotes(impact[1] if impact else None, _hubs(result))
    shards = [list(shard.ids) for shard in result.shards]
    return PlanResult(
        result,
        notes,
        [s for s in shards if s],
        list(result.holdout),
        impact[0] if impact else None,
    )


def _hubs(plan: selector.Plan) -> tuple[Hub, ...]:
    """What most of the inventory reaches (`impact_map` reasons marked a hub): how many
    variants each reached, how many the plan kept, and how many a budget left out."""
    selected: dict[str, int] = {}
    left_out: dict[str, dict[str, int]] = {}
    for chosen in plan.selected:
        for reason in chosen.reasons:
            if "(a hub:" in reason.reason:
                selected[reason.reason] = selected.get(reason.reason, 0) + 1
    for reasons, why in plan.unselected.values():
        for reason in reasons:
            if "(a hub:" in reason.reason:
                selected.setdefault(reason.reason, 0)
                counts = left_out.setdefault(reason.reason, {})
                counts[why] = counts.get(why, 0) + 1
    return tuple(Hub(r, n, left_out.get(r, {})) for r, n in selected.items())


def make_plan(
    request: RunRequest,
    inventory: Inventory,
    history: selector.History,
    traces: TraceStore | None = None,
    github: GitHubSources | None = None,
    without: frozenset[str] = frozenset(),
) -> PlanResult:
    """The plan of a run request (`spyre-ci run`, the intake, a resumed run's first step).

    Without an impact map the plan joins the shipped trace overlaid by the traces earlier
    runs stored (`traces`, beside History). `github`: where old-side sources the machine
    lacks come from (`workflows.stores.sources`; None: nowhere). `without`: paths of the
    change left out of this plan (files that wait for a build: planned when one holds them)."""
    impact: ImpactInfo | None
    if request.impact_map:
        impact = load_impact(request.impact_map, inventory)
    elif request.default_trace:
        impact = joined_trace(inventory, traces)
    else:
        impact = None
    changes = change_set(request)
    if without:
        changes = replace(
            changes,
            paths=tuple(p for p in changes.paths if p.path not in without),
            patches={path: f for path, f in changes.patches.items() if path not in without},
        )
    return plan_change(
        changes, inventory, history, plan_config(request), impact=impact, github=github
    )


def plan_upgrade(
    old: Inventory,
    new: Inventory,
    details_old: Mapping[str, Any] | None = None,
    details_new: Mapping[str, Any] | None = None,
    *,
    holdout: float | None = None,
    seed: str | None = None,
    canaries: bool = True,
) -> tuple[InventoryDiff, UpgradeSelection]:
    """The upgrade's Scout and plan (`selector.upgrade`): the diff of the two Inventories and
    the selection to run on both versions (`holdout`: its share, None: the selector's default
    rate); selector errors become PipelineErrors."""
    from selector.plan import DEFAULT_HOLDOUT_RATE
    from selector.upgrade import diff_inventories, select_upgrade

    try:
        diff = diff_inventories(old, new, details_old, details_new)
        return diff, select_upgrade(
            diff,
            old,
            new,
            holdout_rate=DEFAULT_HOLDOUT_RATE if holdout is None else holdout,
            seed=seed,
            canaries=canaries,
        )
    except selector.SelectorError as exc:
        raise PipelineError(str(exc)) from None
