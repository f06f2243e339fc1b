"""The default holdout costs at most a share of the selection's estimated time (at least its
floor), a share given explicitly is the rule before the bound, and a time-bounded draw is
still a uniform sample per stratum: Verify's Horvitz-Thompson weights stay unbiased."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from selector import History, InventoryIndex, PlanConfig, SelectorError, VariantHistory, plan
from selector.holdout import draw_holdout
from selector.plan import Plan
from selector.verify import holdout_bound
from suites.model import Inventory
from tests.testing.changes import example_change
from tests.testing.paths import EVENTS
from workflows.cli.main import main

NEAR = [f"near{i:03}" for i in range(200)]
FAR = [f"far{i:04}" for i in range(1000)]


def _population() -> tuple[list[str], dict[str, float]]:
    seconds = {**dict.fromkeys(NEAR, 2.0), **dict.fromkeys(FAR, 0.5)}
    return [*NEAR, *FAR], seconds


def _draw(config: PlanConfig, selected_s: float, seed: int = 0) -> dict[str, int]:
    ids, seconds = _population()
    strata = draw_holdout(
        ids, NEAR, config, random.Random(seed), seconds, sum(seconds.values()), None, selected_s
    )
    return {s.name: s.drawn for s in strata}


def test_the_draw_count_is_the_most_whose_expected_seconds_fit_the_allowance() -> None:
    # A quarter of 80 s: 20 s. Near variants take 2 s, far ones 0.5 s, a near one drawn four
    # times as often: 7 near + 9 far expect 18.5 s; one draw more (8 + 9) would expect 20.5 s.
    assert _draw(PlanConfig(), 80.0) == {"near": 7, "far": 9}
    # The count depends on the strata only: every seed draws as many.
    assert all(_draw(PlanConfig(), 80.0, seed) == {"near": 7, "far": 9} for seed in range(5))


def test_a_tiny_selection_still_gets_the_floor() -> None:
    assert _draw(PlanConfig(), 0.0) == {"near": 5, "far": 5}
    assert sum(_draw(PlanConfig(holdout_floor=24), 0.0).values()) == 24


def test_a_share_given_explicitly_is_the_rule_before_the_bound() -> None:
    # 2 % of 1,200 is 24, less than the minimum of 30: 30, split 13 near, 17 far.
    assert _draw(PlanConfig(holdout_rate=0.02), 0.0) == {"near": 13, "far": 17}
    # The bound never draws more than the rate would.
    assert _draw(PlanConfig(), 10_000.0) == {"near": 13, "far": 17}


def test_a_time_bounded_draw_prefers_no_fast_variant_and_its_estimate_is_unbiased() -> None:
    """400 variants, half of them 10 s and half 0.1 s; the 40 new failures are all slow ones
    (the worst case for a draw that leaned to cheap variants). Over 500 seeds the slow half
    is drawn as often as the fast half, and Verify's weighted estimate finds the 40."""
    slow = [f"slow{i:03}" for i in range(200)]
    fast = [f"fast{i:03}" for i in range(200)]
    ids = [*slow, *fast]
    seconds = {**dict.fromkeys(slow, 10.0), **dict.fromkeys(fast, 0.1)}
    failing = set(slow[:40])
    drawn = {"slow": 0, "fast": 0}
    estimates, covered = [], 0
    draws = 500
    for seed in range(draws):
        # 0.25 x 410 s = 102.5 s: 20 draws at the 5.05 s mean (21 would expect 106 s)
        strata = draw_holdout(
            ids, (), PlanConfig(), random.Random(seed), seconds, sum(seconds.values()), None, 410
        )
        (stratum,) = strata
        assert stratum.drawn == 20 and stratum.weight == 20.0
        drawn["slow"] += sum(1 for v in stratum.ids if seconds[v] == 10.0)
        drawn["fast"] += sum(1 for v in stratum.ids if seconds[v] == 0.1)
        bound = holdout_bound(strata, failing)
        estimates.append(bound.estimated_missed)
        covered += bound.missed_upper >= len(failing)
    # 10,000 draws in all: each half 5,000 expected, a standard deviation of about 50
    assert abs(drawn["slow"] - drawn["fast"]) < 400
    # the mean of 500 estimates within 4 of 40 (their standard error is about 1.2)
    assert sum(estimates) / draws == pytest.approx(len(failing), abs=4.0)
    assert covered / draws >= 0.95


def _timed(index: InventoryIndex, seconds: float = 0.5) -> History:
    return History(variants={v: VariantHistory(mean_duration_s=seconds) for v in index.ids})


def test_the_plan_records_how_its_holdout_was_sized(index: InventoryIndex) -> None:
    change = example_change("dispatch_crcr_push")
    history = _timed(index)
    bounded = plan(change, index, history)
    unbounded = plan(change, index, history, PlanConfig(holdout_rate=0.02))
    rule = bounded.holdout_rule
    assert rule is not None and rule.time_share == 0.25
    assert rule.allowance_s == pytest.approx(0.25 * bounded.totals.selected_s)
    assert len(bounded.holdout) == 10 < len(unbounded.holdout)  # the floor: a small selection
    assert rule.expected_s == pytest.approx(bounded.totals.holdout_s)  # equal durations here
    assert unbounded.holdout_rule is not None and unbounded.holdout_rule.time_share is None
    pool = bounded.totals.eligible - bounded.totals.selected
    assert len(unbounded.holdout) == max(30, round(0.02 * pool))
    # With the whole of the selection's time allowed and every variant as long: as many.
    wide = plan(change, index, history, PlanConfig(holdout_time_share=1.0))
    assert len(wide.holdout) == len(wide.selected) < len(unbounded.holdout)


def test_the_rule_round_trips_and_an_older_plan_loads_without_it(index: InventoryIndex) -> None:
    p = plan(example_change("dispatch_crcr_push"), index, _timed(index))
    data = json.loads(json.dumps(p.to_json()))
    assert data["holdout_rule"]["floor"] == 10 and data["holdout_rule"]["time_share"] == 0.25
    assert Plan.from_json(data).holdout_rule == p.holdout_rule
    del data["holdout_rule"]
    assert Plan.from_json(data).holdout_rule is None
    none = plan(example_change("push_docs_only"), index)
    assert none.holdout == () and "holdout_rule" not in none.to_json()


def test_a_negative_time_share_is_refused() -> None:
    with pytest.raises(SelectorError, match="holdout_time_share"):
        PlanConfig(holdout_time_share=-1.0)


def test_select_draws_the_bounded_holdout_unless_a_share_is_given(
    tmp_path: Path, inventory: Inventory, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory_file = tmp_path / "inventory.json.gz"
    inventory.save(inventory_file)
    history = tmp_path / "history.json"
    history.write_text(json.dumps(_timed(InventoryIndex.build(inventory)).to_json()))
    sizes = {}
    for name, extra in (("default", []), ("given", ["--holdout", "0.02"])):
        out = tmp_path / f"{name}.json"
        argv = ["select", "--event", str(EVENTS / "dispatch_crcr_push.json")]
        argv += ["--inventory", str(inventory_file), "--history", str(history)]
        assert main([*argv, "--no-trace", "--plan-out", str(out), *extra]) == 0
        data = json.loads(out.read_text())
        sizes[name] = (len(data["holdout"]), data["holdout_rule"]["time_share"])
    capsys.readouterr()
    assert sizes["default"] == (10, 0.25)
    assert sizes["given"][0] > 10 and sizes["given"][1] is None
