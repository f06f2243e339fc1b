from __future__ import annotations

import json
import random

import pytest

from selector import (
    History,
    InventoryIndex,
    Metrics,
    Plan,
    VariantHistory,
    apply_update,
    false_green_rate,
    plan,
    to_rerun,
    verify,
)
from selector.holdout import HoldoutStratum, draw_holdout
from selector.plan import PlanConfig
from selector.verify import holdout_bound, wilson_upper
from suites.model import Outcome, Status
from tests.testing.changes import example_change

SOFTMAX_F16 = "ops::compare_cpu::softmax::float16"
LOG_SOFTMAX = "ops::compare_cpu::log_softmax::float32"
SOFTMIN = "ops::out::softmin::bfloat16"
SPECIAL = "ops::fake::special.softmax::float32"


def _recorded(index: InventoryIndex):  # type: ignore[no-untyped-def]
    """A softmax push run: recorded first-run outcomes and reruns of what failed."""
    p = plan(example_change("push_softmax_kernel"), index)
    history = History(
        variants={
            SOFTMIN: VariantHistory(recent=(Status.FAILED,), baseline=Status.FAILED),
            SPECIAL: VariantHistory(recent=(Status.FAILED,), baseline=Status.FAILED),
            SOFTMAX_F16: VariantHistory(
                recent=(Status.PASSED,), baseline=Status.PASSED, mean_duration_s=0.2
            ),
        }
    )
    outcomes = [Outcome(v, Status.PASSED, 0.1) for v in p.selected_ids]
    fail = {
        SOFTMAX_F16: Status.FAILED,  # fails again on rerun: real, new
        LOG_SOFTMAX: Status.CRASHED,  # passes on rerun: flaky
        SOFTMIN: Status.FAILED,  # failing on the baseline too: pre-existing
    }
    outcomes = [
        Outcome(o.id, fail.get(o.id, o.status), 0.1, "boom" if o.id in fail else "")
        for o in outcomes
    ]
    missed = p.holdout[0]
    outcomes.append(Outcome(missed, Status.FAILED, 0.3, "missed"))
    reruns = [
        Outcome(SOFTMAX_F16, Status.FAILED, 0.1),
        Outcome(LOG_SOFTMAX, Status.PASSED, 0.1),
        Outcome(SOFTMIN, Status.FAILED, 0.1),
    ]
    return p, history, outcomes, reruns, missed


def test_flaky_real_new_pre_existing_and_fixed(index: InventoryIndex) -> None:
    p, history, outcomes, reruns, missed = _recorded(index)
    assert to_rerun(outcomes) == tuple(sorted({SOFTMAX_F16, LOG_SOFTMAX, SOFTMIN, missed}))
    v = verify(p, outcomes, reruns, history, index)
    kinds = {f.id: (f.kind, f.novelty) for f in v.failures}
    assert kinds[SOFTMAX_F16] == ("real", "new")
    assert kinds[LOG_SOFTMAX][0] == "flaky"
    assert kinds[SOFTMIN] == ("real", "pre-existing")
    assert kinds[missed] == ("unconfirmed", "new")  # not rerun: counted, flagged
    assert set(v.new_failures) == {SOFTMAX_F16, missed}
    assert v.flaky == (LOG_SOFTMAX,)
    assert v.pre_existing == (SOFTMIN,)
    assert SPECIAL in p.selected_ids
    assert v.fixed == (SPECIAL,)  # failing on the baseline, passing now
    json.dumps(v.to_json())


def test_expansion_around_new_failures(index: InventoryIndex) -> None:
    p, history, outcomes, reruns, missed = _recorded(index)
    v = verify(p, outcomes, reruns, history, index)
    ran = {o.id for o in outcomes}
    assert v.expansion and not set(v.expansion) & ran
    # the missed holdout variant's subject, in every other dtype and template, comes first
    subject = missed.split("::")[2]
    first = [e for e in v.expansion if e.split("::")[2] == subject]
    assert v.expansion[: len(first)] == tuple(first)
    assert set(first) == {x for x in index.ids if x.split("::")[2] == subject and x not in ran}


def test_history_update_is_data_and_applies(index: InventoryIndex) -> None:
    p, history, outcomes, reruns, missed = _recorded(index)
    v = verify(p, outcomes, reruns, history, index)
    update = v.history_update
    assert update.mark_flaky == (LOG_SOFTMAX,)
    assert update.baseline[LOG_SOFTMAX] is Status.PASSED  # the rerun's verdict
    assert update.baseline[SOFTMAX_F16] is Status.FAILED
    assert set(update.co_failures) == {f.path for f in p.facts.paths}
    assert set(update.co_failures["aten/src/ATen/native/SoftMax.cpp"]) == {SOFTMAX_F16, missed}
    after = apply_update(history, update)
    entry = after.get(SOFTMAX_F16)
    assert entry is not None
    assert entry.recent[-2:] == (Status.FAILED, Status.FAILED)
    assert entry.baseline is Status.FAILED and entry.failing
    assert after.get(LOG_SOFTMAX).flaky  # type: ignore[union-attr]
    assert after.co_failures["test/test_nn.py"][missed] == 1
    assert after.known_variants == frozenset(index.ids)
    # and the next plan sees it: the new failure now runs as failing
    again = plan(example_change("push_docs_only"), index, after)
    assert again.decision == "none"
    unrelated = plan(example_change("dispatch_crcr_push"), index, after)
    assert SOFTMAX_F16 in unrelated.selected_ids
    assert History.from_json(json.loads(json.dumps(after.to_json()))) == after
    not_landed = verify(p, outcomes, reruns, history, index, on_baseline=False)
    assert not_landed.history_update.baseline == {}


def test_metrics_and_false_green(index: InventoryIndex) -> None:
    p, history, outcomes, reruns, missed = _recorded(index)
    m = verify(p, outcomes, reruns, history, index).metrics
    assert m.holdout_misses == (missed,)
    assert m.selected_new_failures == 1
    assert not m.false_green  # the selection itself went red
    # one stratum here (the selection took the whole softmax family): weight = 1 / rate
    assert [s.name for s in p.holdout_strata] == ["far"]
    assert m.miss_rate == pytest.approx(1 / len(p.holdout))
    unselected = m.eligible - m.selected
    assert m.estimated_missed == round(unselected / len(p.holdout), 3)
    # the bound: 1 of 30 drawn -> at most 16.7 % of the unselected, recall at least 1 / (1 + that)
    assert m.miss_rate_upper == round(wilson_upper(1, len(p.holdout)), 6)
    assert m.missed_upper == pytest.approx(unselected * wilson_upper(1, len(p.holdout)), abs=1e-3)
    assert m.recall_lower == round(1 / (1 + unselected * wilson_upper(1, 30)), 6)
    assert m.unselected_time_share == pytest.approx(p.totals.holdout_s / unselected, rel=1e-3)
    assert m.method == "wilson-stratified 95%"
    assert m.strata[0]["found"] == 1 and m.strata[0]["drawn"] == len(p.holdout)
    assert 0 < m.ratio_count < 0.2 and m.ratio_time > 0
    # without the selected new failure the run would have been green: a false green
    quiet = [o for o in outcomes if o.id != SOFTMAX_F16]
    m2 = verify(p, quiet, reruns, history, index).metrics
    assert m2.false_green
    runs = [m, m2, Metrics(10, 0, 100, 0.1, 0.1, 0, (), None, None, False)]
    assert false_green_rate(runs) == 0.5
    assert false_green_rate([]) is None


@pytest.mark.parametrize(
    ("found", "drawn", "upper"),
    [(0, 10, 0.2775), (0, 30, 0.1135), (1, 30, 0.1667), (5, 10, 0.7634), (10, 10, 1.0)],
)
def test_wilson_upper_known_values(found: int, drawn: int, upper: float) -> None:
    assert wilson_upper(found, drawn) == pytest.approx(upper, abs=1e-4)


def test_wilson_upper_without_draws_bounds_nothing() -> None:
    assert wilson_upper(0, 0) == 1.0


def test_a_stratum_drawn_whole_is_known_exactly() -> None:
    census = HoldoutStratum("near", 4, ("a", "b", "c", "d"))
    far = HoldoutStratum("far", 100, tuple(f"f{i}" for i in range(10)))
    b = holdout_bound((census, far), {"a", "f1"})
    assert b.strata[0]["miss_rate_upper"] == 0.25  # 1 of 4, no sampling error
    assert b.estimated_missed == 1 + 10  # Horvitz-Thompson: weight 1 and weight 10
    z = 1.959964  # two strata: each at 97.5 % one-sided
    assert b.missed_upper == pytest.approx(1 + 100 * wilson_upper(1, 10, z), rel=1e-4)
    assert b.recall_lower(5) == round(5 / (5 + b.missed_upper), 6)
    assert b.recall_lower(0) == 0.0


def _population(
    near: int, far: int, failing_near: int, failing_far: int
) -> tuple[list[str], frozenset[str], set[str]]:
    ids = [f"ops::compare_cpu::op{i}::float32" for i in range(near + far)]
    pick = random.Random(7)
    failing = set(pick.sample(ids[:near], failing_near)) | set(pick.sample(ids[near:], failing_far))
    return ids, frozenset(ids[:near]), failing


RATE = PlanConfig(holdout_rate=0.02)  # 2 % of the unselected, not bounded by time


@pytest.mark.parametrize(
    ("near", "far", "failing_near", "failing_far"),
    [(60, 400, 12, 4), (30, 447, 10, 257), (0, 477, 0, 267), (100, 1000, 5, 8)],
)
def test_weighted_estimate_is_unbiased_and_the_bound_covers(
    near: int, far: int, failing_near: int, failing_far: int
) -> None:
    ids, near_ids, failing = _population(near, far, failing_near, failing_far)
    seconds = dict.fromkeys(ids, 1.0)
    estimates, covered = [], 0
    draws = 1000
    for seed in range(draws):
        strata = draw_holdout(ids, near_ids, RATE, random.Random(seed), seconds, len(ids))
        bound = holdout_bound(strata, failing)
        estimates.append(bound.estimated_missed)
        covered += bound.missed_upper >= len(failing)
        assert bound.unselected == len(ids)
    mean = sum(estimates) / draws
    # the mean of 1,000 draws, within 2 of the truth (its standard error here is below 0.6)
    assert mean == pytest.approx(len(failing), abs=2.0)
    assert covered / draws >= 0.95


def test_an_old_plan_without_strata_is_judged_as_one_uniform_sample(index: InventoryIndex) -> None:
    p, history, outcomes, reruns, missed = _recorded(index)
    data = p.to_json()
    del data["holdout_strata"]
    old = Plan.from_json(data)
    assert old.holdout_strata == () and [s.name for s in old.strata] == ["all"]
    new_m = verify(p, outcomes, reruns, history, index).metrics
    old_m = verify(old, outcomes, reruns, history, index).metrics
    assert old_m.missed_upper == new_m.missed_upper  # one stratum either way here
    assert old_m.miss_rate == pytest.approx(new_m.miss_rate)
