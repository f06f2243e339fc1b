"""Stage 4's A/B comparison over a real plan of the tiny suite: a failure is new only where
the other side passed it. On a scheduled run's reference torch (another version, with
expectations of its own) a variant expected to fail there (xfailed) failed there: the
build's failure is pre-existing, never a regression of the build."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from contracts.classification import Classification
from suites.model import Inventory, Outcome, Status
from tests.workflows.run.test_infra_faults import _request
from tests.workflows.run_context import run_context
from workflows.run import pipeline, verification
from workflows.stores.history import SQLiteHistory

POW = "tiny::compare_cpu::pow::float32"


@pytest.mark.parametrize(
    ("there", "judged"),
    [
        (Status.XFAILED, Classification.PRE_EXISTING),  # expected to fail on the reference
        (Status.FAILED, Classification.PRE_EXISTING),
        (Status.ERROR, Classification.PRE_EXISTING),
        (Status.PASSED, Classification.NEW),
        (Status.XPASSED, Classification.NEW),  # it passed there, against its expectation
    ],
)
def test_a_failure_is_new_only_where_the_other_side_passed_it(
    tiny_inventory: Path, tmp_path: Path, there: Status, judged: Classification
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    planned = pipeline.plan(
        _request(tiny_inventory, tmp_path / "out", "ab-1"), run_context(history)
    )
    ids = [v for s in planned.shards for v in s]
    first = {v: Outcome(v, Status.FAILED if v == POW else Status.PASSED, 0.1) for v in ids}

    def rerun(name: str, rerun_ids: Sequence[str]) -> list[Outcome]:
        return [Outcome(v, Status.FAILED, 0.1, "AssertionError") for v in rerun_ids]

    def on_reference(base_ids: Sequence[str]) -> dict[str, Outcome]:
        assert list(base_ids) == [POW]
        return {POW: Outcome(POW, there, 0.1)}

    verified, _ = verification.verify(
        planned, Inventory.load(tiny_inventory), first, rerun, on_reference, reference=True
    )
    assert verified.classification == {POW: judged}
    assert verification.failed_there(Outcome(POW, there, 0.1)) is (
        judged is Classification.PRE_EXISTING
    )
