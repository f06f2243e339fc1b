"""The CRCR job state machine in Redis: DISPATCHED -> IN_PROGRESS -> COMPLETED.

Keys (the upstream relay's layout for job state):

- `crcr:dispatch:{delivery_id}:{repo}`   hash {dispatched_at, event_type}: written by fan-out
  (a job's run id and name are unknown until it calls back, so DISPATCHED lives per repo)
- `crcr:state:{delivery_id}:{repo}:{run_id}:{run_attempt}:{job_name}`   hash {state,
  dispatched_at, in_progress_at, completed_at, queue_time, execution_time, conclusion,
  check_run_id, check_run_claim, level, callback}
- `crcr:in_progress`   sorted set of job keys by in_progress time, for the sweeper
- `crcr:ratelimit:{repo}`   sorted set of callback times: the sliding window
- `crcr:check_run_wanted:{head_sha}:{repo}`   an L3 repo's PR carries its `ciflow/crcr/<device>`
  label: set by the label event and at dispatch, read by callbacks
- `crcr:jobs:{head_sha}:{repo}`   hash job key -> the job's last state (JSON), so a label added
  later can create the check runs of jobs that already reported
- `crcr:run_start:{delivery_id}:{repo}:{run_id}:{run_attempt}`   the state key of the run's
  first job to start: only that job reports `queue_time` (one sample per run)
- `crcr:demotion:{repo}`   when the relay first saw the repo's demotion PR open (demotion.py)

A job whose `in_progress` HUD refused (a 4xx other than 409) keeps no state but
`refused_in_progress_at`, so its `completed` is still taken and forwarded, as the reference's
(which commits before forwarding) is, while a corrected `in_progress` is taken too.

Everything lives 3 days (`CRCR_STATUS_TTL`). `plan` is a pure function; `commit` applies a
plan only if the job is still in the state the plan was made from (compare-and-set in Lua),
so two racing callbacks cannot both move a job.

A job's upstream check run is created by whoever first needs it: its own callback, or the
background thread acting on a `ciflow/crcr/<device>` label. `claim_check_run` lets exactly one
of them create it (`check_run_claim`, taken over after `CHECK_RUN_CLAIM_SECONDS` if its holder
died), and `set_check_run` records the id and re-reads the job in one step, so a creator that
made an in_progress check run sees a completion that arrived meanwhile and completes it: a
completing callback that finds the claim held leaves that to the creator.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from relay.events import RelayError, RelayUnavailable

CRCR_STATUS_TTL = 259200  # 3 days
ZOMBIE_TIMEOUT_SECONDS = 21600  # 6 hours
RATE_WINDOW_SECONDS = 60
IN_PROGRESS_SET = "crcr:in_progress"
DISPATCHED, IN_PROGRESS, COMPLETED, TIMED_OUT = (
    "DISPATCHED",
    "IN_PROGRESS",
    "COMPLETED",
    "TIMED_OUT",
)
SCHEDULED_EVENTS = ("nightly", "periodic")
CHECK_RUN_CLAIM_SECONDS = 120  # longer than a create_check_run call with its retries

_COMMIT = """
local current = redis.call('HGET', KEYS[1], 'state') or ''
if current ~= ARGV[1] then return current == '' and '-' or current end
redis.call('HSET', KEYS[1], 'state', ARGV[2], unpack(ARGV, 6))
redis.call('EXPIRE', KEYS[1], ARGV[4])
if ARGV[2] == 'IN_PROGRESS' then
  redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
else
  redis.call('ZREM', KEYS[2], KEYS[1])
end
return 'OK'
"""

# KEYS[1] job state; ARGV now, stale-after. Returns {outcome, check_run_id, state, conclusion}:
# 'exists' (id set), 'busy' (another creator holds a fresh claim), 'gone' (no job), 'claimed'.
_CLAIM_CHECK_RUN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'gone', '', '', ''} end
local job = redis.call('HMGET', KEYS[1], 'check_run_id', 'check_run_claim', 'state', 'conclusion')
local state, conclusion = job[3] or '', job[4] or ''
if job[1] and job[1] ~= '' then return {'exists', job[1], state, conclusion} end
if job[2] and tonumber(ARGV[1]) - tonumber(job[2]) < tonumber(ARGV[2]) then
  return {'busy', '', state, conclusion}
end
redis.call('HSET', KEYS[1], 'check_run_claim', ARGV[1])
return {'claimed', '', state, conclusion}
"""

# KEYS[1] run-start key; ARGV job key, ttl. 1 if this job is the run's first to start (or is
# that job again: a retry after HUD was down), else 0.
_RUN_START = """
local first = redis.call('GET', KEYS[1])
if not first then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
return first == ARGV[1] and 1 or 0
"""

_RATE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1] - ARGV[2])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""


@dataclass(frozen=True)
class CheckRunSlot:
    """What `claim_check_run` found: `outcome` is 'claimed' (the caller creates the check
    run), 'exists' (`check_run_id` is set), 'busy' (another creator is at it) or 'gone'."""

    outcome: str
    check_run_id: str = ""
    state: str = ""
    conclusion: str = ""


class Rejected(RelayError):
    """A callback that cannot move its job (no dispatch, duplicate, skipped state): 400."""


class StateUnavailable(RelayUnavailable):
    """Redis failed: the state is unknown, so the callback is refused (fail closed, 503)."""


@dataclass(frozen=True)
class JobKey:
    delivery_id: str
    repo: str
    run_id: str
    run_attempt: str
    job_name: str

    @property
    def redis_key(self) -> str:
        return (
            f"crcr:state:{self.delivery_id}:{self.repo}:{self.run_id}:"
            f"{self.run_attempt}:{self.job_name}"
        )

    @property
    def dispatch_key(self) -> str:
        return dispatch_key(self.delivery_id, self.repo)

    @property
    def run_start_key(self) -> str:
        return f"crcr:run_start:{self.delivery_id}:{self.repo}:{self.run_id}:{self.run_attempt}"


def dispatch_key(delivery_id: str, repo: str) -> str:
    return f"crcr:dispatch:{delivery_id}:{repo}"


@dataclass(frozen=True)
class Plan:
    """What a callback does to its job: from `expected` ('' = no state yet) to `state`."""

    expected: str
    state: str
    queue_time: float | None = None
    execution_time: float | None = None
    fields: Mapping[str, str] = field(default_factory=dict)


def plan(
    status: str,
    current: Mapping[str, str] | None,
    dispatched_at: float | None,
    now: float,
    where: str,
) -> Plan:
    """The transition a callback with `status` asks for, or Rejected (pure)."""
    state = (current or {}).get("state", "")
    if status == "in_progress":
        if dispatched_at is None:
            raise Rejected(f"{where}: in_progress callback with no prior dispatch")
        if state:
            raise Rejected(f"{where}: duplicate in_progress callback (job is {state})")
        queue_time = max(0.0, now - dispatched_at)
        return Plan(
            "",
            IN_PROGRESS,
            queue_time,
            None,
            {
                "dispatched_at": repr(dispatched_at),
                "in_progress_at": repr(now),
                "queue_time": repr(queue_time),
            },
        )
    if status == "completed":
        if state == IN_PROGRESS:
            started = float((current or {})["in_progress_at"])
            execution = max(0.0, now - started)
            waited = _float((current or {}).get("queue_time"))
            return Plan(
                IN_PROGRESS,
                COMPLETED,
                waited,
                execution,
                {
                    "completed_at": repr(now),
                    "execution_time": repr(execution),
                },
            )
        if state in (COMPLETED, TIMED_OUT):
            raise Rejected(f"{where}: duplicate completed callback (job is {state})")
        if dispatched_at is None:
            raise Rejected(f"{where}: completed callback with no prior dispatch")
        refused_start = _float((current or {}).get("refused_in_progress_at"))
        if refused_start is not None:
            # Its in_progress reached us but HUD refused it: the job did start.
            execution = max(0.0, now - refused_start)
            return Plan(
                "",
                COMPLETED,
                None,
                execution,
                {
                    "in_progress_at": repr(refused_start),
                    "completed_at": repr(now),
                    "execution_time": repr(execution),
                },
            )
        raise Rejected(f"{where}: completed callback skips in_progress")
    raise Rejected(f"{where}: workflow.status must be in_progress or completed, not {status!r}")


class CrcrState:
    """The Redis side of the state machine, rate limit and sweeper."""

    def __init__(self, client: redis.Redis, ttl: int = CRCR_STATUS_TTL) -> None:
        self.client = client
        self.ttl = ttl
        self._commit = client.register_script(_COMMIT)
        self._rate = client.register_script(_RATE)
        self._claim = client.register_script(_CLAIM_CHECK_RUN)
        self._run_start = client.register_script(_RUN_START)

    def first_to_start(self, key: JobKey) -> bool:
        """Whether `key` is its run's first job to start (it alone reports queue_time)."""
        try:
            won = self._run_start(keys=[key.run_start_key], args=[key.redis_key, self.ttl])
        except redis.RedisError as exc:
            raise StateUnavailable(f"run start of {key.redis_key}: {exc}") from exc
        return bool(won)

    def note_refused_start(self, key: JobKey, now: float) -> None:
        """HUD refused this job's in_progress: keep when it started, and no state."""
        try:
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(key.redis_key, "refused_in_progress_at", repr(now))
            pipe.expire(key.redis_key, self.ttl)
            pipe.execute()
        except redis.RedisError as exc:
            raise StateUnavailable(f"state of {key.redis_key}: {exc}") from exc

    def demoted_since(self, repo: str) -> float | None:
        try:
            value = self.client.get(f"crcr:demotion:{repo}")
        except redis.RedisError as exc:
            raise StateUnavailable(f"demotion of {repo}: {exc}") from exc
        return _float(_text(value)) if value is not None else None

    def set_demotion(self, repo: str, open_pr: bool, now: float) -> float | None:
        """Record whether `repo`'s demotion PR is open (its first sighting is kept); returns
        when the demotion began, or None."""
        key = f"crcr:demotion:{repo}"
        try:
            if not open_pr:
                self.client.delete(key)
                return None
            self.client.set(key, repr(now), nx=True, ex=self.ttl)
            self.client.expire(key, self.ttl)  # an open PR keeps its first sighting
            value = self.client.get(key)
        except redis.RedisError as exc:
            raise StateUnavailable(f"demotion of {repo}: {exc}") from exc
        return _float(_text(value)) if value is not None else now

    def record_dispatch(self, delivery_id: str, repo: str, event_type: str, now: float) -> bool:
        """Mark `repo` as dispatched for `delivery_id`; False if it already was."""
        key = dispatch_key(delivery_id, repo)
        try:
            created = self.client.hsetnx(key, "dispatched_at", repr(now))
            self.client.hset(key, "event_type", event_type)
            self.client.expire(key, self.ttl)
        except redis.RedisError as exc:
            raise StateUnavailable(f"dispatch of {delivery_id} to {repo}: {exc}") from exc
        return bool(created)

    def dispatched(self, delivery_id: str, repo: str) -> bool:
        try:
            return bool(self.client.exists(dispatch_key(delivery_id, repo)))
        except redis.RedisError as exc:
            raise StateUnavailable(f"dispatch of {delivery_id} to {repo}: {exc}") from exc

    def read(self, key: JobKey) -> tuple[dict[str, str] | None, float | None]:
        """(job state hash or None, dispatched_at or None)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(key.redis_key)
            pipe.hget(key.dispatch_key, "dispatched_at")
            job, dispatched = pipe.execute()
        except redis.RedisError as exc:
            raise StateUnavailable(f"state of {key.redis_key}: {exc}") from exc
        decoded = {_text(k): _text(v) for k, v in job.items()} if job else None
        return decoded, (float(_text(dispatched)) if dispatched is not None else None)

    def commit(self, key: JobKey, change: Plan, now: float, extra: Mapping[str, str]) -> None:
        """Apply `change` if the job is still in `change.expected`; else Rejected."""
        pairs: list[str] = []
        for name, value in {**change.fields, **extra}.items():
            pairs += [name, value]
        try:
            answer = self._commit(
                keys=[key.redis_key, IN_PROGRESS_SET],
                args=[change.expected, change.state, repr(now), self.ttl, "", *pairs],
            )
        except redis.RedisError as exc:
            raise StateUnavailable(f"state of {key.redis_key}: {exc}") from exc
        if _text(answer) != "OK":
            raise Rejected(
                f"{key.redis_key}: job moved to {_text(answer)} meanwhile; duplicate callback"
            )

    def claim_check_run(
        self, redis_key: str, now: float, stale_after: float = CHECK_RUN_CLAIM_SECONDS
    ) -> CheckRunSlot:
        """Claim the creation of a job's check run, or say who has it (see the module doc)."""
        try:
            answer = self._claim(keys=[redis_key], args=[repr(now), stale_after])
        except redis.RedisError as exc:
            raise StateUnavailable(f"check run of {redis_key}: {exc}") from exc
        outcome, check_id, state, conclusion = (_text(v) for v in answer)
        return CheckRunSlot(outcome, check_id, state, conclusion)

    def set_check_run(self, redis_key: str, check_run_id: str) -> dict[str, str]:
        """Record a created check run, release the claim; returns the job as it is now."""
        try:
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(redis_key, "check_run_id", check_run_id)
            pipe.hdel(redis_key, "check_run_claim")
            pipe.hgetall(redis_key)
            job = pipe.execute()[-1]
        except redis.RedisError as exc:
            raise StateUnavailable(f"check run of {redis_key}: {exc}") from exc
        return {_text(k): _text(v) for k, v in job.items()}

    def release_check_run(self, redis_key: str) -> None:
        """Give a claim back after a failed create, so the next callback or retry creates."""
        try:
            self.client.hdel(redis_key, "check_run_claim")
        except redis.RedisError as exc:
            raise StateUnavailable(f"check run of {redis_key}: {exc}") from exc

    def mark_check_run_wanted(self, head_sha: str, repo: str) -> None:
        try:
            self.client.set(f"crcr:check_run_wanted:{head_sha}:{repo}", "1", ex=self.ttl)
        except redis.RedisError as exc:
            raise StateUnavailable(f"check-run flag of {repo}@{head_sha}: {exc}") from exc

    def check_run_wanted(self, head_sha: str, repo: str) -> bool:
        try:
            return bool(self.client.exists(f"crcr:check_run_wanted:{head_sha}:{repo}"))
        except redis.RedisError as exc:
            raise StateUnavailable(f"check-run flag of {repo}@{head_sha}: {exc}") from exc

    def remember_job(self, head_sha: str, repo: str, job: Mapping[str, Any]) -> None:
        """Keep a job's last state per (head sha, repo), keyed by its state key."""
        key = f"crcr:jobs:{head_sha}:{repo}"
        try:
            self.client.hset(key, str(job["key"]), json.dumps(dict(job)))
            self.client.expire(key, self.ttl)
        except redis.RedisError as exc:
            raise StateUnavailable(f"jobs of {repo}@{head_sha}: {exc}") from exc

    def jobs(self, head_sha: str, repo: str) -> list[dict[str, Any]]:
        try:
            values = self.client.hvals(f"crcr:jobs:{head_sha}:{repo}")
        except redis.RedisError as exc:
            raise StateUnavailable(f"jobs of {repo}@{head_sha}: {exc}") from exc
        return [json.loads(_text(v)) for v in values]

    def allow(self, repo: str, per_minute: int, now: float) -> bool:
        """Sliding-window rate limit per repository; raises StateUnavailable (fail closed)."""
        try:
            return bool(
                self._rate(
                    keys=[f"crcr:ratelimit:{repo}"],
                    args=[repr(now), RATE_WINDOW_SECONDS, per_minute, f"{now}:{uuid.uuid4().hex}"],
                )
            )
        except redis.RedisError as exc:
            raise StateUnavailable(f"rate limit of {repo}: {exc}") from exc

    def sweep(self, now: float, timeout: float = ZOMBIE_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
        """Mark jobs in progress for longer than `timeout` as timed out; returns their records
        (the job hash plus `key`) so the caller can report them."""
        try:
            stale = self.client.zrangebyscore(IN_PROGRESS_SET, "-inf", now - timeout)
        except redis.RedisError as exc:
            raise StateUnavailable(f"sweep: {exc}") from exc
        swept = []
        for raw in stale:
            redis_key = _text(raw)
            try:
                answer = self._commit(
                    keys=[redis_key, IN_PROGRESS_SET],
                    args=[
                        IN_PROGRESS,
                        TIMED_OUT,
                        repr(now),
                        self.ttl,
                        "",
                        "conclusion",
                        "timed_out",
                        "completed_at",
                        repr(now),
                    ],
                )
                if _text(answer) != "OK":
                    # Completed meanwhile, or expired: nothing to time out.
                    self.client.zrem(IN_PROGRESS_SET, redis_key)
                    continue
                job = {_text(k): _text(v) for k, v in self.client.hgetall(redis_key).items()}
            except redis.RedisError as exc:
                raise StateUnavailable(f"sweep {redis_key}: {exc}") from exc
            swept.append({"key": redis_key, **job})
        return swept


def callback_of(job: Mapping[str, str]) -> dict[str, Any] | None:
    """The last callback body stored with a job, if any."""
    try:
        value = json.loads(job.get("callback", ""))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
