from __future__ import annotations

from pathlib import Path

import pytest

from suites.model import (
    Expectation,
    Inventory,
    Outcome,
    Status,
    Variant,
    count_statuses,
    split_variant_id,
    variant_id,
)


def test_variant_id_round_trip_with_class_method_subject() -> None:
    vid = variant_id("upstream", "file", "TestFoo::test_bar", "float32")
    assert vid == "upstream::file::TestFoo::test_bar::float32"
    assert split_variant_id(vid) == ("upstream", "file", "TestFoo::test_bar", "float32")
    with pytest.raises(ValueError, match="not a variant id"):
        split_variant_id("a::b")


@pytest.mark.parametrize("name", ["inv.json", "inv.json.gz"])
def test_inventory_save_load(tmp_path: Path, name: str) -> None:
    variant = Variant(
        id=variant_id("ops", "compare_cpu", "add", "float16"),
        suite="ops",
        template="compare_cpu",
        subject="add",
        dtype="float16",
        expectation=Expectation.XFAIL,
        reason="fp16 rounding",
        rule="ops.yaml:12",
        fingerprint="abc",
        family="add",
        owners=("@team",),
        watch=("aten/**",),
        timeout_s=30.0,
    )
    inventory = Inventory("2.13.0", "deadbeef", (variant,), api_surface={"aten::add.Tensor": "s"})
    inventory.save(tmp_path / name)
    assert Inventory.load(tmp_path / name) == inventory


def test_inventory_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="rebuild it"):
        Inventory.from_json({"format": 99})


def test_status_failure_and_counts() -> None:
    outcomes = [Outcome("a", Status.PASSED), Outcome("b", Status.CRASHED, 1.0, "SIGSEGV")]
    assert [o.status.is_failure for o in outcomes] == [False, True]
    counts = count_statuses(outcomes)
    assert counts["passed"] == 1 and counts["crashed"] == 1 and counts["timeout"] == 0
    assert Outcome.from_json(outcomes[1].to_json()) == outcomes[1]
