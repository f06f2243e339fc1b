"""The `default.crcr_workflow_job` row, derived from a relay-to-HUD envelope as HUD derives it.

Every column of the reference table. The two columns HUD leaves empty today come from the
callback's optional `workflow.failed_tests` and `workflow.environment`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dashboard_export import ExportError
from dashboard_export.crcr import envelope_for, fit_body
from dashboard_export.model import RunRecord, datetime64

COLUMNS = (
    "dynamoKey", "status", "downstream_repo", "upstream_repo", "pr_number", "pytorch_head_sha",
    "delivery_id", "workflow_run_url", "workflow_name", "job_name", "check_run_id", "run_id",
    "run_attempt", "conclusion", "queue_time", "execution_time", "started_at", "completed_at",
    "total_tests", "passed_tests", "failed_tests", "skipped_tests", "failed_tests_json",
    "artifact_url", "environment", "downstream_repo_level", "event_type",
)


def dynamo_key(
    verified_repo: str, delivery_id: str, workflow_name: str, job_name: str, check_run_id: str
) -> str:
    """HUD's row key: `{verified_repo}/{delivery_id}/{workflow.name}/{job_name}/{check_run_id}`."""
    return f"{verified_repo}/{delivery_id}/{workflow_name}/{job_name}/{check_run_id}"


def workflow_job_row(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The row HUD stores for one envelope (ReplacingMergeTree: the latest per key wins)."""
    try:
        trusted = envelope["trusted"]
        callback = envelope["untrusted"]["callback_payload"]
        workflow = callback["workflow"]
        verified_repo = str(trusted["verified_repo"])
        delivery_id = str(callback["delivery_id"])
    except (KeyError, TypeError) as exc:
        raise ExportError(f"HUD envelope lacks {exc}; build it with crcr.hud_envelope") from None
    payload = callback.get("payload") or {}
    pull_request = payload.get("pull_request") or {}
    results = workflow.get("test_results") or {}
    metrics = trusted.get("ci_metrics") or {}
    check_run_id = str(workflow.get("check_run_id", ""))
    head_sha = (pull_request.get("head") or {}).get("sha") or payload.get("head_sha") or delivery_id
    return {
        "dynamoKey": dynamo_key(
            verified_repo, delivery_id, str(workflow.get("name", "")),
            str(workflow.get("job_name", "")), check_run_id,
        ),
        "status": str(workflow.get("status", "")),
        "downstream_repo": verified_repo,
        "upstream_repo": str((payload.get("repository") or {}).get("full_name")
                             or "pytorch/pytorch"),
        "pr_number": int(pull_request.get("number") or 0),
        "pytorch_head_sha": str(head_sha),
        "delivery_id": delivery_id,
        "workflow_run_url": str(workflow.get("url") or ""),
        "workflow_name": str(workflow.get("name", "")),
        "job_name": str(workflow.get("job_name", "")),
        "check_run_id": check_run_id,
        "run_id": str(workflow.get("run_id", "")),
        "run_attempt": int(workflow.get("run_attempt") or 1),
        "conclusion": str(workflow.get("conclusion") or ""),
        "queue_time": _seconds(metrics.get("queue_time")),
        "execution_time": _seconds(metrics.get("execution_time")),
        "started_at": datetime64(workflow.get("started_at")),
        "completed_at": datetime64(workflow.get("completed_at")),
        "total_tests": int(results.get("total", 0)),
        "passed_tests": int(results.get("passed", 0)),
        "failed_tests": int(results.get("failed", 0)),
        "skipped_tests": int(results.get("skipped", 0)),
        "failed_tests_json": _json(workflow.get("failed_tests") or []),
        "artifact_url": str(workflow.get("artifact_url") or ""),
        "environment": _json(workflow.get("environment") or {}),
        "downstream_repo_level": str(trusted.get("downstream_repo_level", "")),
        "event_type": str(callback.get("event_type") or "pull_request"),
    }


def row_for(record: RunRecord, status: str = "completed") -> dict[str, Any]:
    """The row of a run, from the same (size-capped) envelope the HUD publisher sends."""
    envelope, _omitted = fit_body(envelope_for(record, status))
    return workflow_job_row(envelope)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
