"""Fail closed: a run is green only when its outcomes and its per-test evidence agree.

A HUD row or a check run that says `success` vouches for every test the run was meant to
run. It cannot when part of the evidence is missing or contradicts the rest, so each such
gap keeps the conclusion from `success` (`RunRecord.effective_conclusion`: `neutral`, the
gap named in the check run's title, HUD's `environment` and the report):

- the record alone (`record_gaps`): fewer results than the plan ran (the selected variants
  and the holdout, less the ids the specs no longer have: a shard's results are missing); a
  holdout miss without its failing result; a failure classified flaky (flaky means it passed
  on rerun, so its final status cannot be a failure);
- the record against its JUnit (`junit_gaps`, kept in `RunRecord.evidence_gaps` by
  `layout.write_run` and `with_junit`): a testcase whose variant has no result (the job's
  counts would not match the tests its rows list), or whose last attempt failed while the
  result says it did not;
- a callback against itself (`callback_gaps`, what the relay checks before completing a
  check run green): `total` that is not passed + failed + skipped, or more failed tests
  listed than counted, or a new failure listed under a `success`.

A run whose tests could not run (`infrastructure`) is a failure already and is not checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.classification import Classification
from dashboard_export.junit import attempt_cases, case_id, case_status

if TYPE_CHECKING:
    from dashboard_export.model import RunRecord

NAMED = 3  # ids a gap names before "and N more"
# `PlanSummary.skipped` reasons of planned ids the loaded specs no longer have: they ran as
# nothing and have no result (`workflows.run.exporting.removed_reason`).
REMOVED_PREFIX = "removed"


def record_gaps(record: RunRecord) -> tuple[str, ...]:
    """Where the record contradicts itself or lacks results its plan promises."""
    if record.infrastructure:
        return ()
    gaps: list[str] = []
    plan = record.plan
    failing = {r.id for r in record.failures}
    # An upgrade run's plan counts its selection and holdout over two versions, overlapping.
    if plan is not None and record.upgrade is None:
        removed = sum(n for why, n in plan.skipped.items() if why.startswith(REMOVED_PREFIX))
        expected = plan.selected + plan.holdout - removed
        if len(record.results) < expected:
            gaps.append(
                f"{expected - len(record.results)} of {expected} planned variants have no "
                "result (a shard's results are missing)"
            )
        misses = [vid for vid in plan.holdout_misses if vid not in failing]
        if misses:
            gaps.append(f"holdout misses without a failing result: {_named(misses)}")
    flaky_failing = [r.id for r in record.failures if r.classification is Classification.FLAKY]
    if flaky_failing:
        gaps.append(f"classified flaky (passed on rerun) yet failing: {_named(flaky_failing)}")
    return tuple(gaps)


def junit_gaps(record: RunRecord, cases: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """Where the JUnit testcases (`merge_attempts`: one per variant, its last attempt)
    disagree with the record's results."""
    if record.infrastructure:
        return ()
    results = {r.id: r for r in record.results}
    unlisted: list[str] = []
    disagree: list[str] = []
    for case in cases:
        vid = case_id(case)
        result = results.get(vid)
        if result is None:
            unlisted.append(vid)
        elif case_status(case).is_failure and not result.status.is_failure:
            disagree.append(vid)
    gaps = []
    if unlisted:
        gaps.append(f"{len(unlisted)} JUnit testcase(s) without a result: {_named(unlisted)}")
    if disagree:
        gaps.append(f"last JUnit attempt failed, the result says not: {_named(disagree)}")
    return tuple(gaps)


def with_junit(record: RunRecord, junit_dir: str | Path | None) -> RunRecord:
    """The record with `evidence_gaps` judged against the JUnit under `junit_dir`; as it is
    when there is no such folder (no evidence at hand to judge by)."""
    cases = attempt_cases(junit_dir)
    return record if cases is None else with_cases(record, cases)


def with_cases(record: RunRecord, cases: Sequence[Mapping[str, Any]]) -> RunRecord:
    """The record with `evidence_gaps` judged against merged testcases."""
    gaps = junit_gaps(record, cases)
    return record if gaps == record.evidence_gaps else replace(record, evidence_gaps=gaps)


def callback_gaps(workflow: Mapping[str, Any]) -> tuple[str, ...]:
    """Where a completed callback's counts and listed tests disagree (any downstream's: the
    fields are read as loosely as HUD reads them)."""
    gaps: list[str] = []
    counts = workflow.get("test_results")
    counted = _counts(counts) if isinstance(counts, Mapping) else None
    if counted is not None:
        passed, failed, skipped, total = counted
        if total is not None and total != passed + failed + skipped:
            gaps.append(
                f"test_results.total {total} is not passed + failed + skipped "
                f"({passed + failed + skipped})"
            )
        listed = _listed(workflow.get("failed_tests_detail"))
        ours = _listed(workflow.get("failed_tests"))
        if max(listed, ours) > failed:
            gaps.append(f"{max(listed, ours)} failed tests listed, {failed} counted")
    if str(workflow.get("conclusion") or "") == "success":
        new = [
            str(entry.get("id"))
            for entry in workflow.get("failed_tests") or ()
            if isinstance(entry, Mapping)
            and entry.get("classification") == "new"
            and not entry.get("truncated")
        ]
        if new:
            gaps.append(f"success with new failures listed: {_named(new)}")
    return tuple(gaps)


def checked_conclusion(workflow: Mapping[str, Any]) -> str:
    """A callback's conclusion as a check run may show it: `success` only when its counts
    and listed tests agree (`callback_gaps`), else `neutral`; anything else as it came."""
    conclusion = str(workflow.get("conclusion") or "")
    if conclusion == "success" and callback_gaps(workflow):
        return "neutral"
    return conclusion


def headline(gaps: Sequence[str]) -> str:
    """One line for the places that take one (a check run's title, HUD's environment)."""
    if not gaps:
        return ""
    more = f" (and {len(gaps) - 1} more)" if len(gaps) > 1 else ""
    return f"results incomplete, not a pass: {gaps[0]}{more}"


def _counts(counts: Mapping[str, Any]) -> tuple[int, int, int, int | None] | None:
    numbers = [_int(counts.get(k)) for k in ("passed", "failed", "skipped")]
    if any(n is None for n in numbers):
        return None
    passed, failed, skipped = (n or 0 for n in numbers)
    return passed, failed, skipped, _int(counts.get("total"))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _listed(entries: Any) -> int:
    """Failed tests a list names (a truncation marker counts those it stands for)."""
    if not isinstance(entries, list):
        return 0
    count = 0
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("truncated"):
            omitted = _int(entry.get("omitted"))
            count += omitted or 0
        elif isinstance(entry, Mapping):
            count += 1
    return count


def _named(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:NAMED])
    return shown + (f" and {len(ids) - NAMED} more" if len(ids) > NAMED else "")
