from __future__ import annotations

import dataclasses
import json

import pytest

from dashboard_export import ExportError
from dashboard_export.crcr import (
    HUD_BODY_LIMIT,
    callback_body,
    encode,
    envelope_for,
    fit_body,
)
from dashboard_export.hud_row import COLUMNS, dynamo_key, row_for, workflow_job_row
from dashboard_export.model import RunRecord, VariantResult
from dashboard_export.validation import errors, validate
from suites.model import Outcome, Status

SCHEMA_COLUMNS = set(COLUMNS)


@pytest.mark.parametrize("status", ["in_progress", "completed"])
def test_callback_and_envelope_validate(record: RunRecord, status: str) -> None:
    body = callback_body(record, status)
    validate("callback", body)
    validate("hud_envelope", envelope_for(record, status))
    workflow = body["workflow"]
    assert workflow["schema_version"] == "1" and workflow["status"] == status
    # Beyond what the contract requires, our callbacks always carry these.
    assert {"event_type", "delivery_id", "payload"} <= set(body)
    assert {"conclusion", "url", "run_attempt", "started_at", "completed_at", "environment"} <= set(
        workflow
    )
    assert body["delivery_id"] == record.event.delivery_id
    assert body["payload"]["pull_request"]["number"] == 4242
    if status == "in_progress":
        assert workflow["conclusion"] is None and workflow["completed_at"] is None
        assert "test_results" not in workflow


def test_completed_callback_counts_and_failed_tests(record: RunRecord) -> None:
    workflow = callback_body(record)["workflow"]
    # 9 variants: 3 passed (one an xpass), 4 failed (failed x2, error, crashed),
    # 2 skipped (a skip and an xfail).
    assert workflow["test_results"] == {"passed": 3, "failed": 4, "skipped": 2, "total": 9}
    assert workflow["conclusion"] == "failure"
    # As the callback action sends it: started_at on in_progress only (HUD keeps it).
    assert workflow["started_at"] is None
    assert callback_body(record, "in_progress")["workflow"]["started_at"] == "2026-11-29T14:00:05Z"
    assert workflow["completed_at"] == "2026-11-29T14:07:35Z"
    failed = {f["id"]: f for f in workflow["failed_tests"]}
    assert set(failed) == {r.id for r in record.failures}
    assert failed["sample::module::Linear::float32"]["classification"] == "pre-existing"
    assert failed["sample::binary_ufunc::mul::float32"]["classification"] == "new"
    assert failed["sample::binary_ufunc::div::float32"]["duration_s"] == 12.5
    assert "mul gave 4" in failed["sample::binary_ufunc::mul::float32"]["message"]
    # New failures come first: they are what survives truncation.
    assert workflow["failed_tests"][-1]["classification"] == "pre-existing"


def test_envelope_trusted_metrics(record: RunRecord) -> None:
    trusted = envelope_for(record)["trusted"]
    assert trusted == {
        "verified_repo": "torch-spyre/torch-spyre",
        "downstream_repo_level": "L2",
        "ci_metrics": {"queue_time": 15.0, "execution_time": 450.25},
    }
    assert envelope_for(record, "in_progress")["trusted"]["ci_metrics"]["execution_time"] is None


def test_workflow_job_row_has_every_column_as_hud_computes_it(record: RunRecord) -> None:
    row = row_for(record)
    validate("crcr_workflow_job", row)
    assert set(row) == SCHEMA_COLUMNS and len(COLUMNS) == 28
    assert row["dynamoKey"] == (
        "torch-spyre/torch-spyre/7f6e3a10-1c2d-11f1-8e9a-0242ac120002/spyre-ci/"
        "variants (shard 1/1)/55501"
    )
    assert row["dynamoKey"] == dynamo_key(
        "torch-spyre/torch-spyre", record.event.delivery_id, "spyre-ci", record.job, "55501"
    )
    assert row["pr_number"] == 4242 and row["pytorch_head_sha"] == "b" * 40
    assert row["upstream_repo"] == "pytorch/pytorch"
    assert row["run_attempt"] == 2 and row["run_id"] == "9876543210"
    assert row["started_at"] == "2026-11-29 14:00:05.000000000"
    assert (row["total_tests"], row["passed_tests"], row["failed_tests"], row["skipped_tests"]) == (
        9,
        3,
        4,
        2,
    )
    environment = json.loads(row["environment"])
    assert environment["torch_version"] == "2.13.0"
    assert environment["torch_git_version"] == "0123456789abcdef0123"
    assert environment["backend"] == "spyre-emulator"
    assert environment["device"] == "spyre-emulated:0"
    assert environment["sdk"] == "spyre-emulator 0.3.1"
    failed = json.loads(row["failed_tests_json"])  # the action's failed_tests_detail
    assert {f["name"] for f in failed} == {r.id for r in record.failures}
    assert all(set(f) <= {"name", "classname", "message", "duration"} for f in failed)
    assert json.loads(row["triage_verdict_json"])["category"]


def test_head_sha_falls_back_as_hud_does(record: RunRecord) -> None:
    envelope = envelope_for(record)
    callback = envelope["untrusted"]["callback_payload"]
    callback["payload"] = {"head_sha": "c" * 40}
    assert workflow_job_row(envelope)["pytorch_head_sha"] == "c" * 40
    callback["payload"] = {}
    row = workflow_job_row(envelope)
    assert row["pytorch_head_sha"] == record.event.delivery_id
    assert row["pr_number"] == 0 and row["upstream_repo"] == "pytorch/pytorch"


def test_schemas_reject_what_hud_or_the_relay_would(record: RunRecord) -> None:
    body = callback_body(record)
    del body["workflow"]["job_name"]
    assert any("job_name" in e for e in errors("callback", body))
    for field, bad in (
        ("status", "done"),
        ("run_attempt", "0"),
        ("started_at", "today"),
        ("test_results", {"passed": -1, "failed": 0, "skipped": 0, "total": 0}),
        ("failed_tests", [{"id": "x", "classification": "maybe"}]),
    ):
        body = callback_body(record)
        body["workflow"][field] = bad
        assert any(field in e for e in errors("callback", body)), field
    row = row_for(record)
    row["failed_tests_json"] = json.dumps([{"id": "x", "classification": "maybe"}])
    assert any("failed_tests_json" in e for e in errors("crcr_workflow_job", row))
    row = row_for(record)
    row["run_attempt"] = 0
    with pytest.raises(ExportError, match="invalid crcr_workflow_job"):
        validate("crcr_workflow_job", row)


def _many_failures(record: RunRecord, count: int, message_size: int) -> RunRecord:
    extra = tuple(
        VariantResult.of(
            Outcome(f"big::tmpl::op{i}::float32", Status.FAILED, 0.5, "x" * message_size), "new"
        )
        for i in range(count)
    )
    return dataclasses.replace(record, results=record.results + extra)


def test_body_over_2mb_is_truncated_with_marker(record: RunRecord) -> None:
    big = _many_failures(record, 800, 3900)  # ~3.3 MB of failure messages
    envelope = envelope_for(big)
    assert len(encode(envelope)) > HUD_BODY_LIMIT
    fitted, omitted = fit_body(envelope)
    assert 0 < omitted < 800 and len(encode(fitted)) <= HUD_BODY_LIMIT
    validate("hud_envelope", fitted)
    failed = fitted["untrusted"]["callback_payload"]["workflow"]["failed_tests"]
    assert failed[-1] == {"truncated": True, "omitted": omitted, "total": len(big.failures)}
    # Counts still tell the whole truth.
    tests = fitted["untrusted"]["callback_payload"]["workflow"]["test_results"]
    assert tests["failed"] == len(big.failures)
    row = workflow_job_row(fitted)
    validate("crcr_workflow_job", row)
    assert len(json.loads(row["failed_tests_json"])) == 50  # HUD keeps 50 details
    # Small bodies pass through untouched.
    assert fit_body(envelope_for(record)) == (envelope_for(record), 0)


def test_body_that_cannot_fit_is_refused(record: RunRecord) -> None:
    event = dataclasses.replace(record.event, payload={"blob": "y" * (HUD_BODY_LIMIT + 10)})
    with pytest.raises(ExportError, match="even without failed tests"):
        fit_body(envelope_for(dataclasses.replace(record, event=event)))


def test_long_messages_are_cut_in_failed_tests(record: RunRecord) -> None:
    big = _many_failures(record, 1, 10_000)
    entry = next(
        f for f in callback_body(big)["workflow"]["failed_tests"] if f["id"].startswith("big::")
    )
    assert entry["message"].endswith("[6000 more characters truncated]")


def test_callback_carries_the_ci_run_and_links_a_person_can_open(record: RunRecord) -> None:
    env = {
        "GITHUB_RUN_ID": "17001234567",
        "GITHUB_REPOSITORY": "torch-spyre/torch-spyre",
        "GITHUB_SERVER_URL": "https://github.com",
        "SPYRE_CI_RUNS_URL": "https://ci.example/runs/",
    }
    fields = RunRecord.ci_fields("push-a04374e4-1", env)
    assert fields == {
        "ci_run_id": "17001234567",
        "run_url": "https://github.com/torch-spyre/torch-spyre/actions/runs/17001234567",
        "artifact_url": "https://ci.example/runs/push-a04374e4-1",
    }
    ours = dataclasses.replace(record, run_id="push-a04374e4-1", check_run_id="", **fields)
    workflow = callback_body(ours)["workflow"]
    assert workflow["run_id"] == "17001234567" and int(workflow["run_id"])  # the relay's int()
    assert workflow["spyre_run_id"] == "push-a04374e4-1"
    assert workflow["run_attempt"] == "2" and workflow["check_run_id"] == "17001234567-2"
    assert workflow["url"] == fields["run_url"]
    assert workflow["artifact_url"] == "https://ci.example/runs/push-a04374e4-1"
    buildkite = RunRecord.ci_fields(
        "r",
        {
            "BUILDKITE_BUILD_ID": "0190a8e1-8d5c",
            "BUILDKITE_BUILD_URL": "https://buildkite.com/o/p/b/7",
        },
    )
    assert buildkite == {"ci_run_id": "0190a8e1-8d5c", "run_url": "https://buildkite.com/o/p/b/7"}
    # Without a CI run link, HUD's link is the run's page.
    page = callback_body(dataclasses.replace(ours, run_url=""))["workflow"]
    assert page["url"] == "https://ci.example/runs/push-a04374e4-1"


def test_push_rows_read_the_pr_as_hud_does(record: RunRecord) -> None:
    envelope = envelope_for(record)
    callback = envelope["untrusted"]["callback_payload"]
    callback["payload"] = {"ref": "refs/tags/ciflow/trunk/4242", "after": "d" * 40}
    row = workflow_job_row(envelope)
    assert (row["pr_number"], row["pytorch_head_sha"]) == (4242, "d" * 40)
    callback["payload"] = {"ref": "refs/heads/main", "after": "e" * 40}
    row = workflow_job_row(envelope)
    assert (row["pr_number"], row["pytorch_head_sha"]) == (0, "e" * 40)


def test_details_from_other_downstreams_are_stored_as_hud_stores_them(record: RunRecord) -> None:
    envelope = envelope_for(record)
    workflow = envelope["untrusted"]["callback_payload"]["workflow"]
    workflow["failed_tests_detail"] = [
        {"name": "test_a", "classname": "T", "message": "m" * 600, "duration": "2.5", "x": 1},
        {"name": None, "duration": "junk"},
    ]
    assert errors("hud_envelope", envelope) == []
    row = workflow_job_row(envelope)
    assert json.loads(row["failed_tests_json"]) == [
        {"name": "test_a", "classname": "T", "message": "m" * 500, "duration": 2.5},
        {"name": "", "duration": None},
    ]
    validate("crcr_workflow_job", row)
