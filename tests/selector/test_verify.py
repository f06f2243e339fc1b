from __future__ import annotations

import json

from selector import (
    History,
    InventoryIndex,
    Metrics,
    VariantHistory,
    apply_update,
    false_green_rate,
    plan,
    to_rerun,
    verify,
)
from suites.model import Outcome, Status
from tests.selector.conftest import example_change

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
    assert m.miss_rate == 1 / len(p.holdout)
    unselected = m.eligible - m.selected
    assert m.estimated_missed == round(unselected / len(p.holdout), 3)
    assert 0 < m.ratio_count < 0.2 and m.ratio_time > 0
    # without the selected new failure the run would have been green: a false green
    quiet = [o for o in outcomes if o.id != SOFTMAX_F16]
    m2 = verify(p, quiet, reruns, history, index).metrics
    assert m2.false_green
    runs = [m, m2, Metrics(10, 0, 100, 0.1, 0.1, 0, (), None, None, False)]
    assert false_green_rate(runs) == 0.5
    assert false_green_rate([]) is None
