"""The verdict on the change, spelled once: the strings the records have always held."""

from __future__ import annotations

import json

import pytest

from contracts.change import ChangeState
from contracts.tested import Tested as Verdict


def test_the_verdicts_are_the_strings_the_records_hold() -> None:
    assert [v.value for v in Verdict] == ["tested", "partial", "not_tested"]
    assert json.dumps({"tested": Verdict.NOT_TESTED}) == '{"tested": "not_tested"}'
    assert f"{Verdict.PARTIAL}" == "partial"
    assert [s.value for s in ChangeState] == ["applied", "partial", "not_applied", "none"]


@pytest.mark.parametrize(
    ("value", "verdict"),
    [("tested", Verdict.TESTED), ("partial", Verdict.PARTIAL), ("", None), (None, None)],
)
def test_a_json_value_reads_as_its_verdict(value: object, verdict: Verdict | None) -> None:
    assert Verdict.of(value) is verdict


def test_a_value_that_is_no_verdict_is_named() -> None:
    with pytest.raises(ValueError, match="not 'maybe'"):
        Verdict.of("maybe")


def test_each_verdict_has_its_headline() -> None:
    assert Verdict.TESTED.headline == "the change was tested"
    assert Verdict.PARTIAL.headline == "the change was tested in part"
    assert Verdict.NOT_TESTED.headline == "the change was NOT tested"
