"""Per-test rows in the shapes of HUD's `test_run_s3`, `test_run_summary`, `failed_test_runs`.

Upstream's tools/stats/upload_test_stats.py parses JUnit testcases, summarizes them per
(file, classname, job, invoking file), keeps failed/errored/rerun cases apart, and uploads
each collection as gzip JSON lines under `{collection}/{workflow_run_id}/{attempt}`. Same here,
from the testcases of `junit.attempt_cases` (one per variant, every attempt of it kept) or,
for a variant no testcase names, from its result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contracts.classification import Classification
from dashboard_export.junit import (
    RERUN_REPORT,
    RETRIED_PROPERTY,
    as_list,
    case_id,
    case_status,
    properties,
    retried_kinds,
)
from dashboard_export.model import RunRecord, VariantResult, datetime64
from suites.model import Status

COLLECTIONS = ("test_run", "test_run_summary", "failed_test_runs")
TABLES = {
    "test_run": "default.test_run_s3",
    "test_run_summary": "default.test_run_summary",
    "failed_test_runs": "default.failed_test_runs",
}
_DETAIL_TAGS = ("failure", "error", "skipped", "rerun")
_OUTPUT_TAGS = ("system-out", "system-err")
# The rerun entry of a flaky variant whose failing attempt left no testcase (no JUnit, or
# only the passing one): the record says it failed once, not how.
FLAKY_ATTEMPT = {
    "type": "flaky",
    "message": "failed, then passed on rerun (the failing attempt's output is not in the run)",
    "text": "",
}


def cases_from_results(record: RunRecord) -> list[dict[str, Any]]:
    """Testcase dicts, as JUnit would give them, for a run whose JUnit is not at hand."""
    return [_case_of(result) for result in record.results]


def run_rows(cases: Iterable[Mapping[str, Any]], record: RunRecord) -> list[dict[str, Any]]:
    """One `test_run_s3` row per testcase; the run's verified status wins over JUnit's. A
    variant Verify found flaky keeps its failing attempt: under `rerun` from its JUnit, or
    as `FLAKY_ATTEMPT` when no testcase of it was kept, `result.retried=rerun` either way."""
    status_of = {r.id: r.status for r in record.results}
    flaky = {r.id for r in record.results if r.classification is Classification.FLAKY}
    time_inserted = _inserted(record)
    job_id, workflow_id = _job_id(record), _workflow_id(record)
    rows = []
    for case in cases:
        vid = case_id(case)
        status = status_of.get(vid) or case_status(case)
        if status is Status.REMOVED:
            # HUD's statuses have no "removed": a variant the specs no longer have did not
            # run, which HUD calls skipped (as the CRCR counts do).
            status = Status.SKIPPED
        row: dict[str, Any] = {
            "classname": str(case.get("classname", "")),
            "duration": float(case.get("time", 0.0) or 0.0),
            "file": str(case.get("file", "")),
            "invoking_file": str(case.get("invoking_file", "")),
            "job_id": job_id,
            "line": int(case["line"]) if isinstance(case.get("line"), int) else 0,
            "name": str(case.get("name", "")),
            "properties": [{"name": k, "value": v} for k, v in properties(case).items()],
            "result": _result(case),
            "status": str(status),
            "time": float(case.get("time", 0.0) or 0.0),
            "time_inserted": time_inserted,
            "type_param": str(case.get("type_param", "")),
            "value_param": str(case.get("value_param", "")),
            "workflow_id": workflow_id,
            "workflow_run_attempt": record.attempt,
        }
        for tag in _DETAIL_TAGS:
            row[tag] = [_detail(d) for d in as_list(case.get(tag))]
        if vid in flaky and not retried_kinds(case):
            row["rerun"].append(dict(FLAKY_ATTEMPT))
            row["properties"].append({"name": RETRIED_PROPERTY, "value": RERUN_REPORT})
        for tag in _OUTPUT_TAGS:
            row[tag] = [{"text": str(d.get("text", ""))} for d in as_list(case.get(tag))]
        rows.append(row)
    return rows


def summary_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`test_run_summary`: counts per (file, classname, job, run, attempt, invoking file)."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = (
            row["file"],
            row["classname"],
            row["job_id"],
            row["workflow_id"],
            row["workflow_run_attempt"],
            row["invoking_file"],
        )
        group = groups.setdefault(
            key,
            {
                "classname": row["classname"],
                "errors": 0,
                "failures": 0,
                "file": row["file"],
                "invoking_file": row["invoking_file"],
                "job_id": row["job_id"],
                "skipped": 0,
                "successes": 0,
                "tests": 0,
                "time": 0.0,
                "workflow_id": row["workflow_id"],
                "workflow_run_attempt": row["workflow_run_attempt"],
            },
        )
        group["tests"] += 1
        # Same precedence as upstream: failure, then error, then skipped, else success.
        if row["failure"]:
            group["failures"] += 1
        elif row["error"]:
            group["errors"] += 1
        elif row["skipped"]:
            group["skipped"] += 1
        else:
            group["successes"] += 1
        group["time"] = round(group["time"] + row["time"], 6)
    return list(groups.values())


def failed_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`failed_test_runs`: the rows with a failure, an error or a rerun."""
    return [dict(r) for r in rows if r["failure"] or r["error"] or r["rerun"]]


def collections(
    cases: Iterable[Mapping[str, Any]], record: RunRecord
) -> dict[str, list[dict[str, Any]]]:
    """All three collections of one run, keyed by collection name."""
    rows = run_rows(cases, record)
    return {
        "test_run": rows,
        "test_run_summary": summary_rows(rows),
        "failed_test_runs": failed_rows(rows),
    }


def object_key(collection: str, record: RunRecord) -> str:
    """The upstream S3 key layout `{collection}/{workflow_run_id}/{attempt}`."""
    return f"{collection}/{record.run_id}/{record.attempt}"


def _case_of(result: VariantResult) -> dict[str, Any]:
    outcome = result.outcome
    case: dict[str, Any] = {
        "classname": f"{result.suite}::{result.template}",
        "name": outcome.id,
        "file": result.suite,
        "time": outcome.duration_s,
        "invoking_file": result.suite,
        "properties": {
            "property": [
                {"name": "variant_id", "value": outcome.id},
                {"name": "status", "value": str(outcome.status)},
            ]
        },
    }
    detail = {"message": outcome.message, "type": str(outcome.status)}
    if outcome.status is Status.ERROR:
        case["error"] = detail
    elif outcome.status.is_failure:
        case["failure"] = detail
    elif outcome.status is Status.XFAILED:
        case["skipped"] = {**detail, "type": "pytest.xfail"}
    elif outcome.status is Status.SKIPPED:
        case["skipped"] = {**detail, "type": "pytest.skip"}
    elif outcome.status is Status.REMOVED:  # not run: the specs no longer have it
        case["skipped"] = {**detail, "type": "spyre.removed"}
    return case


def _detail(child: Mapping[str, Any]) -> dict[str, str]:
    return {
        "type": str(child.get("type", "")),
        "message": str(child.get("message", "")),
        "text": str(child.get("text", "")),
    }


def _result(case: Mapping[str, Any]) -> str:
    for tag, name in (("failure", "failure"), ("error", "error"), ("skipped", "skipped")):
        if case.get(tag) is not None:
            return name
    return "success"


def _job_id(record: RunRecord) -> int | None:
    check = record.effective_check_run_id
    return int(check) if check.isdigit() else None


def _workflow_id(record: RunRecord) -> int | str:
    return int(record.run_id) if record.run_id.isdigit() else record.run_id


def _inserted(record: RunRecord) -> str:
    # The run's end, not "now": re-exporting a run must write byte-identical rows.
    return datetime64(record.completed_at or record.started_at)
