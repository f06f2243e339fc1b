"""The `default.crcr_workflow_job` row, derived from relay-to-HUD envelopes as HUD derives it.

HUD (pytorch/test-infra `torchci/lib/crcr/crcrUtils.ts`) turns each envelope into a record
(`extractDynamoRecord`: `??` defaults, the downstream's ISO timestamps, conclusion and counts
only on `completed`, `total` summed when absent, `run_attempt` falling back to 1) and writes
it with an UpdateItem that sets only the fields the record has: a `completed` callback never
clears what the `in_progress` one set (`started_at`, `queue_time`). The table's columns then
hold those values, or the column DEFAULT where the record has none. `hud_record` is that
extraction, `merge` the UpdateItem, `columns` the table. As the newest HUD does, a push's
`pr_number` comes from its `refs/tags/ciflow/trunk/<pr>` tag and its head from `after`;
`failed_tests_json` holds the first 50 entries of `workflow.failed_tests_detail` and
`triage_verdict_json` the relay-validated `workflow.triage_verdict`.

Where HUD has nothing, spyre-ci's additions fill a column: `environment` from
`workflow.environment`, and `failed_tests_json` from `workflow.failed_tests` for a callback
without `failed_tests_detail`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dashboard_export import ExportError
from dashboard_export.crcr import envelope_for, fit_body
from dashboard_export.model import RunRecord, datetime64

COLUMNS = (
    "dynamoKey",
    "status",
    "downstream_repo",
    "upstream_repo",
    "pr_number",
    "pytorch_head_sha",
    "delivery_id",
    "workflow_run_url",
    "workflow_name",
    "job_name",
    "check_run_id",
    "run_id",
    "run_attempt",
    "conclusion",
    "queue_time",
    "execution_time",
    "started_at",
    "completed_at",
    "total_tests",
    "passed_tests",
    "failed_tests",
    "skipped_tests",
    "failed_tests_json",
    "artifact_url",
    "environment",
    "downstream_repo_level",
    "event_type",
    "triage_verdict_json",
)
# Our column, not HUD's: derived from a field HUD does not read.
EXTRA_COLUMNS = ("environment",)
DETAIL_ENTRIES = 50  # HUD's caps on failed_tests_detail
DETAIL_MESSAGE_LIMIT = 500
_CIFLOW_TRUNK_REF = re.compile(r"/ciflow/trunk/(\d+)$")
# The table's DEFAULTs (clickhouse_db_schema/default.crcr_workflow_job/schema.sql); a String
# without one holds '', a DateTime64 the epoch, a Nullable NULL.
_DEFAULTS: dict[str, Any] = {
    "conclusion": "",
    "queue_time": None,
    "execution_time": None,
    "started_at": None,
    "completed_at": None,
    "total_tests": 0,
    "passed_tests": 0,
    "failed_tests": 0,
    "skipped_tests": 0,
    "failed_tests_json": "",
    "artifact_url": "",
    "environment": "",
    "downstream_repo_level": "",
    "event_type": "pull_request",
    "triage_verdict_json": "",
}


def dynamo_key(
    verified_repo: str, delivery_id: str, workflow_name: str, job_name: str, check_run_id: str
) -> str:
    """HUD's row key: `{verified_repo}/{delivery_id}/{workflow.name}/{job_name}/{check_run_id}`."""
    return f"{verified_repo}/{delivery_id}/{workflow_name}/{job_name}/{check_run_id}"


def hud_record(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """What HUD's `extractDynamoRecord` makes of one envelope (absent keys stay absent).

    Raises ExportError where HUD answers 400 (no `job_name`, no `check_run_id`) or fails.
    """
    try:
        trusted = envelope["trusted"]
        callback = envelope["untrusted"]["callback_payload"]
        workflow = callback["workflow"]
    except (KeyError, TypeError) as exc:
        raise ExportError(f"HUD envelope lacks {exc}; build it with crcr.hud_envelope") from None
    payload = _get(callback, "payload")
    pr_number, head_sha = pr_context(payload)
    if not workflow.get("job_name"):
        raise ExportError("HUD refuses the envelope: missing required field workflow.job_name")
    if workflow.get("check_run_id") is None:
        raise ExportError("HUD refuses the envelope: missing required field workflow.check_run_id")
    job_name = workflow["job_name"]
    check_run_id = _js_string(workflow["check_run_id"])
    record: dict[str, Any] = {
        "dynamoKey": dynamo_key(
            _js_string(trusted.get("verified_repo")),
            _js_string(callback.get("delivery_id")),
            _js_string(workflow.get("name")),
            _js_string(job_name),
            check_run_id,
        ),
        "status": workflow.get("status"),
        "downstream_repo": trusted.get("verified_repo"),
        "upstream_repo": _coalesce(
            _get(_get(payload, "repository"), "full_name"), "pytorch/pytorch"
        ),
        "pr_number": pr_number,
        "pytorch_head_sha": head_sha
        or _get(payload, "head_sha")
        or callback.get("delivery_id")
        or "",
        "delivery_id": callback.get("delivery_id"),
        "workflow_run_url": _coalesce(workflow.get("url"), ""),
        "workflow_name": workflow.get("name"),
        "job_name": job_name,
        "check_run_id": check_run_id,
        "run_id": _coalesce(workflow.get("run_id"), ""),
        "run_attempt": _js_number(_coalesce(workflow.get("run_attempt"), 1)) or 1,
    }
    if trusted.get("downstream_repo_level"):
        record["downstream_repo_level"] = trusted["downstream_repo_level"]
    if callback.get("event_type"):
        record["event_type"] = callback["event_type"]
    metrics = trusted.get("ci_metrics") or {}
    for name in ("queue_time", "execution_time"):
        if metrics.get(name) is not None:
            record[name] = metrics[name]
    if workflow.get("started_at"):
        record["started_at"] = workflow["started_at"]
    if workflow.get("artifact_url"):
        record["artifact_url"] = workflow["artifact_url"]
    if workflow.get("status") == "completed":
        if workflow.get("conclusion") is not None:
            record["conclusion"] = workflow["conclusion"]
        if workflow.get("completed_at"):
            record["completed_at"] = workflow["completed_at"]
        results = workflow.get("test_results")
        if results:
            counts = {k: results.get(k) for k in ("passed", "failed", "skipped")}
            for name, value in counts.items():
                if _is_number(value):
                    record[f"{name}_tests"] = value
            total = results.get("total")
            record["total_tests"] = (
                total if _is_number(total) else sum(v for v in counts.values() if _is_number(v))
            )
        detail = workflow.get("failed_tests_detail")
        if isinstance(detail, list):
            record["failed_tests_json"] = _json([_detail(t) for t in detail[:DETAIL_ENTRIES]])
        if workflow.get("triage_verdict") is not None:
            record["triage_verdict_json"] = _json(workflow["triage_verdict"])
    # spyre-ci's additions, where HUD's extraction has nothing.
    if "failed_tests_json" not in record and workflow.get("failed_tests") is not None:
        record["failed_tests_json"] = _json(workflow["failed_tests"])
    if workflow.get("environment") is not None:
        record["environment"] = _json(workflow["environment"])
    return record


def merge(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """HUD's UpdateItem, applied in order: each record sets only the fields it has."""
    item: dict[str, Any] = {}
    for record in records:
        item.update({k: v for k, v in record.items() if v is not None})
    return item


def columns(item: Mapping[str, Any]) -> dict[str, Any]:
    """The table row of a stored item: typed columns, DEFAULTs where the item has no value."""
    row = {name: item.get(name, _DEFAULTS.get(name)) for name in COLUMNS}
    for name in (
        "dynamoKey",
        "status",
        "downstream_repo",
        "upstream_repo",
        "pytorch_head_sha",
        "delivery_id",
        "workflow_run_url",
        "workflow_name",
        "job_name",
        "check_run_id",
        "run_id",
        "conclusion",
        "artifact_url",
        "downstream_repo_level",
        "event_type",
        "failed_tests_json",
        "environment",
        "triage_verdict_json",
    ):
        row[name] = _js_string(row[name])
    for name in (
        "pr_number",
        "run_attempt",
        "total_tests",
        "passed_tests",
        "failed_tests",
        "skipped_tests",
    ):
        row[name] = int(row[name])
    for name in ("queue_time", "execution_time"):
        row[name] = None if row[name] is None else float(row[name])
    for name in ("started_at", "completed_at"):
        row[name] = datetime64(row[name])
    return row


def workflow_job_row(*envelopes: Mapping[str, Any]) -> dict[str, Any]:
    """The row HUD holds after these envelopes of one job, sent in this order."""
    if not envelopes:
        raise ExportError("workflow_job_row needs at least one HUD envelope")
    return columns(merge(hud_record(e) for e in envelopes))


def row_for(record: RunRecord, status: str = "completed") -> dict[str, Any]:
    """The row of a run after its callbacks (in_progress, then completed), from the same
    size-capped envelopes the HUD publisher sends."""
    statuses = ("in_progress",) if status == "in_progress" else ("in_progress", "completed")
    return workflow_job_row(*(fit_body(envelope_for(record, s))[0] for s in statuses))


def pr_context(payload: Any) -> tuple[int, str]:
    """HUD's `extractPrContext`: (pr number, head sha) of a pull request; of a push, its
    `after` and the PR of a `ciflow/trunk/<pr>` ref (0 otherwise); else (0, "")."""
    pr = _get(payload, "pull_request")
    number, head = _get(pr, "number"), _get(_get(pr, "head"), "sha")
    if number and head:
        return int(_js_number(number)), str(head)
    after = _get(payload, "after")
    if after:
        found = _CIFLOW_TRUNK_REF.search(str(_get(payload, "ref") or ""))
        return (int(found.group(1)) if found else 0), str(after)
    return 0, ""


def _detail(test: Any) -> dict[str, Any]:
    """One `failed_tests_detail` entry as HUD stores it."""
    entry: dict[str, Any] = {"name": _js_string(_get(test, "name"))}
    if _get(test, "classname"):
        entry["classname"] = _js_string(test["classname"])
    if _get(test, "message"):
        entry["message"] = _js_string(test["message"])[:DETAIL_MESSAGE_LIMIT]
    if _get(test, "duration") is not None:
        duration = _js_float(test["duration"])
        entry["duration"] = duration
    return entry


def _js_float(value: Any) -> float | None:
    """`Number(value)` where JSON keeps it: NaN becomes null."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _get(value: Any, key: str) -> Any:
    """JavaScript's `value?.key`."""
    return value.get(key) if isinstance(value, Mapping) else None


def _coalesce(*values: Any) -> Any:
    """JavaScript's `a ?? b ?? ...`: the first that is not null/undefined."""
    for value in values:
        if value is not None:
            return value
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _js_number(value: Any) -> int:
    """`Number(value)` as a UInt32 column takes it: NaN and junk are 0."""
    if isinstance(value, bool):
        return int(value)
    if _is_number(value):
        return int(value) if math.isfinite(value) else 0
    try:
        number = float(str(value).strip() or "0")
    except ValueError:
        return 0
    return int(number) if math.isfinite(number) else 0


def _js_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
