from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from selector import (
    History,
    ImpactMap,
    InventoryIndex,
    PlanConfig,
    SelectorError,
    VariantHistory,
    plan,
)
from selector.heuristics.base import RetrieveContext, Score
from selector.plan import SKIP_COUNT_BUDGET, SKIP_NO_MATCH, Plan
from selector.shard import shard_lpt
from suites.model import Inventory, Status, split_variant_id
from tests.selector.synthetic import make_variant
from tests.testing.changes import diff_change, example_change
from tests.testing.paths import REPO_ROOT

SOFTMAX_FAMILY = {
    "softmax",
    "softmax.with_dtype",
    "log_softmax",
    "log_softmax.with_dtype",
    "nn.functional.softmax",
    "nn.functional.log_softmax",
    "special.softmax",
    "special.log_softmax",
    "softmin",
    "_softmax_backward_data",
    "masked.softmax",
    "masked.log_softmax",
    "nn.Softmax",
}


def subjects(ids: tuple[str, ...]) -> set[str]:
    return {split_variant_id(v)[2] for v in ids}


def test_softmax_push_selects_the_softmax_family_only(index: InventoryIndex) -> None:
    p = plan(example_change("push_softmax_kernel"), index)
    assert p.decision == "targeted" and p.fallback is None
    assert subjects(p.selected_ids) == SOFTMAX_FAMILY
    assert not subjects(p.selected_ids) & {"abs", "add", "matmul", "nn.functional.gelu"}
    # every dtype and template of the exact op, with the reason that names the kernel file
    exact = [s for s in p.selected if split_variant_id(s.id)[2] == "softmax"]
    assert len(exact) == 8 * 3
    assert all(s.score == 1.0 for s in exact)
    assert "SoftMax.cpp" in exact[0].reasons[0].reason
    assert p.holdout and not set(p.holdout) & set(p.selected_ids)


def test_docs_only_selects_nothing(index: InventoryIndex) -> None:
    p = plan(example_change("push_docs_only"), index)
    assert (p.decision, p.selected, p.holdout, p.shards) == ("none", (), (), ())
    assert p.skipped["nothing to run for this change"] == len(index.ids) - 1


def test_build_change_falls_back_to_a_full_run(index: InventoryIndex) -> None:
    p = plan(example_change("push_build_cmake"), index, config=PlanConfig(budget_count=5))
    assert p.decision == "full"
    assert "CMakeLists.txt" in (p.fallback or "")
    assert len(p.selected) == len(index.ids) - 1  # all but the declared skip
    assert p.budget.not_applied
    assert p.selected[0].reasons[-1].heuristic == "fallback"


@pytest.mark.parametrize("name", ["pr_merged_nn_functional", "dispatch_crcr_push"])
def test_other_examples_are_narrow(index: InventoryIndex, name: str) -> None:
    p = plan(example_change(name), index)
    assert p.decision == "targeted"
    assert 0 < len(p.selected) < 0.1 * len(index.ids)


def test_merged_pr_reaches_layer_norm_not_the_whole_opinfo_database(
    index: InventoryIndex,
) -> None:
    p = plan(example_change("pr_merged_nn_functional"), index)
    assert subjects(p.selected_ids) == {"nn.functional.layer_norm", "nn.LayerNorm"}


def test_holdout_is_seeded_by_the_head_sha(index: InventoryIndex) -> None:
    change = example_change("push_softmax_kernel")
    first = plan(change, index)
    assert plan(change, index).holdout == first.holdout
    other = plan(replace(change, head_sha="0" * 40), index)
    assert other.holdout != first.holdout
    pool = len(index.ids) - 1 - len(first.selected)
    assert len(first.holdout) == max(PlanConfig().holdout_min, round(0.02 * pool))
    assert plan(change, index, config=PlanConfig(holdout_rate=0)).holdout == ()
    # holdout variants run but are counted apart from the skipped ones
    assert sum(first.skipped.values()) + len(first.holdout) + len(first.selected) == len(index.ids)


def test_a_change_without_a_sha_seeds_its_holdout_by_what_it_changes(
    index: InventoryIndex,
) -> None:
    """Two unrelated diffs given without a sha draw different holdouts (the Inventory is
    covered over many runs); the same diff draws the same one."""
    change = example_change("push_softmax_kernel")
    unsha = replace(change, head_sha="")
    first = plan(unsha, index)
    assert first.holdout and plan(unsha, index).holdout == first.holdout
    hunk = next(iter(change.patches.values())).hunks[0]
    other_patch = replace(next(iter(change.patches.values())), hunks=(hunk,) * 2)
    other = replace(unsha, patches={**change.patches, other_patch.path: other_patch})
    assert other.seed() != unsha.seed() and unsha.seed().startswith("change-")
    assert plan(other, index).holdout != first.holdout
    shared = set(plan(other, index).holdout) & set(first.holdout)
    assert len(shared) < len(first.holdout) // 2  # not the same sample, as a constant made


def test_count_budget_keeps_the_best_and_always_the_failing_and_new(
    inventory: Inventory,
) -> None:
    new = make_variant("nn.functional.rms_norm", "compare_cpu", "float16")
    inv = Inventory("2.13.0", "x", (*inventory.variants, new))
    failing_id = "ops::compare_cpu::abs::float32"
    history = History(
        variants={failing_id: VariantHistory(recent=(Status.PASSED, Status.FAILED))},
        known_variants=frozenset(v.id for v in inventory.variants),
    )
    p = plan(example_change("push_softmax_kernel"), inv, history, PlanConfig(budget_count=10))
    ids = set(p.selected_ids)
    assert {failing_id, new.id} <= ids
    assert len(ids) == 10
    assert p.skipped[SKIP_COUNT_BUDGET] > 0
    mandatory = {s.id for s in p.selected if s.mandatory}
    assert mandatory == {failing_id, new.id}
    assert all(s.score == 1.0 for s in p.selected)


def test_time_budget_uses_history_durations(index: InventoryIndex) -> None:
    change = example_change("push_softmax_kernel")
    durations = {vid: VariantHistory(mean_duration_s=0.25) for vid in index.ids}
    p = plan(change, index, History(variants=durations), PlanConfig(budget_seconds=10.0))
    assert p.budget.kind == "time"
    assert p.budget.used <= 10.0
    assert len(p.selected) == 40
    # unknown durations take the default
    p2 = plan(change, index, None, PlanConfig(budget_seconds=10.0, default_duration_s=2.0))
    assert len(p2.selected) == 5


def test_trial_heuristic_is_recorded_not_counted(index: InventoryIndex) -> None:
    change = example_change("push_softmax_kernel")
    counted = plan(change, index)
    trial = plan(change, index, config=PlanConfig(trial=frozenset({"op_match"})))
    assert trial.selected == ()
    assert trial.trial["op_match"].would_add == len(counted.selected)
    reasons = trial.unselected
    assert not reasons or all(r.trial for rs, _ in reasons.values() for r in rs)


def test_definition_changed_against_the_previous_inventory(inventory: Inventory) -> None:
    target = "ops::fake::cumsum::bfloat16"
    changed = tuple(
        replace(v, fingerprint="beef" * 4) if v.id == target else v for v in inventory.variants
    )
    now = Inventory("2.13.0", "x", changed)
    p = plan(diff_change("test/test_ops_gradients.py"), now, previous=inventory)
    assert p.selected_ids == (target,)
    assert p.selected[0].reasons[0].heuristic == "definition"


def test_co_failure_and_watch_globs(inventory: Inventory) -> None:
    view = "ops::compare_cpu::view::float32"
    history = History(co_failures={"torch/_functorch/aot.py": {view: 3}})
    p = plan(diff_change("torch/_functorch/aot.py", "test/test_modules.py"), inventory, history)
    got = {s.id: s.reasons[0] for s in p.selected}
    assert got["ops::compare_cpu::view::float32"].heuristic == "co_failure"
    modules = {v for v in got if v.startswith("modules::")}
    assert len(modules) == 12 and all(got[v].heuristic == "watch" for v in modules)


def test_impact_map_links_changed_functions_to_variants(inventory: Inventory) -> None:
    impact = ImpactMap(
        functions={"ops::compare_cpu::cat::float32": frozenset({"torch/functional.py:split"})},
        aten_ops={"ops::out::stack::float16": frozenset({"aten::split_with_sizes.default"})},
    )
    body = (
        "diff --git a/torch/functional.py b/torch/functional.py\n--- a/torch/functional.py\n"
        "+++ b/torch/functional.py\n@@ -1 +1 @@ def split(\n-a\n+b\n"
    )
    p = plan(diff_change(body=body), inventory, impact=impact)
    assert p.selected_ids == ("ops::compare_cpu::cat::float32",)
    assert p.selected[0].reasons[0].reason == "executes changed torch/functional.py:split"


def test_a_plug_in_heuristic(inventory: Inventory) -> None:
    class Everything:
        name = "everything"

        def score(self, ctx: RetrieveContext) -> dict[str, Score]:
            return {vid: Score(0.1, "plug-in") for vid in ctx.index.ids[:3]}

    # A watched path that names no op: only the plug-in scores.
    p = plan(diff_change("torch/nn/modules/x.py"), inventory, heuristics=[Everything()])
    assert len(p.selected) == 3 and p.selected[0].reasons[0].reason == "plug-in"


def test_plan_json_contract(index: InventoryIndex) -> None:
    p = plan(example_change("push_softmax_kernel"), index, config=PlanConfig(shards=3))
    data = json.loads(json.dumps(p.to_json()))
    assert data["fallback"] is None
    assert {"id", "score", "reasons"} <= set(data["selected"][0])
    assert data["selected"][0]["reasons"][0]["heuristic"] == "op_match"
    assert data["holdout"] == list(p.holdout)
    assert SKIP_NO_MATCH in data["skipped"]
    assert data["change_facts"]["decision"] == "targeted"
    shard_ids = [v for s in data["shards"] for v in s["ids"]]
    assert sorted(shard_ids) == sorted([*p.selected_ids, *p.holdout])
    assert len(data["shards"]) == 3


def test_lpt_balances_shards() -> None:
    durations = {"a": 7.0, "b": 5.0, "c": 4.0, "d": 3.0, "e": 3.0, "f": 2.0}
    shards = shard_lpt(list(durations), durations, 2)
    assert sorted(s.estimated_s for s in shards) == [12.0, 12.0]
    assert len(shard_lpt(["a"], durations, 4)) == 1


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"budget_count": 3, "budget_seconds": 1.0}, "not both"),
        ({"holdout_rate": 1.5}, "holdout"),
        ({"shards": 0}, "shards"),
    ],
)
def test_bad_config(kw: dict[str, object], message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        PlanConfig(**kw)  # type: ignore[arg-type]


def test_unknown_heuristic_names_the_known_ones(inventory: Inventory) -> None:
    with pytest.raises(SelectorError, match="unknown heuristic.*nope.*known: watch"):
        plan(diff_change("torch/x.py"), inventory, config=PlanConfig(trial=frozenset({"nope"})))


def test_rerun_of_failed_tests_runs_only_what_fails(inventory: Inventory) -> None:
    from contracts.event import TriggerEvent
    from selector import ChangeSet

    failing = "ops::out::cat::float16"
    history = History(
        variants={
            failing: VariantHistory(recent=(Status.FAILED,)),
            "ops::out::cat::float32": VariantHistory(recent=(Status.PASSED,), flaky=True),
        }
    )
    event = TriggerEvent(
        kind="rerun",
        delivery_id="d",
        repo="pytorch/pytorch",
        head_sha="e" * 40,
        files_complete=False,
        rerun="failed",
    )
    p = plan(ChangeSet.from_event(event), inventory, history)
    assert (p.decision, p.selected_ids, p.holdout) == ("rerun-failed", (failing,), ())
    assert p.skipped["not failing (re-run of failed tests)"] == len(inventory) - 2


REAL_INVENTORY = Path(
    os.environ.get("SPYRE_CI_INVENTORY")
    or REPO_ROOT / "tests" / "fixtures" / "inventory-2.13.0.json.gz"
)


@pytest.mark.skipif(not REAL_INVENTORY.exists(), reason="no built inventory in the tree")
def test_softmax_push_on_the_real_inventory() -> None:
    index = InventoryIndex.build(Inventory.load(REAL_INVENTORY))
    p = plan(example_change("push_softmax_kernel"), index)
    assert {index.family_of_id[v] for v in p.selected_ids} == {"softmax"}
    assert {"softmax", "log_softmax"} <= subjects(p.selected_ids)
    assert len(p.selected) < 0.05 * len(index.ids)


def test_plan_json_round_trip(index: InventoryIndex) -> None:
    from selector import Plan

    p = plan(example_change("pr_merged_nn_functional"), index, config=PlanConfig(shards=2))
    data = json.loads(json.dumps(p.to_json()))
    again = Plan.from_json(data)
    assert again.to_json() == p.to_json()
    assert again.facts == p.facts and again.selected == p.selected
    with pytest.raises(SelectorError, match="plan format"):
        Plan.from_json({**data, "format": 99})


def test_a_module_change_reaches_module_tests_not_the_op_family(inventory: Inventory) -> None:
    body = (
        "diff --git a/torch/nn/modules/linear.py b/torch/nn/modules/linear.py\n"
        "--- a/torch/nn/modules/linear.py\n+++ b/torch/nn/modules/linear.py\n"
        "@@ -10,1 +10,1 @@ class Linear(Module):\n-a\n+b\n"
    )
    p = plan(diff_change(body=body), inventory)
    assert subjects(p.selected_ids) == {"nn.Linear"}
    # while a kernel change of the same family reaches the module too
    kernel = (
        "diff --git a/aten/src/ATen/native/LinearAlgebra.cpp "
        "b/aten/src/ATen/native/LinearAlgebra.cpp\n"
        "--- a/aten/src/ATen/native/LinearAlgebra.cpp\n"
        "+++ b/aten/src/ATen/native/LinearAlgebra.cpp\n"
        "@@ -10,1 +10,1 @@ TORCH_IMPL_FUNC(addmm_out_cpu)\n-a\n+b\n"
    )
    assert "nn.Linear" in subjects(plan(diff_change(body=kernel), inventory).selected_ids)


# 10 selected and a holdout of 40: N = 50, of which the holdout takes 0.8.
CUT_BY_BUDGET = PlanConfig(budget_count=50, holdout_rate=0.8)


@pytest.mark.parametrize("n", [0, 1, 3, 10, 50, 200])
def test_count_budget_bounds_the_selection_and_the_holdout_together(
    index: InventoryIndex, n: int
) -> None:
    p = plan(example_change("push_softmax_kernel"), index, config=PlanConfig(budget_count=n))
    assert len(p.selected) + len(p.holdout) <= n
    assert p.budget.used == len(p.selected) + len(p.holdout)
    assert p.budget.holdout == len(p.holdout)
    assert p.budget.holdout_reserved == round(0.02 * n)


def test_count_budget_gives_the_holdout_what_the_selection_leaves(
    index: InventoryIndex,
) -> None:
    change = example_change("push_softmax_kernel")
    free = plan(change, index)
    n = len(free.selected) + 100
    p = plan(change, index, config=PlanConfig(budget_count=n))
    assert p.selected_ids == free.selected_ids
    assert p.holdout == free.holdout  # the sample it draws unbudgeted fits in the room left
    n = len(free.selected) + 3  # the holdout keeps its share of N: the selection gives way
    tight = plan(change, index, config=PlanConfig(budget_count=n))
    assert len(tight.holdout) == round(0.02 * n) and len(tight.selected) + len(tight.holdout) == n
    assert len(tight.selected) == len(free.selected) - 3


def test_failing_and_new_variants_run_past_the_count_budget_without_a_holdout(
    inventory: Inventory,
) -> None:
    new = make_variant("nn.functional.rms_norm", "compare_cpu", "float16")
    inv = Inventory("2.13.0", "x", (*inventory.variants, new))
    failing_id = "ops::compare_cpu::abs::float32"
    history = History(
        variants={failing_id: VariantHistory(recent=(Status.PASSED, Status.FAILED))},
        known_variants=frozenset(v.id for v in inventory.variants),
    )
    p = plan(example_change("push_softmax_kernel"), inv, history, PlanConfig(budget_count=1))
    assert set(p.selected_ids) == {failing_id, new.id} and p.holdout == ()
    assert p.budget.used == 2  # past N = 1: said, not hidden


def test_holdout_draws_near_variants_more_often(index: InventoryIndex) -> None:
    # A count budget leaves most of the softmax family unselected: those are near.
    change = example_change("push_softmax_kernel")
    p = plan(change, index, config=CUT_BY_BUDGET)
    strata = {s.name: s for s in p.holdout_strata}
    assert set(strata) == {"near", "far"}
    near, far = strata["near"], strata["far"]
    assert near.rate >= 3 * far.rate  # NEAR_BOOST = 4, less rounding
    assert {split_variant_id(v)[2] for v in near.ids} <= SOFTMAX_FAMILY
    assert near.weight == near.population / near.drawn
    unselected = p.totals.eligible - p.totals.selected
    assert near.population + far.population == unselected
    assert p.holdout == tuple(sorted((*near.ids, *far.ids)))
    assert len(p.selected) == 10 and len(p.holdout) == 40  # what N = 50 leaves
    assert plan(change, index, config=CUT_BY_BUDGET).holdout_strata == (
        p.holdout_strata
    )  # seeded: the same draw again
    total = p.totals.eligible_s - p.totals.selected_s
    assert near.population_s + far.population_s == pytest.approx(total)
    assert near.drawn_s + far.drawn_s == pytest.approx(p.totals.holdout_s)


def test_plan_json_round_trips_the_strata_and_loads_the_old_format(index: InventoryIndex) -> None:
    p = plan(example_change("push_softmax_kernel"), index, config=CUT_BY_BUDGET)
    data = json.loads(json.dumps(p.to_json()))
    assert [s["name"] for s in data["holdout_strata"]] == ["near", "far"]
    assert {"population", "drawn", "rate", "weight", "ids"} <= set(data["holdout_strata"][0])
    back = Plan.from_json(data)
    assert back.holdout_strata == p.holdout_strata and back.holdout == p.holdout
    assert back.to_json() == p.to_json()
    del data["holdout_strata"]  # a plan written before the strata
    old = Plan.from_json(data)
    assert old.holdout == p.holdout and old.holdout_strata == ()
    (uniform,) = old.strata
    assert (uniform.name, uniform.population, uniform.ids) == (
        "all",
        p.totals.eligible - p.totals.selected,
        p.holdout,
    )
    assert "holdout_strata" in old.to_json()


def test_a_variants_strongest_evidence_is_its_first_reason(inventory: Inventory) -> None:
    class Family:
        name = "family"

        def score(self, ctx: RetrieveContext) -> dict[str, Score]:
            return {v: Score(0.6, "same op family") for v in ctx.index.ids}

    class Trace:
        name = "trace"

        def score(self, ctx: RetrieveContext) -> dict[str, Score]:
            return {v: Score(0.9, "runs the changed function") for v in ctx.index.ids[:3]}

    p = plan(
        example_change("push_softmax_kernel"),
        inventory,
        heuristics=[Family(), Trace()],
        config=PlanConfig(holdout_rate=0),
    )
    first = {s.id: s.reasons[0].heuristic for s in p.selected}
    assert sorted(first.values()).count("trace") == 3
    assert all(len(s.reasons) == 1 for s in p.selected if first[s.id] == "family")
