"""Promotion readiness: the criteria a downstream meets to be promoted from L2 to L3 in
PyTorch's cross-repo CI relay (pytorch/rfcs PR #102; HUD's L3 readiness panel in
pytorch/test-infra, `torchci/lib/crcr/l3Thresholds.ts`), computed from our run records as
plain data (pure): 30 days at L2, and over the fixed 14-day promotion window a CI job pass
rate of at least 90 %, an average queue time under 30 min, under 1 % of jobs running over
3 h, a median end-to-end time under 3 h and a timeout rate under 1 %.

Long on purpose: each criterion of the relay's rules is a short function with the evidence it
needs beside its bound, and they share one job-facts reading; split, the rules would no
longer read as the one table the relay publishes.

Each criterion knows the evidence it needs, and below it says "not enough data" with what
is missing instead of a verdict (a share or a mean over one 19-second run says nothing):

- the window covered: History's runs reach back the whole 14 days (its first run is at
  least that old); a shorter `days` window never covers it;
- enough finished jobs: a share bounded at b needs ceil(1/b) jobs (10 for the pass rate's
  10 % of failures, 100 for the 1 % bounds): with fewer, one job against it is already over
  the bound, so the share cannot tell rare from never; a mean or median needs
  `MIN_TIMED_JOBS`;
- time at L2: since the date the allowlist moved the repository to L2 (`l2_since`), else
  since History's first run, the earliest evidence of it reporting.

The answer is READY when every criterion passes, NOT READY when one fails, NOT ENOUGH DATA
when none fails but one lacks its evidence.

One run of ours is one CI job. Its verdict comes from its record as History lists it
(`HistoryRun`: run_id, state, created_at, updated_at and its `RunSummary`):

- pass: finished (completed, held or forgotten) with no new failure and no infrastructure
  fault: the run's exit code 0, a green check;
- fail: finished with new failures (exit code 1);
- infra: `infra-error`, the tests could not run (exit code 3): a failure of the CI job,
  counted against the pass rate and shown apart;
- error: `stopped` by an error (exit code 2 or 3 at the time): a failure too;
- cancelled: `stopped` because it was interrupted (Ctrl-C, SIGTERM): not counted, like a
  cancelled job, and listed;
- running: `planned` or `finishing`, not finished yet: not counted in the pass rate; one
  older than the long-job limit counts as a job running over 3 hours.

Times: created_at is when the run was planned (a worker took its event); `started_at`
(summary) is when its first shard started; `finished_at` (summary) is when it was saved
finished, else the record's updated_at. Queue time is started - created, end-to-end is
finished - created, a job's run time is finished - started (finished - created when no start
was recorded). A run is timed out when it failed and a new failure was a `timeout` outcome
(a test, or the rest of a shard, out of time), or it was stopped by a time limit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from contracts.run_summary import RunSummary

DAY_S = 86400.0
WINDOW_DAYS = 14.0  # the relay's promotion window: the criteria must hold over all of it
L2_DAYS_MIN = 30.0  # time at L2 before a promotion to L3, at least
PASS_RATE_MIN = 0.90  # share of counted jobs that passed, at least
MIN_TIMED_JOBS = 10  # jobs a mean or median time is taken over, at least
QUEUE_MEAN_MAX_S = 30 * 60.0  # average queue time, under
LONG_JOB_S = 3 * 3600.0  # a job running longer than this is a long job
LONG_SHARE_MAX = 0.01  # share of long jobs, under
END_TO_END_MEDIAN_MAX_S = 3 * 3600.0  # median end-to-end time, under
TIMEOUT_RATE_MAX = 0.01  # share of counted jobs that timed out, under
WORST_SHOWN = 5  # runs named as the worst of a criterion
IDS_SHOWN = 20  # runs named as counted against a criterion; the count covers them all

READY, NOT_READY, NOT_ENOUGH_DATA = "READY", "NOT READY", "NOT ENOUGH DATA"
COUNTED = ("pass", "fail", "infra", "error")  # verdicts that are a finished CI job
_FINISHED_STATES = frozenset({"completed", "held", "forgotten"})


class ReadinessError(Exception):
    """A run record or a window that cannot be assessed; the message names it."""


class HistoryRun(Protocol):
    """One run as History lists it (`workflows.stores.history.RunRecord`)."""

    @property
    def run_id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def created_at(self) -> float: ...

    @property
    def updated_at(self) -> float: ...

    @property
    def summary(self) -> RunSummary: ...


@dataclass(frozen=True)
class JobFacts:
    """One run as a CI job: its verdict and its times (epoch seconds)."""

    run_id: str
    state: str
    verdict: str  # pass | fail | infra | error | cancelled | running
    created_at: float
    started_at: float | None
    finished_at: float | None
    timed_out: bool
    event: str = ""

    @property
    def counted(self) -> bool:
        return self.verdict in COUNTED

    @property
    def queue_s(self) -> float | None:
        return None if self.started_at is None else max(0.0, self.started_at - self.created_at)

    @property
    def end_to_end_s(self) -> float | None:
        return None if self.finished_at is None else max(0.0, self.finished_at - self.created_at)

    @property
    def run_s(self) -> float | None:
        if self.finished_at is None:
            return None
        return max(0.0, self.finished_at - (self.started_at or self.created_at))


def job_facts(run: HistoryRun) -> JobFacts:
    """The CI-job view of one run."""
    try:
        created, updated = float(run.created_at), float(run.updated_at)
    except (TypeError, ValueError) as exc:
        raise ReadinessError(f"run record {run.run_id!r}: {exc!r}") from exc
    state, summary = str(run.state), run.summary
    results = summary.results
    stopped_because = summary.stopped_because or ""
    if state in _FINISHED_STATES:
        verdict = "fail" if results is not None and results.new_failures else "pass"
        if results is not None and results.infrastructure:
            verdict = "infra"
    elif state == "infra-error":
        verdict = "infra"
    elif state == "stopped":
        verdict = "cancelled" if stopped_because.startswith("interrupted") else "error"
    else:
        verdict = "running"
    finished = _time(summary.finished_at)
    if finished is None and verdict != "running" and verdict != "cancelled":
        finished = updated
    return JobFacts(
        run.run_id,
        state,
        verdict,
        created,
        _time(results.started_at if results is not None else None),
        finished,
        _timed_out(verdict, summary, stopped_because),
        summary.event,
    )


def _time(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _timed_out(verdict: str, summary: RunSummary, stopped_because: str) -> bool:
    results = summary.results
    if verdict == "fail" and results is not None:
        if "new_timeouts" not in results.missing:
            return results.new_timeouts > 0
        # records written before new_timeouts: a failed run with any timeout outcome
        return results.counts.get("timeout", 0) > 0
    if verdict == "error":
        text = stopped_because.lower()
        return "time limit" in text or "timelimit" in text or "timed out" in text
    return False


@dataclass(frozen=True)
class Worst:
    run_id: str
    value: float | None  # the criterion's measure for this run (seconds), None for a verdict
    note: str  # its verdict, or why it counts


@dataclass(frozen=True)
class Criterion:
    """One criterion: its measure over the window, the bound, and the runs behind it."""

    key: str
    title: str
    value: float | None  # a share (0..1) or seconds; None when no run measures it
    unit: str  # "share" | "s" | "days"
    comparison: str  # ">=" (at least the bound) | ">" (above it) | "<" (under it)
    bound: float
    measured: int  # runs the value is over
    against: int  # runs that count against it (failed, long, timed out, ...)
    against_ids: tuple[str, ...]  # the newest IDS_SHOWN of those
    worst: tuple[Worst, ...]
    detail: str
    missing: str = ""  # the evidence it lacks ("3.0 days of 14 covered; ..."), "" with enough

    @property
    def met(self) -> bool:
        """The value is within the bound (whatever the evidence behind it)."""
        if self.value is None:
            return False
        if self.comparison == ">=":
            return self.value >= self.bound
        return self.value > self.bound if self.comparison == ">" else self.value < self.bound

    @property
    def status(self) -> str:
        """pass | fail | no data (below the evidence it needs)."""
        if self.missing:
            return "no data"
        return "pass" if self.met else "fail"

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "value": self.value,
            "unit": self.unit,
            "comparison": self.comparison,
            "bound": self.bound,
            "passed": self.passed,
            "status": self.status,
            "missing": self.missing,
            "measured": self.measured,
            "against": self.against,
            "against_ids": list(self.against_ids),
            "worst": [{"run_id": w.run_id, "value": w.value, "note": w.note} for w in self.worst],
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Readiness:
    """Every criterion over one window, and the runs it looked at."""

    start: float
    end: float
    days: float
    criteria: tuple[Criterion, ...]
    verdicts: dict[str, int]  # runs in the window by verdict
    runs: int  # runs in the window
    older: int  # runs before the window, left out
    # cancelled / running run ids in the window; `tried`: runs of a patch given with `--diff`
    # (anywhere in History), never CI jobs
    not_counted: dict[str, tuple[str, ...]]
    covered_days: float = 0.0  # how much of the window History's runs reach back over
    first_run: float | None = None  # History's first run (epoch seconds), None without runs

    @property
    def ready(self) -> bool:
        return all(c.passed for c in self.criteria)

    @property
    def verdict(self) -> str:
        """READY, NOT READY (a criterion fails) or NOT ENOUGH DATA (none fails, one lacks
        the evidence it needs)."""
        if self.ready:
            return READY
        if any(c.status == "fail" for c in self.criteria):
            return NOT_READY
        return NOT_ENOUGH_DATA

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "verdict": self.verdict,
            "window": {
                "start": self.start,
                "end": self.end,
                "days": self.days,
                "needed_days": WINDOW_DAYS,
                "covered_days": round(self.covered_days, 3),
            },
            "first_run": self.first_run,
            "runs": self.runs,
            "older_runs_left_out": self.older,
            "verdicts": dict(self.verdicts),
            "not_counted": {k: list(v) for k, v in self.not_counted.items()},
            "criteria": [c.to_json() for c in self.criteria],
        }


def assess(
    records: Iterable[HistoryRun],
    now: float,
    days: float = WINDOW_DAYS,
    l2_since: float | None = None,
) -> Readiness:
    """Every criterion over the runs created in (now - days, now], each with the evidence it
    lacks. `l2_since`: when the allowlist moved the repository to L2 (epoch seconds); without
    it time at L2 counts from History's first run."""
    if not (math.isfinite(days) and days > 0):
        raise ReadinessError(f"window of {days!r} days: must be a positive number of days")
    if l2_since is not None and not (math.isfinite(l2_since) and l2_since <= now):
        raise ReadinessError(f"L2 since {l2_since!r}: must be a time before the window's end")
    start = now - days * DAY_S
    jobs: list[JobFacts] = []
    older = 0
    first: float | None = None
    tried: list[str] = []
    for record in records:
        if record.summary.plan is not None and record.summary.plan.tried:
            tried.append(record.run_id)  # a patch someone tried: no CI job
            continue
        job = job_facts(record)
        if job.created_at <= now:
            first = job.created_at if first is None else min(first, job.created_at)
        if job.created_at <= start:
            older += 1
        elif job.created_at <= now:
            jobs.append(job)
    jobs.sort(key=lambda j: j.created_at, reverse=True)  # newest first, as evidence is listed
    verdicts = {v: 0 for v in (*COUNTED, "cancelled", "running")}
    for job in jobs:
        verdicts[job.verdict] += 1
    covered = 0.0 if first is None else min(days, (now - first) / DAY_S)
    window_missing = (
        f"{covered:.1f} days of {WINDOW_DAYS:g} covered"
        + (f" (the window is {days:g} days)" if days < WINDOW_DAYS else "")
        if covered < WINDOW_DAYS
        else ""
    )
    criteria = (
        _time_at_l2(now, l2_since, first),
        *(
            _with_evidence(c, window_missing)
            for c in (
                _pass_rate(jobs, verdicts),
                _queue(jobs),
                _long_jobs(jobs, now),
                _end_to_end(jobs),
                _timeouts(jobs),
            )
        ),
    )
    not_counted = {
        v: tuple(j.run_id for j in jobs if j.verdict == v)[:IDS_SHOWN]
        for v in ("cancelled", "running")
    }
    if tried:
        not_counted["tried"] = tuple(tried[:IDS_SHOWN])
    return Readiness(
        start, now, days, criteria, verdicts, len(jobs), older, not_counted, covered, first
    )


def jobs_needed(criterion: Criterion) -> int:
    """Finished jobs a criterion needs: ceil(1/b) for a share whose jobs against it may be
    at most b of them (so one such job is not already over the bound), `MIN_TIMED_JOBS`
    for a mean or median time."""
    if criterion.unit != "share":
        return MIN_TIMED_JOBS
    allowed = 1.0 - criterion.bound if criterion.comparison in (">", ">=") else criterion.bound
    return math.ceil(1.0 / allowed - 1e-9)


def _with_evidence(criterion: Criterion, window_missing: str) -> Criterion:
    """The criterion with the evidence it lacks: the window covered, enough jobs."""
    needed = jobs_needed(criterion)
    missing = [window_missing] if window_missing else []
    if criterion.measured < needed:
        missing.append(
            f"{criterion.measured} job{'s' * (criterion.measured != 1)} of {needed} needed"
        )
    return replace(criterion, missing="; ".join(missing))


def _time_at_l2(now: float, l2_since: float | None, first: float | None) -> Criterion:
    since = l2_since if l2_since is not None else first
    value = None if since is None else max(0.0, (now - since) / DAY_S)
    source = (
        "since the allowlist's L2 date" if l2_since is not None else "since History's first run"
    )
    detail = f"{value:.1f} days {source}" if value is not None else "no run recorded yet"
    missing = (
        ""
        if value is not None and value >= L2_DAYS_MIN
        else f"{value or 0.0:.1f} days of {L2_DAYS_MIN:g} at L2 ({source})"
    )
    return Criterion(
        "time_at_l2",
        "time at L2",
        value,
        "days",
        ">=",
        L2_DAYS_MIN,
        0,
        0,
        (),
        (),
        detail,
        missing,
    )


def _pass_rate(jobs: list[JobFacts], verdicts: Mapping[str, int]) -> Criterion:
    counted = [j for j in jobs if j.counted]
    failed = [j for j in counted if j.verdict != "pass"]
    value = (len(counted) - len(failed)) / len(counted) if counted else None
    detail = (
        f"{verdicts['pass']} of {len(counted)} finished jobs passed; failed: "
        f"{verdicts['fail']} with new failures, {verdicts['infra']} infrastructure errors, "
        f"{verdicts['error']} stopped by an error"
        if counted
        else "no finished job in the window"
    )
    return Criterion(
        "pass_rate",
        "CI job pass rate",
        value,
        "share",
        ">=",
        PASS_RATE_MIN,
        len(counted),
        len(failed),
        tuple(j.run_id for j in failed)[:IDS_SHOWN],
        tuple(Worst(j.run_id, None, j.verdict) for j in failed[:WORST_SHOWN]),
        detail,
    )


def _queue(jobs: list[JobFacts]) -> Criterion:
    measured = [j for j in jobs if j.queue_s is not None]
    unmeasured = sum(1 for j in jobs if j.counted and j.queue_s is None)
    value = statistics.fmean(j.queue_s or 0.0 for j in measured) if measured else None
    slow = [j for j in measured if (j.queue_s or 0.0) >= QUEUE_MEAN_MAX_S]
    detail = (
        f"mean over {len(measured)} jobs with a recorded start"
        if measured
        else "no job in the window recorded its start"
    ) + (f"; {unmeasured} finished jobs recorded none (not measured)" if unmeasured else "")
    return _timed_criterion(
        "queue_time",
        "average queue time",
        value,
        "<",
        QUEUE_MEAN_MAX_S,
        measured,
        slow,
        lambda j: j.queue_s,
        detail,
    )


def _long_jobs(jobs: list[JobFacts], now: float) -> Criterion:
    # A job still running past the limit is a long job whatever it ends as; one still
    # running under it is not known yet.
    def run_s(job: JobFacts) -> float | None:
        if job.verdict == "running":
            age = now - (job.started_at or job.created_at)
            return age if age > LONG_JOB_S else None
        return job.run_s if job.counted else None

    measured = [j for j in jobs if run_s(j) is not None]
    long = [j for j in measured if (run_s(j) or 0.0) > LONG_JOB_S]
    value = len(long) / len(measured) if measured else None
    hung = sum(1 for j in long if j.verdict == "running")
    detail = (
        f"{len(long)} of {len(measured)} jobs ran over {LONG_JOB_S / 3600:g} h"
        + (f" ({hung} still running)" if hung else "")
        if measured
        else "no finished job in the window"
    )
    return _timed_criterion(
        "long_jobs",
        "share of jobs running over 3 h",
        value,
        "<",
        LONG_SHARE_MAX,
        measured,
        long,
        run_s,
        detail,
        unit="share",
    )


def _end_to_end(jobs: list[JobFacts]) -> Criterion:
    measured = [j for j in jobs if j.counted and j.end_to_end_s is not None]
    value = statistics.median(j.end_to_end_s or 0.0 for j in measured) if measured else None
    over = [j for j in measured if (j.end_to_end_s or 0.0) >= END_TO_END_MEDIAN_MAX_S]
    detail = (
        f"median over {len(measured)} finished jobs, created to finished"
        if measured
        else "no finished job in the window"
    )
    return _timed_criterion(
        "end_to_end",
        "median end-to-end time",
        value,
        "<",
        END_TO_END_MEDIAN_MAX_S,
        measured,
        over,
        lambda j: j.end_to_end_s,
        detail,
    )


def _timeouts(jobs: list[JobFacts]) -> Criterion:
    counted = [j for j in jobs if j.counted]
    timed_out = [j for j in counted if j.timed_out]
    value = len(timed_out) / len(counted) if counted else None
    detail = (
        f"{len(timed_out)} of {len(counted)} finished jobs timed out"
        if counted
        else "no finished job in the window"
    )
    return Criterion(
        "timeouts",
        "timeout rate",
        value,
        "share",
        "<",
        TIMEOUT_RATE_MAX,
        len(counted),
        len(timed_out),
        tuple(j.run_id for j in timed_out)[:IDS_SHOWN],
        tuple(Worst(j.run_id, j.run_s, j.verdict) for j in timed_out[:WORST_SHOWN]),
        detail,
    )


def _timed_criterion(
    key: str,
    title: str,
    value: float | None,
    comparison: str,
    bound: float,
    measured: list[JobFacts],
    against: list[JobFacts],
    measure: Any,
    detail: str,
    unit: str = "s",
) -> Criterion:
    """A criterion over a time per job: its worst are the jobs with the longest times."""
    worst = sorted(measured, key=lambda j: measure(j) or 0.0, reverse=True)[:WORST_SHOWN]
    return Criterion(
        key,
        title,
        value,
        unit,
        comparison,
        bound,
        len(measured),
        len(against),
        tuple(j.run_id for j in against)[:IDS_SHOWN],
        tuple(Worst(j.run_id, measure(j), j.verdict) for j in worst),
        detail,
    )
