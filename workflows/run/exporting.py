"""Export assembly: the RunRecord every output format is built from, and writing them.

`dashboard_export` builds and writes the formats (pure builders, `write_run`); this module
gathers what they need from a run: the environment the tests ran in, the plan's summary, the
per-variant results. The main job and the upgrade diff run both export through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata

import selector
from contracts.backend import BackendId
from contracts.forensics import FailureForensics, RunForensics
from contracts.run_summary import ForensicsNote, RunResults
from dashboard_export import layout, triage
from dashboard_export.layout import write_run
from dashboard_export.model import Environment, PlanSummary, RunRecord, VariantResult
from suites.backend import BUNDLED_BACKEND, BUNDLED_DEVICE
from workflows.run import forensics
from workflows.run.on_build import same_sha
from workflows.run.run_model import EnvironmentUnderTest, FinishedRun
from workflows.run.verification import VerifiedRun
from workflows.stores.history import HistoryStore

FORENSICS_FILE = layout.FORENSICS_FILE


def environment_under_test(resolved: EnvironmentUnderTest | None) -> Environment:
    """The Environment of a run from what `workflows.run.under_test.resolve` recorded at plan
    time (planned.json); a run planned before that was recorded gets `environment()`."""
    if resolved is None:
        return environment()
    torch, backend = resolved.torch, resolved.backend
    package = backend.package or BUNDLED_BACKEND
    device = backend.device or BUNDLED_DEVICE
    bundled = package == BUNDLED_BACKEND and device == BUNDLED_DEVICE
    return Environment(
        torch_version=torch.version or "unknown",
        torch_git_version=torch.git_sha or "unknown",
        backend=f"{package} (emulated IBM Spyre)" if bundled else package,
        backend_version=backend.version or "unknown",
        device=(
            "spyre (emulated: 32 cores, 2 MB scratchpads, 128-byte sticks)" if bundled else device
        ),
        torch_source=torch.source,
        change=resolved.change.note(),
        tested=resolved.tested,
        notes=resolved.notes,
    )


def environment(
    torch_version: str | None = None,
    torch_git_version: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> Environment:
    """Where the tests ran: by default the installed torch, read from the installed
    distributions without importing it; an upgrade run names its environment's torch."""
    return Environment(
        torch_version=_version("torch") if torch_version is None else torch_version,
        torch_git_version=(
            _torch_git_version() if torch_git_version is None else torch_git_version
        ),
        backend="backend_under_test (emulated IBM Spyre)",
        backend_version=_version("spyre-ci"),
        device="spyre (emulated: 32 cores, 2 MB scratchpads, 128-byte sticks)",
        extra=dict(extra or {}),
    )


# Read once per process: what a process has loaded does not change under it, and looking a
# distribution up on every export was 7 % of a docs-only run's worker time.
@cache
def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def _torch_git_version() -> str:
    from workflows.run.on_build import torch_git_sha

    return torch_git_sha() or "unknown"


def top_reasons(plan: selector.Plan, limit: int = 10) -> tuple[tuple[str, int], ...]:
    """The first reason of every selected variant, counted: the report's 'why these tests'."""
    return counted(
        (f"{s.reasons[0].heuristic}: {s.reasons[0].reason}" for s in plan.selected if s.reasons),
        limit,
    )


def counted(reasons: Iterable[str], limit: int = 10) -> tuple[tuple[str, int], ...]:
    """Reason lines counted, the most frequent first (ties in the order first seen)."""
    found: dict[str, int] = {}
    for key in reasons:
        found[key] = found.get(key, 0) + 1
    return tuple(sorted(found.items(), key=lambda kv: -kv[1])[:limit])


REMOVED_NAMED = 5  # removed ids the report's line names


def removed_reason(results: RunResults | None) -> dict[str, int]:
    """The report's "not run because" line for the planned ids the specs no longer have
    (`finishing.summarize`'s `removed`), naming the first few; empty when there are none."""
    count = results.removed if results is not None else 0
    if not count or results is None:
        return {}
    ids = list(results.removed_ids)[:REMOVED_NAMED]
    more = ", ..." if count > len(ids) else ""
    return {f"removed: no longer in the specs ({', '.join(ids)}{more})": count}


def run_record(
    finished: FinishedRun,
    completed_at: str,
    verified: VerifiedRun | None,
    found: RunForensics | None = None,
) -> RunRecord:
    """The record of a main-job run; `verified` is None when it could not be verified (an
    infrastructure error): the record then carries the faults and the tests that did run.
    `found`: the run's `failure_forensics`, kept in the record (`forensics`,
    `triage_verdict`) so every format, and a re-export from run.json, carries them."""
    request = finished.planned.request
    plan = finished.planned.plan
    holdout = set(finished.planned.holdout)
    base = finished.base_outcomes
    outcomes = finished.outcomes
    if finished.faults:
        # An infrastructure error publishes no per-test failure anywhere (callback, HUD rows,
        # report): what failed before the tests stopped running says nothing that can be
        # trusted. The tests that passed are kept.
        outcomes = {v: o for v, o in outcomes.items() if not o.status.is_failure}
    results = tuple(
        VariantResult.of(
            outcome,
            finished.classification.get(vid),
            vid in holdout,
            str(base[vid].status) if vid in base else None,
            finished.base_read.get(vid),
        )
        for vid, outcome in sorted(outcomes.items())
    )
    metrics = verified.verdict.metrics if verified is not None else None
    summary = PlanSummary(
        selected=len(plan.selected),
        inventory=plan.totals.variants,
        fallback_reason=plan.fallback,
        top_reasons=top_reasons(plan),
        skipped={
            **{str(k): int(v) for k, v in plan.skipped.items()},
            **removed_reason(finished.summary.results),
        },
        holdout=len(holdout),
        holdout_misses=tuple(metrics.holdout_misses) if metrics else (),
        metrics={
            k: float(v)
            for k, v in (metrics.to_json() if metrics else {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        },
    )
    ci = RunRecord.ci_fields(request.run_id)
    return RunRecord(
        run_id=request.run_id,
        attempt=request.attempt,
        downstream_repo=request.downstream_repo,
        workflow=request.workflow,
        job=request.job,
        event=request.event,
        environment=environment_under_test(finished.planned.environment),
        results=results,
        started_at=finished.planned.started_at,
        completed_at=completed_at,
        plan=summary,
        infrastructure=tuple(f"{f.summary}\n{f.cause}" for f in finished.faults),
        held_back=finished.held_back,
        ci_run_id=ci.get("ci_run_id", ""),
        run_url=ci.get("run_url", ""),
        artifact_url=ci.get("artifact_url", ""),
        forensics=found.failures if found is not None else {},
        triage_verdict=found.verdict if found is not None else None,
    )


def failure_forensics(
    finished: FinishedRun, history: HistoryStore, created_at: float
) -> RunForensics:
    """Per failure that is not flaky (new or pre-existing) its window (last good / first bad
    sha, compare URL), triage class and where it last passed upstream, and the run's triage
    verdict over its new failures.

    `created_at`: when the run was planned (its place among History's runs)."""
    request = finished.planned.request
    trigger = request.event
    failing = sorted(
        v for v, c in finished.classification.items() if c != "flaky" and v in finished.outcomes
    )
    new = [v for v in finished.new_failures if v in finished.outcomes]
    environment = finished.planned.environment
    backend = (environment.backend or None) if environment is not None else None
    current = forensics.RunPoint(
        request.run_id, created_at, trigger.kind, trigger.head_sha, backend
    )
    found = forensics.windows(history, current, failing, trigger.repo or forensics.UPSTREAM_REPO)
    related = triage.related_ids(finished.planned.plan.selected)
    messages = {v: finished.outcomes[v].message for v in failing}
    under_test = environment.torch.git_sha if environment is not None else ""
    under_test = "" if under_test == "unknown" else under_test
    failures: dict[str, FailureForensics] = {}
    triaged = []
    base = finished.base_outcomes
    tested = environment.tested if environment is not None else None
    for vid in failing:
        earlier = passed_before(found[vid], backend, under_test)
        one = triage.triage(
            vid,
            messages[vid],
            vid in related,
            finished.classification.get(vid),
            base_status=str(base[vid].status) if vid in base else None,
            tested=tested,
            passed_before=earlier,
        )
        if vid in new:
            triaged.append(one)
        failures[vid] = found[vid].forensics(one, earlier)
    first_bad = next((found[v].first_bad for v in new if found[v].first_bad), trigger.head_sha)
    verdict = triage.run_verdict(
        triaged,
        messages,
        first_bad=first_bad,
        job=request.job,
        version=_version("spyre-ci"),
    )
    return RunForensics(failures, verdict)


def passed_before(
    window: forensics.Window, backend: BackendId | None, under_test: str
) -> str | None:
    """The upstream sha where the failure last passed, when History ran it there with the
    backend under test (same package, version, device, and digest of its files when
    recorded) on another torch than `under_test`
    (the git sha of the torch the failing run tested): then only upstream moved since. None
    otherwise (never seen passing, another or an unrecorded backend or torch, the same
    torch: nothing upstream moved)."""
    good, then, torch_then = window.last_good, window.last_good_backend, window.last_good_torch
    if not good or not backend or not then or torch_then in ("", "unknown") or not under_test:
        return None
    if not then.same_as(backend):
        return None
    if same_sha(torch_then, under_test):
        return None
    return good


FORENSICS_SHOWN = 20  # new failures whose window the run's summary keeps


def forensics_summary(found: RunForensics) -> ForensicsNote:
    """What History's run summary keeps of `failure_forensics` (`runs show`): the verdict's
    category and confidence, and the first failures' windows and classes."""
    verdict = found.verdict
    failures = list(found.failures.values())
    return ForensicsNote(
        triage=verdict.category if verdict is not None else None,
        confidence=verdict.confidence if verdict is not None else None,
        failures=tuple(failures[:FORENSICS_SHOWN]),
        more=max(0, len(failures) - FORENSICS_SHOWN),
    )


def export(
    finished: FinishedRun,
    completed_at: str,
    verified: VerifiedRun | None,
    found: RunForensics | None = None,
) -> None:
    """Write every output format of the run into its out directory.

    `found`: the run's `failure_forensics`; the record carries it, so `write_run` writes
    `forensics.json`, the report's new failures show each one's window and triage class,
    `failed_tests` their shas and the callback the verdict."""
    write_run(run_record(finished, completed_at, verified, found), finished.out_dir)
