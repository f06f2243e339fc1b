"""The CRCR callback body (schema_version "1") and the relay-to-HUD envelope: pure builders.

A completed callback carries, as the reference callback action sends them,
`failed_tests_detail` (`[{name, classname, message, duration}]`, what HUD keeps in
`failed_tests_json`) and, for a failed run, `triage_verdict` (`triage.run_verdict`; for an
infrastructure error `infra_verdict`; HUD's `triage_verdict_json`). Two more fields inside
`workflow` are spyre-ci's, passed verbatim by the relay and read by nothing upstream:
`failed_tests` (each failed or errored variant with id, message, duration, classification
and, for a new failure, its regression window `last_good_sha`/`first_bad_sha`, null when
unknown) and `environment` (HUD's `environment` column, which HUD leaves empty).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from contracts.change import ChangeNote
from contracts.forensics import FailureForensics, FailureTriage
from dashboard_export import ExportError, triage
from dashboard_export.model import RunRecord, VariantResult, iso_z, parse_time
from suites.model import Status

SCHEMA_VERSION = "1"
HUD_BODY_LIMIT = 2 * 1024 * 1024  # HUD answers 413 above this many bytes
MESSAGE_LIMIT = 4000  # characters of one failure message kept in failed_tests
# HUD keeps the first 50 entries of failed_tests_detail, each message cut at 500 characters:
# sending more would only cost bytes.
DETAIL_ENTRIES = 50
DETAIL_MESSAGE_LIMIT = 500
EVENT_TYPES = ("pull_request", "push", "nightly", "periodic")
_SHA = re.compile(r"[0-9a-fA-F]{7,64}")

_COUNT_AS = {
    Status.PASSED: "passed",
    Status.XPASSED: "passed",
    Status.FAILED: "failed",
    Status.ERROR: "failed",
    Status.TIMEOUT: "failed",
    Status.CRASHED: "failed",
    Status.SKIPPED: "skipped",
    Status.XFAILED: "skipped",  # as pytest's JUnit writes an xfail: a skipped testcase
    # Never in a main-job record (the pipeline keeps removed ids out); were one there, it
    # did not run, and it is no failure.
    Status.REMOVED: "skipped",
}


def result_counts(record: RunRecord) -> dict[str, int]:
    """`{"passed", "failed", "skipped", "total"}` as the callback's `test_results`."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for result in record.results:
        counts[_COUNT_AS[result.status]] += 1
    return {**counts, "total": sum(counts.values())}


def event_type(record: RunRecord) -> str:
    """The callback's `event_type`; a rerun reports as the kind of change it re-runs."""
    kind = record.event.kind
    if kind in EVENT_TYPES:
        return kind
    return "pull_request" if record.event.pr_number else "push"


def failed_test(result: VariantResult, forensics: FailureForensics | None = None) -> dict[str, Any]:
    """One entry of `failed_tests` / `failed_tests_json`; a new failure's carries its window
    from `forensics` (`RunRecord.forensics[id]`), each sha null when unknown."""
    message = result.outcome.message
    if len(message) > MESSAGE_LIMIT:
        cut = len(message) - MESSAGE_LIMIT
        message = f"{message[:MESSAGE_LIMIT]}... [{cut} more characters truncated]"
    classification = str(result.classification) if result.classification else "new"
    entry: dict[str, Any] = {
        "id": result.id,
        "suite": result.suite,
        "status": str(result.status),
        "message": message,
        "duration_s": round(result.outcome.duration_s, 6),
        "classification": classification,
        "holdout": result.holdout,
    }
    if result.base_status is not None:  # A/B: how it did without the change
        entry["base_status"] = result.base_status
    if classification == "new":
        entry["last_good_sha"] = _sha(forensics.last_good_sha if forensics else None)
        entry["first_bad_sha"] = _sha(forensics.first_bad_sha if forensics else None)
    return entry


def _sha(value: Any) -> str | None:
    # A CLI run's event may have no sha (or a label): unknown, not a sha HUD cannot link.
    return value if isinstance(value, str) and _SHA.fullmatch(value) else None


def failed_tests(record: RunRecord) -> list[dict[str, Any]]:
    """Failed and errored variants, new ones first (what survives truncation matters most)."""
    rank = {"new": 0, "pre-existing": 1, "flaky": 2}
    entries = [failed_test(r, record.forensics.get(r.id)) for r in record.failures]
    return sorted(entries, key=lambda e: (rank[e["classification"]], e["id"]))


def failed_tests_detail(record: RunRecord) -> list[dict[str, Any]]:
    """`workflow.failed_tests_detail` as the callback action sends it (JUnit's testcase name
    and classname: our variant id and its suite), new failures first, within HUD's caps."""
    order = {entry["id"]: i for i, entry in enumerate(failed_tests(record))}
    failures = sorted(record.failures, key=lambda r: order.get(r.id, len(order)))
    return [
        {
            "name": result.id,
            "classname": result.suite,
            "message": result.outcome.message[:DETAIL_MESSAGE_LIMIT],
            "duration": round(result.outcome.duration_s, 6),
        }
        for result in failures[:DETAIL_ENTRIES]
    ]


def environment(record: RunRecord) -> dict[str, Any]:
    """The `environment` object: torch and backend versions, device (HUD's `sdk`/`device`)."""
    env = record.environment
    return {
        "torch_version": env.torch_version,
        "torch_git_version": env.torch_git_version,
        "backend": env.backend,
        "backend_version": env.backend_version,
        "sdk": f"{env.backend} {env.backend_version}",
        "device": env.device,
        **{k: v for k, v in env.extra.items()},
        # What was tested (`Environment.tested`): HUD keeps the column whole, so a row says
        # which torch ran, what of the change was applied and what was not.
        **(
            {
                "torch_source": env.torch_source,
                "tested": env.tested.value,
                "tested_summary": env.headline[:_SUMMARY_MAX],
                "change": _change_summary(env.change),
            }
            if env.tested
            else {}
        ),
        # HUD keeps this column whole: the one place its row can say the tests never ran.
        **(
            {"infrastructure_error": record.infrastructure_message} if record.infrastructure else {}
        ),
        # ... and why a run with no new failure is not green (`evidence`: fail closed).
        **({"evidence_gap": record.gaps_message[:_SUMMARY_MAX]} if record.gaps else {}),
    }


def _change_summary(change: ChangeNote | None, limit: int = 50) -> dict[str, Any]:
    """The applied change as the callback carries it: state and the files in each group
    (paths and reasons, at most `limit` a group)."""
    change = change or ChangeNote()
    summary: dict[str, Any] = {"id": change.id, "state": change.state}
    for group, files in (("applied", change.applied), ("not_applied", change.not_applied)):
        summary[group] = [{"path": f.path, "why": f.why[:200]} for f in files[:limit]]
        if len(files) > limit:
            summary[f"{group}_more"] = len(files) - limit
    return summary


def infra_verdict(record: RunRecord, analyzed_at: str | None = None) -> dict[str, Any]:
    """The callback's `workflow.triage_verdict` for a run whose tests could not run.

    The shape and caps are those pytorch/test-infra's relay validates
    (`utils/triage_verdict.py`): category `infra`, high confidence (the test processes died
    before their first test, twice), one evidence entry per fault.
    """
    evidence = [
        {"job": record.job, "excerpt": cause[-_EXCERPT_MAX:]}
        for cause in record.infrastructure[:_EVIDENCE_MAX]
    ]
    verdict: dict[str, Any] = {
        "schema_version": 1,
        "category": "infra",
        "confidence": "high",
        "summary": record.infrastructure_message[:_SUMMARY_MAX],
        "evidence": evidence,
        "reproduced_on_retry": True,
        "analyzer": {"name": "spyre-ci", "version": record.environment.backend_version},
    }
    when = analyzed_at or record.completed_at
    if when:
        verdict["analyzed_at"] = when
    return verdict


def failure_verdict(record: RunRecord) -> dict[str, Any] | None:
    """The `workflow.triage_verdict` of a run with new failures: the one made with its
    forensics (`RunRecord.triage_verdict`), else one from the record alone (each failure's
    class from its message and, when known, its relatedness); None without new failures.
    `analyzed_at` is the run's end when the verdict has none."""
    new = record.new_failures
    if not new:
        return None
    verdict = record.triage_verdict or triage.run_verdict(
        [_failure_triage(record, result) for result in new],
        {r.id: r.outcome.message for r in new},
        first_bad=next(
            (
                entry.first_bad_sha
                for entry in (record.forensics.get(r.id) for r in new)
                if entry is not None and entry.first_bad_sha
            ),
            record.event.head_sha,
        ),
        job=record.job,
        version=record.environment.backend_version,
    )
    if verdict is None:
        return None
    if verdict.analyzed_at is None and record.completed_at:
        verdict = replace(verdict, analyzed_at=record.completed_at)
    return verdict.to_json()


def _failure_triage(record: RunRecord, result: VariantResult) -> FailureTriage:
    """A new failure's triage: the one its forensics kept, else one from the record."""
    entry = record.forensics.get(result.id)
    kept = entry.triage if entry is not None else None
    if kept is not None and kept.failure_class and kept.category:
        return replace(kept, id=result.id)
    return triage.triage(
        result.id,
        result.outcome.message,
        kept.related if kept is not None else False,
        str(result.classification) if result.classification else None,
        base_status=result.base_status,
        tested=record.environment.tested,
    )


# The reference relay's caps (longer fields are cut there; we cut first, so what we send is
# what is shown).
_SUMMARY_MAX = 1000
_EXCERPT_MAX = 1000
_EVIDENCE_MAX = 10


def callback_body(record: RunRecord, status: str = "completed") -> dict[str, Any]:
    """The body POSTed to the relay's `/github/callback`: client_payload plus `workflow`."""
    if status not in ("in_progress", "completed"):
        raise ExportError(f"callback status must be in_progress or completed, not {status!r}")
    done = status == "completed"
    # Shaped as pytorch/test-infra's callback action sends it (report_callback.py): the CI's
    # run id, run_attempt as a string, started_at only on in_progress and completed_at only
    # on completed (HUD keeps what an earlier callback set), url always a link.
    workflow: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "conclusion": record.effective_conclusion if done else None,
        "name": record.workflow,
        "url": record.run_url or record.artifact_url,
        "run_id": record.callback_run_id,
        "run_attempt": str(record.attempt),
        "job_name": record.job,
        "check_run_id": record.effective_check_run_id,
        "started_at": None if done else _callback_time(record.started_at),
        "completed_at": _callback_time(record.completed_at) if done else None,
        "spyre_run_id": record.run_id,
        "environment": environment(record),
    }
    if done:
        workflow["test_results"] = result_counts(record)
        workflow["failed_tests_detail"] = failed_tests_detail(record)
        workflow["failed_tests"] = failed_tests(record)
    if record.artifact_url:
        workflow["artifact_url"] = record.artifact_url
    if done and record.infrastructure:
        workflow["triage_verdict"] = infra_verdict(record)
    elif done and record.effective_conclusion == "failure":
        verdict = failure_verdict(record)
        if verdict is not None:
            workflow["triage_verdict"] = verdict
    return {
        "event_type": event_type(record),
        "delivery_id": record.event.delivery_id,
        "payload": dict(record.event.payload),
        "workflow": workflow,
    }


def ci_metrics(record: RunRecord, status: str = "completed") -> dict[str, float | None]:
    """queue_time (dispatch -> start) and execution_time (start -> end) in seconds."""
    queued = parse_time(record.queued_at, "queued_at") if record.queued_at else None
    started = parse_time(record.started_at, "started_at") if record.started_at else None
    ended = parse_time(record.completed_at, "completed_at") if record.completed_at else None
    queue = (started - queued).total_seconds() if queued and started else None
    run = (ended - started).total_seconds() if started and ended and status == "completed" else None
    return {"queue_time": queue, "execution_time": run}


def hud_envelope(
    callback: Mapping[str, Any],
    *,
    verified_repo: str,
    level: str,
    queue_time: float | None = None,
    execution_time: float | None = None,
) -> dict[str, Any]:
    """What the relay POSTs to HUD: facts it vouches for, and the callback verbatim."""
    return {
        "trusted": {
            "verified_repo": verified_repo,
            "downstream_repo_level": level,
            "ci_metrics": {"queue_time": queue_time, "execution_time": execution_time},
        },
        "untrusted": {"callback_payload": dict(callback)},
    }


def envelope_for(record: RunRecord, status: str = "completed") -> dict[str, Any]:
    """The HUD envelope of a run, as our relay would send it after this callback."""
    metrics = ci_metrics(record, status)
    return hud_envelope(
        callback_body(record, status),
        verified_repo=record.downstream_repo,
        level=record.level,
        queue_time=metrics["queue_time"],
        execution_time=metrics["execution_time"],
    )


def encode(body: Mapping[str, Any]) -> bytes:
    """The exact bytes sent on the wire (compact JSON, UTF-8)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def fit_body(body: Mapping[str, Any], limit: int = HUD_BODY_LIMIT) -> tuple[dict[str, Any], int]:
    """Shrink `failed_tests` until the encoded body fits `limit` bytes.

    Works on a callback body or a HUD envelope. Dropped entries are replaced by one explicit
    marker `{"truncated": true, "omitted": n, "total": m}` at the end of the list. Returns the
    body and the number of entries omitted; raises when even an empty list does not fit,
    rather than send a body HUD would refuse.
    """
    if len(encode(body)) <= limit:
        return dict(body), 0
    workflow = _workflow_of(body)
    entries = list(workflow.get("failed_tests") or [])

    def with_kept(kept: int) -> dict[str, Any]:
        trimmed = entries[:kept]
        if kept < len(entries):
            trimmed.append(
                {"truncated": True, "omitted": len(entries) - kept, "total": len(entries)}
            )
        return _replace_failed(body, trimmed)

    # Largest number of entries that fits: sizes grow with `kept`, so bisect.
    low, high = 0, len(entries)
    if len(encode(with_kept(0))) > limit:
        raise ExportError(
            f"body is {len(encode(with_kept(0)))} bytes even without failed tests, over the "
            f"{limit}-byte limit; the upstream webhook payload is too large to send"
        )
    while low < high:
        middle = (low + high + 1) // 2
        if len(encode(with_kept(middle))) <= limit:
            low = middle
        else:
            high = middle - 1
    return with_kept(low), len(entries) - low


def _workflow_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    if "untrusted" in body:
        return body["untrusted"]["callback_payload"]["workflow"]  # type: ignore[no-any-return]
    return body["workflow"]  # type: ignore[no-any-return]


def _replace_failed(body: Mapping[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    if "untrusted" in body:
        callback = _replace_failed(body["untrusted"]["callback_payload"], entries)
        return {**body, "untrusted": {**body["untrusted"], "callback_payload": callback}}
    return {**body, "workflow": {**body["workflow"], "failed_tests": entries}}


def _callback_time(value: str | None) -> str | None:
    return None if value is None else iso_z(parse_time(value))
