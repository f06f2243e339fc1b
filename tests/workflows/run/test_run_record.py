"""The run's record between steps: typed in the process, the same JSON where it leaves it.

`data/records/` holds what the version before the typed record wrote: History rows (a
completed run with its forensics, a planned one, a stopped one, and a row from before
`head_sha` was kept) and a run's planned.json. They load, and a row saved again is the row
it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts.backend import BackendId
from contracts.classification import Classification
from contracts.run_summary import (
    ForensicsNote,
    PlanFacts,
    RunResults,
    RunSummary,
)
from selector.plan_parts import Budget
from selector.verify import FailureVerdict
from suites.model import Status
from workflows.run import forensics
from workflows.run.run_model import Hub, PlannedRun, PlanNotes, TorchUnderTest
from workflows.stores.history import RunRecord, RunState, SQLiteHistory

RECORDS = Path(__file__).resolve().parents[1] / "data" / "records"


def _rows() -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = json.loads((RECORDS / "history_rows.json").read_text())
    return rows


@pytest.mark.parametrize("name", ["completed", "planned", "stopped", "before_head_sha"])
def test_a_history_row_of_the_previous_version_loads_and_saves_back_unchanged(
    name: str, tmp_path: Path
) -> None:
    row = _rows()[name]
    store = SQLiteHistory(tmp_path / "history.sqlite3")
    store.save_run(RunRecord.from_json(row))
    again = store.get_run(row["run_id"])
    assert again is not None
    assert {**again.to_json(), "updated_at": row["updated_at"]} == row  # saving moves it


def test_a_completed_row_reads_as_typed_parts() -> None:
    summary = RunRecord.from_json(_rows()["completed"]).summary
    # A row from before the backend and torch sha were kept: they stay missing on save.
    assert summary.plan == PlanFacts(
        "push diff:push_softmax_kernel.patch",
        "push",
        "",
        8,
        0,
        None,
        "/srv/spyre-ci/out1",
        missing=frozenset({"backend", "torch_sha", "tried"}),
    )
    assert summary.results is not None and summary.results.new_failures == 4
    assert summary.results.counts == {"failed": 4, "passed": 4}
    assert summary.under_test is not None and summary.under_test.tested == "not_tested"
    assert summary.forensics is not None and summary.forensics.triage == "backend"
    assert len(summary.forensics.failures) == 4 and not summary.forensics.windows()
    assert summary.stopped_because is None and not summary.extra


def test_a_row_from_before_head_sha_gives_the_sha_of_its_event_label() -> None:
    run = RunRecord.from_json(_rows()["before_head_sha"])
    point = forensics.point_of(run)
    assert (point.kind, point.head_sha) == ("push", "0123456789ab")
    # Keys it does not have read as their defaults, and are not written back: readiness
    # tells a row from before `new_timeouts` by its absence.
    assert run.summary.results is not None and run.summary.results.new_timeouts == 0
    assert "new_timeouts" not in run.to_json()["summary"]


def test_keys_this_version_does_not_know_are_kept() -> None:
    row = {**_rows()["planned"]["summary"], "from_a_newer_version": [1, 2]}
    assert RunSummary.from_json(row).to_json() == row


def test_a_finish_merges_into_the_planned_row_and_keeps_what_it_does_not_write() -> None:
    stopped = RunRecord.from_json(_rows()["stopped"]).summary
    assert stopped.plan is not None
    finished = RunSummary(stopped.plan, RunResults(ran=8, failed=1), finished_at=2.0)
    merged = stopped.merged(finished)
    assert merged.results == RunResults(ran=8, failed=1) and merged.finished_at == 2.0
    assert merged.stopped_because == "interrupted"  # `runs show` still says why it stopped
    assert merged.plan == stopped.plan


def test_a_bisect_answer_in_the_forensics_reads_as_one_line() -> None:
    written = {
        "triage": "upstream",
        "confidence": "high",
        "failures": [
            {"id": "a", "last_good_sha": "1" * 40, "first_bad_sha": "2" * 40},
            {"id": "b", "bisect": {"summary": "culprit 3333333", "confidence": "medium"}},
        ],
        "more": 0,
    }
    note = ForensicsNote.from_json(written)
    assert [w.id for w in note.windows()] == ["a"]
    assert note.windows()[0].last_good_sha == "1" * 40
    assert note.bisected("b") == "culprit 3333333 (medium confidence)"
    assert note.failures[1].bisect is not None
    assert note.failures[1].bisect.line == "culprit 3333333 (medium confidence)"
    assert note.bisected("a") is None
    assert note.to_json() == written  # each entry with only the keys it had
    assert ForensicsNote.from_json(note.to_json()) == note


def test_a_forensics_entry_with_no_window_is_not_bisected() -> None:
    note = ForensicsNote.from_json(
        {
            "triage": "unknown",
            "failures": [
                {"id": "same", "last_good_sha": "1" * 40, "first_bad_sha": "1" * 40},
                {"id": "never-passed", "last_good_sha": None, "first_bad_sha": "2" * 40},
                {"id": "no-answer", "bisect": {"summary": "", "confidence": "low"}},
            ],
        }
    )
    assert note.windows() == [] and [e.id for e in note.failures] == [
        "same",
        "never-passed",
        "no-answer",
    ]
    assert note.bisected("no-answer") is None


def test_planned_json_of_the_previous_version_loads_typed_and_writes_the_same() -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    planned = PlannedRun.from_json(data)
    assert planned.plan.decision == "targeted" and len(planned.plan.selected) == 8
    assert [s.ids for s in planned.plan.shards] == [tuple(ids) for ids in planned.shards]
    assert planned.notes.impact_map is not None
    assert planned.notes.impact_map.source == "shipped"
    assert planned.to_json() == data


def test_the_plans_budget_and_totals_read_as_records_and_write_the_same_text() -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    plan = PlannedRun.from_json(data).plan
    assert plan.budget == Budget("none", None, 8, applied=False)
    assert plan.totals.selected == 8 and plan.totals.unselected == 8
    # A sum of nothing was written as 0: it stays 0, not 0.0, in the text written back.
    assert json.dumps(plan.totals.to_json()) == json.dumps(data["plan"]["totals"])
    assert json.dumps(plan.budget.to_json()) == json.dumps(data["plan"]["budget"])
    assert plan.change.kind == "push" and not plan.change.missing


@pytest.mark.parametrize(
    "budget",
    [
        # a count budget from before the holdout counted in it
        {"kind": "count", "limit": 5, "used": 5, "applied": True, "mandatory": 0},
        {
            "kind": "count",
            "limit": 5,
            "used": 5,
            "applied": True,
            "mandatory": 1,
            "holdout_reserved": 0,
            "holdout": 1,
        },
        {"kind": "time", "limit": 10.0, "used": 9.5, "applied": True, "mandatory": 0},
        {
            "kind": "none",
            "limit": None,
            "used": 16,
            "applied": False,
            "not_applied": "a full run (everything runs) has no budget",
        },
    ],
)
def test_every_budget_a_plan_wrote_saves_back_unchanged(budget: dict[str, Any]) -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    data["plan"]["budget"] = budget
    data["plan"]["trial"] = {
        "watch": {"scored": 3, "would_add": 1, "would_add_sample": ["ops::a::b::float32"]}
    }
    planned = PlannedRun.from_json(data)
    assert planned.plan.trial["watch"].would_add == 1
    assert json.dumps(planned.to_json()) == json.dumps(data)


def test_a_change_digest_missing_keys_is_written_back_without_them() -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    del data["plan"]["change"]["files_with_source"]
    planned = PlannedRun.from_json(data)
    assert planned.plan.change.files_with_source == 0
    assert planned.to_json() == data


def test_the_environment_under_test_reads_typed_and_writes_the_same_text() -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    environment = PlannedRun.from_json(data).environment
    assert environment is not None
    assert environment.torch == TorchUnderTest(
        "2.13.0",
        "cf30153c4c131c8164ee7798e5022d810682e2cb",
        "installed (/work/main/.venv/lib/python3.11/site-packages)",
    )
    assert environment.tested == "not_tested" and environment.change.state == "not_applied"
    assert [f.path for f in environment.change.not_applied] == [
        "aten/src/ATen/native/SoftMax.cpp",
        "aten/src/ATen/native/cpu/SoftMaxKernel.cpp",
    ]
    assert environment.change.applied == () and environment.change.broken == ()
    assert environment.backend == BackendId("backend_under_test", "0.1.0", "spyre")
    assert json.dumps(environment.to_json()) == json.dumps(data["environment"])
    assert json.dumps(PlannedRun.from_json(data).to_json()) == json.dumps(data)


def test_a_run_planned_before_the_environment_was_recorded_keeps_it_empty() -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    data["environment"] = {}
    planned = PlannedRun.from_json(data)
    assert planned.environment is None
    assert planned.to_json() == data


def test_an_environment_missing_keys_or_with_unknown_ones_saves_back_unchanged() -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    env = data["environment"]
    del env["headline"], env["change"]["broken"]  # an older writer's
    env["from_a_newer_version"] = {"x": 1}
    env["change"]["also_newer"] = True
    env["backend"]["digest"] = "0123456789abcdef"
    env["change"]["applied"] = [
        {"path": "torch/nn/functional.py", "status": "modified", "why": "applied", "module": "m"}
    ]
    planned = PlannedRun.from_json(data)
    assert planned.environment is not None
    assert planned.environment.headline == "" and planned.environment.change.broken == ()
    assert planned.environment.change.applied[0].module == "m"
    assert json.dumps(planned.to_json()) == json.dumps(data)
    # A typed record travels as a Celery argument too: back from its own JSON, the same.
    again = PlannedRun.from_json(json.loads(json.dumps(planned.to_json())))
    assert again.environment == planned.environment


def test_hubs_travel_with_the_plan() -> None:
    data = json.loads((RECORDS / "planned.json").read_text())
    hubs = (
        Hub("impact_map: reaches 9 of 16 variants (a hub: 56 %)", 3, {"budget": 2}),
        Hub("impact_map: reaches 8 of 16 variants (a hub: 50 %)", 1),
    )
    data["plan"]["hubs"] = [h.to_json() for h in hubs]
    assert "left_out" not in data["plan"]["hubs"][1]
    planned = PlannedRun.from_json(data)
    assert planned.notes == PlanNotes(planned.notes.impact_map, hubs)
    assert planned.to_json() == data


@pytest.mark.parametrize(
    ("kind", "novelty", "expected"),
    [
        ("flaky", "new", Classification.FLAKY),
        ("real", "new", Classification.NEW),
        ("unconfirmed", "new", Classification.NEW),
        ("real", "pre-existing", Classification.PRE_EXISTING),
    ],
)
def test_one_classification_from_verify_to_run_json(
    kind: str, novelty: str, expected: Classification
) -> None:
    verdict = FailureVerdict("v", Status.FAILED, None, kind, novelty, None, False)
    assert verdict.classification is expected
    assert json.dumps(verdict.classification) == json.dumps(str(expected))


def test_a_run_state_row_keeps_its_state() -> None:
    run = RunRecord.from_json(_rows()["stopped"])
    assert run.state is RunState.STOPPED and run.summary.stopped_because == "interrupted"
