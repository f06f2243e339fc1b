"""The distributed executor: Celery on Redis, the same pipeline steps as the embedded one.

    celery -A workflows.drivers.distributed worker        (or `spyre-ci worker`)

plan -> chord(one task per shard) -> finish. Delivery is at least once (`acks_late`,
`task_reject_on_worker_lost`): a worker killed mid-shard gets its shard redelivered. Every
side effect is keyed by run id and shard index (results in a Redis hash, History idempotent
by run, exports idempotent by key), so a redelivered task never duplicates a result.

A running shard holds a lease (a Redis key holding its owner's token, `lease_ttl_s`, renewed
by a heartbeat thread every third of it). Every live worker sweeps: a shard whose lease
expired without a recorded result is sent to the queue again (the same task id, chord and
retry count), so a worker killed outright (the broker would wait out its visibility timeout)
loses its shards for about one lease. Only the lease's owner records (compare-and-set in
Lua): a worker that was merely slow and lost its lease records nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import redis
from celery import Celery, chord, signals
from celery.exceptions import Ignore

from contracts.errors import Unavailable
from suites.model import Outcome
from workflows.run import pipeline
from workflows.runner.shard_runner import InfraFault
from workflows.settings import Settings
from workflows.stores import redis_clients
from workflows.stores.history import HistoryError, RedisHistory

log = logging.getLogger(__name__)
T = TypeVar("T")

# The longest a task may run; the broker's visibility timeout must exceed it, or Redis would
# hand a still-running shard to a second worker (its default is one hour).
TASK_TIME_LIMIT_S = 4 * 3600
VISIBILITY_TIMEOUT_S = TASK_TIME_LIMIT_S + 3600
_KEY = "spyre-ci:run:{run_id}:{what}"
_RESULT_TTL_S = 7 * 24 * 3600


def _redis_url() -> str:
    return Settings.from_env().redis_url or "redis://127.0.0.1:6379/0"


def make_app(url: str | None = None) -> Celery:
    url = url or _redis_url()
    celery_app = Celery("spyre_ci", broker=url, backend=url)
    celery_app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=TASK_TIME_LIMIT_S,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        result_backend_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        # A shard keeps running through a broker outage; its result is stored when Redis is
        # back, and acks_late redelivers it if the worker dies meanwhile.
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return celery_app


app = make_app()


def _store() -> redis.Redis:
    return redis_clients.shared(app.conf.broker_url)


def _history() -> RedisHistory:
    return RedisHistory(app.conf.broker_url)


def _key(run_id: str, what: str) -> str:
    return _KEY.format(run_id=run_id, what=what)


def _load_planned(run_id: str) -> pipeline.PlannedRun:
    body = _store().get(_key(run_id, "planned"))
    if body is None:
        raise pipeline.PipelineError(f"run {run_id}: no stored plan; re-submit the event")
    return pipeline.PlannedRun.from_json(json.loads(body))


# How long `plan` and `finish` wait for Redis to come back before they give up (their
# message stays unacknowledged meanwhile: acks_late).
OUTAGE_WAIT_S = 300.0


def through_outages(what: str, step: Callable[[], T], wait_s: float | None = None) -> T:
    """Run `step`, and again while Redis (History, the store, the broker) is away.

    A Celery task that fails is acknowledged as done: a `plan` whose History write met a
    Redis restart left its delivery without a run, a `finish` left its run `finishing`. Both
    steps may run again (planning reuses the run's out directory and stored plan; History
    learns a run once), so they wait out the outage instead, with backoff, for `wait_s`."""
    deadline = time.monotonic() + (OUTAGE_WAIT_S if wait_s is None else wait_s)
    delay = 0.5
    while True:
        try:
            return step()
        except (HistoryError, redis.RedisError, Unavailable) as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s: Redis is away (%s); trying again in %.1f s", what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


# Celery ships no type information: its task decorator is untyped for mypy --strict.
@app.task(name="spyre_ci.plan")  # type: ignore[untyped-decorator]
def plan_task(request_json: dict[str, Any]) -> str:
    """Stage 1-3, then fan out one shard task per shard with `finish` as the chord body."""
    request = pipeline.RunRequest.from_json(request_json)
    token = uuid.uuid4().hex  # one finish token across the retries of an outage
    return through_outages(f"plan of run {request.run_id}", lambda: _plan(request, token))


def _plan(request: pipeline.RunRequest, token: str) -> str:
    store = _store()
    body = store.get(_key(request.run_id, "planned"))
    if body is None:
        planned = pipeline.plan(request, _history())
        store.set(_key(request.run_id, "planned"), json.dumps(planned.to_json()), ex=_RESULT_TTL_S)
    else:  # a redelivered plan task reuses the stored plan: the same shards, the same keys
        planned = pipeline.PlannedRun.from_json(json.loads(body))
    # Open before anything is sent: a finish that ends first must find the entry to close.
    store.hsetnx(OPEN_RUNS, request.run_id, f"{time.time():.1f}")
    if not planned.shards:  # nothing to run (a docs-only push): finish here, not in a task
        _finish_once(request.run_id, token)
        return request.run_id
    shards = [shard_task.s(request.run_id, index) for index in range(len(planned.shards))]
    chord(shards)(finish_task.s(request.run_id))
    return request.run_id


@app.task(name="spyre_ci.shard", bind=True, max_retries=1)  # type: ignore[untyped-decorator]
def shard_task(self: Any, run_id: str, index: int) -> int:
    """Run one shard under its lease; its outcomes are recorded once, by the lease's owner.

    A shard whose test processes cannot start here (an `InfraFault`, after the shard
    runner's own retry) is sent back to the queue once, for another worker to try; a second
    fault is stored as such and the run ends as an infrastructure error. A delivery that
    finds the lease held by another live worker leaves the shard to it.
    """
    with _in_task():
        return _run_shard(self, run_id, index)


def _run_shard(self: Any, run_id: str, index: int) -> int:
    """A shard task's steps; each Redis step waits out an outage (`through_outages`): a task
    that fails is acknowledged, and a shard that ran but could not record would leave its
    chord without `finish` (and a redelivery would run its tests again)."""
    what = f"run {run_id} shard {index}"
    store = _store()
    started = through_outages(what, lambda: _begin(self, store, run_id, index))
    if started is None:
        return index
    planned, lease, kept = started
    todo = [vid for vid in planned.shards[index] if vid not in kept]
    with lease.held() as stop:
        shard = pipeline.execute_shard(
            planned.request, f"shard-{index}", todo, lease.keep, stop=stop
        )
    if lease.lost:
        log.warning(
            "run %s shard %d: lease taken over by %s; this worker records nothing",
            run_id,
            index,
            lease.holder(),
        )
        raise Ignore()
    cut_short = shard.fault is None and len(shard.outcomes) < len(todo)
    if _DRAINING.is_set() and cut_short:  # warm shutdown: another worker goes on from here
        through_outages(what, lambda: lease.hand_back("worker shutting down"))
        raise Ignore()
    if shard.fault is not None and self.request.retries < self.max_retries:
        log.warning(
            "run %s shard %d: %s; retrying on another worker", run_id, index, shard.fault.summary
        )
        through_outages(what, lambda: lease.release(_REQUEUED))
        raise self.retry(countdown=1)
    body = {
        "outcomes": [o.to_json() for o in (*kept.values(), *shard.outcomes)],
        "fault": shard.fault.to_json() if shard.fault else None,
        "owner": lease.token,
    }
    with lease.held():  # heartbeats while an outage holds the record back: the lease stays ours
        recorded = through_outages(what, lambda: lease.record(body))
        # Celery stores the result and counts the chord's part next, in the same Redis.
        through_outages(what, lambda: bool(store.ping()))
    if not recorded:
        log.warning(
            "run %s shard %d: lease lost before recording; this worker records nothing",
            run_id,
            index,
        )
        raise Ignore()
    return index


def _begin(
    task: Any, store: redis.Redis, run_id: str, index: int
) -> tuple[pipeline.PlannedRun, ShardLease, dict[str, Outcome]] | None:
    """The shard's plan, its lease (now ours) and what an earlier owner finished; None when
    the shard is recorded already. Raises Ignore when another live worker holds it."""
    if store.hexists(_key(run_id, "shards"), str(index)):
        return None  # already done by an earlier delivery of this task
    planned = _load_planned(run_id)
    lease = ShardLease(store, run_id, index, _owner_token(task.request), _task_options(task))
    holder = lease.acquire()
    if holder == _DONE:
        return None
    if holder is not None and _died_here(holder, task.request.hostname):
        # this worker's pool process that held it was killed (and the message redelivered
        # at once): no need to wait the lease out
        holder = None if lease.take_from(holder) else holder
    if holder is not None:
        log.info("run %s shard %d: leased by %s; leaving it to that worker", run_id, index, holder)
        raise Ignore()
    # An earlier owner's finished tests: those it kept in Redis, and those its test processes
    # wrote into the shard's folder when this worker shares it (the tests that ended between
    # the last keep and its death, which Redis never heard of). Neither runs again.
    on_disk = pipeline.recorded_outcomes(planned.request, f"shard-{index}")
    return planned, lease, {**on_disk, **lease.kept_outcomes()}


@app.task(name="spyre_ci.finish")  # type: ignore[untyped-decorator]
def finish_task(_indices: list[int], run_id: str) -> dict[str, Any]:
    """Stage 4, History and export, from every shard's stored outcomes: once per run.

    Sent by the run's chord, or by the sweep when the chord never fired (its last shard
    completed while Redis was away). A finish holds the run's `finishing` key (heartbeats)
    while it runs; another finish of the same run leaves it alone, and one that comes after
    returns the stored summary: reruns and expansions never run twice."""
    token = uuid.uuid4().hex
    return through_outages(f"finish of run {run_id}", lambda: _finish_once(run_id, token))


def _finish_once(run_id: str, token: str) -> dict[str, Any]:
    store = _store()
    finished = _key(run_id, "finished")
    stored = store.get(finished)
    if stored is not None:
        summary: dict[str, Any] = json.loads(stored)
        return summary
    hold = _Hold(store, _key(run_id, "finishing"), token)
    if not hold.take():
        log.info("run %s: another finish is running; leaving it to that one", run_id)
        raise Ignore()
    with hold.beating():
        summary = _finish(run_id)
        store.set(finished, json.dumps(summary, default=str), ex=_RESULT_TTL_S)
        store.hdel(OPEN_RUNS, run_id)
    hold.release()
    return summary


class _Hold:
    """A key held by one token, renewed while its holder works (a run's finish)."""

    def __init__(self, store: redis.Redis, key: str, token: str) -> None:
        self.store, self.key, self.token = store, key, token
        self.ttl_ms = int(lease_ttl_s() * 1000)

    def take(self) -> bool:
        if self.store.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return True
        return self.store.get(self.key) == self.token  # ours, from before an outage

    def release(self) -> None:
        with contextlib.suppress(redis.RedisError):
            if self.store.get(self.key) == self.token:
                self.store.delete(self.key)

    @contextlib.contextmanager
    def beating(self) -> Iterator[None]:
        ended = threading.Event()

        def beat() -> None:
            while not ended.wait(self.ttl_ms / 3000):
                with contextlib.suppress(redis.RedisError):
                    if self.store.get(self.key) in (self.token, None):
                        self.store.set(self.key, self.token, px=self.ttl_ms)

        thread = threading.Thread(target=beat, daemon=True, name=f"hold-{self.key}")
        thread.start()
        try:
            yield
        finally:
            ended.set()
            thread.join()


def _finish(run_id: str) -> dict[str, Any]:
    planned = _load_planned(run_id)
    stored = _store().hgetall(_key(run_id, "shards"))
    missing = [i for i in range(len(planned.shards)) if str(i) not in stored]
    if missing:
        raise pipeline.PipelineError(f"run {run_id}: shards {missing} have no stored results")
    outcomes: list[Outcome] = []
    faults: list[InfraFault] = []
    for body in map(json.loads, stored.values()):
        outcomes += [Outcome.from_json(o) for o in body["outcomes"]]
        if body.get("fault"):
            faults.append(InfraFault.from_json(body["fault"]))

    def execute(name: str, ids: Any) -> pipeline.ShardRun:
        return pipeline.execute_shard(planned.request, name, ids, parallel=1)

    finished = pipeline.finish(planned, outcomes, _history(), execute, faults)
    return finished.summary.to_json()


def submit(request: pipeline.RunRequest, broker_url: str | None = None) -> str:
    """Enqueue a run; returns the Celery id of its plan task.

    `broker_url` sends through that broker instead of the configured one (a fresh
    connection, so a process may talk to several brokers in turn).
    """
    args = (request.to_json(),)
    if broker_url is None:
        return str(plan_task.apply_async(args, priority=PLAN_PRIORITY).id)
    with app.connection_for_write(broker_url) as connection:
        sent = plan_task.apply_async(args, connection=connection, priority=PLAN_PRIORITY)
        return str(sent.id)


INTAKE_ALIVE = "spyre-ci:intake:alive:{consumer}"  # set while a consumer's loop turns
_ALIVE_TTL_S = 30
_BACKOFF_MAX_S = 30.0


def consume_intake(
    make_request: Any,
    stop: threading.Event,
    block_ms: int = 1000,
    *,
    url: str | None = None,
    send: Any = None,
    consumer: str | None = None,
) -> None:
    """Move deliveries from the relay's durable intake into Celery, acking only once sent.

    `consumer`: the name in the intake's consumer group (default `host-pid`). A worker with
    a fixed `--name` passes it, so when it is restarted it takes back at once the entries it
    had claimed and not yet sent (a new name would wait out the 10-minute reclaim).

    Survives Redis outages: a failed claim or ack is retried with a backoff up to 30 s (the
    client reconnects, a lost consumer group is made again, entries left unacknowledged are
    reclaimed), so deliveries that piled up meanwhile start once Redis is back. Each turn of
    the loop refreshes `INTAKE_ALIVE` (30 s): `intake_alive` reads it.
    """
    from relay.intake import QueueUnavailable, RedisIntake

    intake = RedisIntake.from_url(url or app.conf.broker_url)
    send = send or submit
    consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
    alive = INTAKE_ALIVE.format(consumer=consumer)
    delay = 0.0
    own_after: str | None = "0"  # after an outage: first this consumer's own pending entries
    while not stop.is_set():
        try:
            intake.client.set(alive, f"{time.time():.0f}", ex=_ALIVE_TTL_S)
            claimed = intake.claim_own(consumer, own_after) if own_after is not None else None
            if claimed is None:
                own_after = None
                claimed = intake.claim(consumer, block_ms=block_ms)
            else:
                own_after = claimed.entry_id  # each own pending entry once, then new ones
        except (QueueUnavailable, redis.RedisError) as exc:
            delay = min(_BACKOFF_MAX_S, max(0.5, delay * 2))
            log.warning("intake: Redis unavailable (%s); trying again in %.1f s", exc, delay)
            own_after = "0"  # a claim whose answer was lost is ours, pending: take it back
            stop.wait(delay)
            continue
        delay = 0.0
        if claimed is None:
            continue
        try:
            request = make_request(claimed.event)
            send(request)
        except Exception:  # noqa: BLE001 - left unacknowledged: reclaimed and retried later
            log.exception("delivery %s: not started; it stays queued", claimed.delivery_id)
            continue
        try:
            intake.ack(claimed)
        except (QueueUnavailable, redis.RedisError) as exc:
            # Sent but not acknowledged: it is reclaimed and sent again, onto the same run id
            # (runs are keyed by delivery), whose stored plan and shards make it a no-op.
            log.warning(
                "delivery %s: sent, ack failed (%s); it will be reclaimed", claimed.delivery_id, exc
            )
            continue
        log.info("delivery %s -> run %s", claimed.delivery_id, request.run_id)


def intake_alive(url: str) -> list[str]:
    """The consumers whose intake loop turned in the last 30 s."""
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)
    prefix = INTAKE_ALIVE.format(consumer="")
    return sorted(k[len(prefix) :] for k in client.scan_iter(match=prefix + "*"))


def resume(run_id: str) -> bool:
    """Fan out a stored run again: shards with stored results return at once, then finish.

    False when Redis holds no plan for the run (it was not started by this executor, or the
    state was lost with a Redis that keeps nothing on disk).
    """
    body = _store().get(_key(run_id, "planned"))
    if body is None:
        return False
    planned = pipeline.PlannedRun.from_json(json.loads(body))
    shards = [shard_task.s(run_id, index) for index in range(len(planned.shards))]
    chord(shards)(finish_task.s(run_id))
    return True


# -- shard leases ------------------------------------------------------------------------------
#
# Keys: the lease `spyre-ci:run:<run>:lease:<i>` (the owner's token, expiring), the outcomes
# the owner finished so far `spyre-ci:run:<run>:partial:<i>` (kept by a takeover), and one
# registry hash of every shard that was started and has no recorded result yet
# (`<run>:<i>` -> how to send its task again, its state and owner): what the sweeper reads.

LEASED = "spyre-ci:shards:leased"
OPEN_RUNS = "spyre-ci:runs:open"  # run id -> when its chord was sent (until its finish ends)
_SWEEP_LOCK = "spyre-ci:shards:sweep-lock"
WORKER_ALIVE = "spyre-ci:worker:alive:{node}"  # set while a worker's main process lives
_QUEUE = "celery"  # the default queue: its Redis list holds the messages no worker took yet
# Plans wait behind shards and finishes. kombu's Redis transport keeps one list per priority
# step (0, the default, is popped first; step N is `celery\x06\x16N`), so under a flood of
# deliveries a started run finishes, and a dead worker's shard is taken over, before the
# next runs are planned; otherwise each finish waits behind every plan queued before it.
PLAN_PRIORITY = 6
_PLAN_QUEUE = f"{_QUEUE}\x06\x16{PLAN_PRIORITY}"
_DONE = "done"  # no owner token is this: tokens hold slashes
_RUNNING, _RELEASED, _REQUEUED = "running", "released", "requeued"

# Acquire: a recorded shard is done; a lease held by another token names it; else it is ours.
_ACQUIRE_LUA = """
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return ARGV[6] end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return holder end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
return false
"""
# Renew: ours is extended; an expired one nobody took is taken back; another's is lost (0).
_RENEW_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if holder or redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
return 1
"""
# Take over the lease of a holder known dead, unless it changed meanwhile.
_TAKE_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
return 1
"""
# Keep one finished outcome, while the lease is ours.
_KEEP_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
"""
# Record once: not over another's lease; a shard already recorded stays as it is (-1).
_RECORD_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 0 then return -1 end
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('DEL', KEYS[1], KEYS[4])
redis.call('HDEL', KEYS[3], ARGV[4])
return 1
"""
# Give the lease up (warm shutdown, a fault's retry) and say what became of the shard.
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""
# Replace a registry entry only if it is still what the sweeper read.
_SWAP_LUA = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


def _hash(store: redis.Redis, key: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in store.hgetall(key).items()}


def lease_ttl_s() -> float:
    """How long a lease outlives its last heartbeat (`SPYRE_CI_LEASE_TTL`, default 30 s)."""
    return Settings.from_env().lease_ttl_s


def _lease_key(run_id: str, index: int) -> str:
    return _key(run_id, f"lease:{index}")


def _owner_token(request: Any) -> str:
    return f"{request.hostname or socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def _died_here(token: str, node: str | None) -> bool:
    """The token's holder was a pool process of this worker (same node) that no longer runs."""
    holder_node, _, rest = token.partition("/")
    pid = rest.partition("/")[0]
    if not node or holder_node != node or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _task_options(task: Any) -> dict[str, Any]:
    """What sends this task again as itself: the same id, chord membership and retry count
    (the chord counts its parts by task id and index, so a resent shard completes it)."""
    options = task.request.as_execution_options()
    keep = ("task_id", "root_id", "parent_id", "group_id", "group_index", "chord", "retries")
    return {name: options[name] for name in keep if options.get(name) is not None}


def _entry(state: str, owner: str, options: dict[str, Any], **extra: Any) -> str:
    return json.dumps(
        {"state": state, "owner": owner, "since": round(time.time(), 1), "task": options, **extra}
    )


class ShardLease:
    """One delivery's hold on a shard: acquire, heartbeat while it runs, record or give up."""

    def __init__(
        self, store: redis.Redis, run_id: str, index: int, token: str, options: dict[str, Any]
    ) -> None:
        self.store, self.run_id, self.index, self.token = store, run_id, index, token
        self.options = options
        self.ttl_ms = int(lease_ttl_s() * 1000)
        self.field = f"{run_id}:{index}"
        self.lost = False
        self._lease = _lease_key(run_id, index)
        self._shards = _key(run_id, "shards")
        self._partial = _key(run_id, f"partial:{index}")
        self._unkept: list[Outcome] = []  # finished, not yet stored (Redis was away)

    def _running_entry(self) -> str:
        return _entry(_RUNNING, self.token, self.options)

    def acquire(self) -> str | None:
        """None when the lease is now ours; `_DONE` when the shard is recorded; else the holder."""
        holder = self.store.eval(
            _ACQUIRE_LUA,
            3,
            self._lease,
            self._shards,
            LEASED,
            self.token,
            self.ttl_ms,
            str(self.index),
            self.field,
            self._running_entry(),
            _DONE,
        )
        return None if holder is None else str(holder)

    def take_from(self, dead: str) -> bool:
        """Take the lease of a holder known to be dead; False when it changed meanwhile."""
        taken = self.store.eval(
            _TAKE_LUA,
            2,
            self._lease,
            LEASED,
            dead,
            self.token,
            self.ttl_ms,
            self.field,
            self._running_entry(),
        )
        return bool(taken)

    def holder(self) -> str | None:
        try:
            return self.store.get(self._lease)  # type: ignore[return-value]
        except redis.RedisError:
            return None

    def renew(self) -> bool:
        """False once another worker holds the lease: this one must stop and record nothing."""
        renewed = self.store.eval(
            _RENEW_LUA,
            3,
            self._lease,
            self._shards,
            LEASED,
            self.token,
            self.ttl_ms,
            str(self.index),
            self.field,
            self._running_entry(),
        )
        return bool(renewed)

    @contextlib.contextmanager
    def held(self) -> Iterator[threading.Event]:
        """Heartbeats while the block runs; the event is set when the lease is lost or the
        worker shuts down (the shard runner then kills its test process's group)."""
        stop = threading.Event()
        ended = threading.Event()
        interval = self.ttl_ms / 3000

        def beat() -> None:
            while not ended.wait(interval):
                try:
                    if not self.renew():
                        self.lost = True
                        stop.set()
                        return
                except redis.RedisError as exc:  # the lease may expire; renew decides later
                    log.warning(
                        "run %s shard %d: heartbeat failed: %s", self.run_id, self.index, exc
                    )

        thread = threading.Thread(target=beat, daemon=True, name=f"lease-{self.field}")
        _ACTIVE.add(stop)
        if _DRAINING.is_set():
            stop.set()
        thread.start()
        try:
            yield stop
        finally:
            ended.set()
            _ACTIVE.discard(stop)
            thread.join()

    def kept_outcomes(self) -> dict[str, Outcome]:
        stored = _hash(self.store, self._partial)
        return {vid: Outcome.from_json(json.loads(body)) for vid, body in stored.items()}

    def keep(self, outcome: Outcome) -> None:
        """Store one finished outcome, so a takeover does not run that test again.

        What Redis refuses (an outage) waits here and goes with the next outcome: a takeover
        after the outage still skips every test this owner finished."""
        self._unkept.append(outcome)
        try:
            while self._unkept:
                kept = self._unkept[0]
                self.store.eval(
                    _KEEP_LUA,
                    2,
                    self._lease,
                    self._partial,
                    self.token,
                    kept.id,
                    json.dumps(kept.to_json()),
                    _RESULT_TTL_S,
                )
                self._unkept.pop(0)
        except redis.RedisError as exc:  # kept later; only a takeover's shortcut waits
            log.warning(
                "run %s shard %d: cannot keep %d outcome(s) yet: %s",
                self.run_id,
                self.index,
                len(self._unkept),
                exc,
            )

    def record(self, body: dict[str, Any]) -> bool:
        """Store the shard's result once; False when another worker holds the lease."""
        recorded = self.store.eval(
            _RECORD_LUA,
            4,
            self._lease,
            self._shards,
            LEASED,
            self._partial,
            self.token,
            str(self.index),
            json.dumps(body),
            self.field,
            _RESULT_TTL_S,
        )
        return int(recorded) != 0

    def release(self, state: str, **extra: Any) -> bool:
        return bool(
            self.store.eval(
                _RELEASE_LUA,
                2,
                self._lease,
                LEASED,
                self.token,
                self.field,
                _entry(state, "", self.options, **extra),
            )
        )

    def hand_back(self, why: str) -> None:
        """Give the shard up now and send it to the queue for another worker."""
        if not self.release(_RELEASED, why=why):
            return  # taken over meanwhile: the new owner has it
        log.warning("run %s shard %d: %s; handing the shard back", self.run_id, self.index, why)
        try:
            resend(self.store, self.field, self.options)
        except Exception:  # noqa: BLE001 - the released entry is swept by any live worker
            log.exception(
                "run %s shard %d: cannot send it again; the sweep will", self.run_id, self.index
            )


def resend(store: redis.Redis, field: str, options: dict[str, Any]) -> None:
    """Send a shard's task again as itself, and note in the registry that it is queued."""
    run_id, _, index = field.rpartition(":")
    shard_task.apply_async((run_id, int(index)), **options)
    store.hset(LEASED, field, _entry(_REQUEUED, "", options))


# A pool process runs one shard at a time; SIGTERM (sent by its worker's warm shutdown) stops
# it: its test process group is killed, what finished is kept, and the shard is handed back.
# The handler is installed for the task's span only: billiard sets its own after the pool
# process's initializer, and an idle pool process ends on SIGTERM as it always did.
_DRAINING = threading.Event()
_ACTIVE: set[threading.Event] = set()


@contextlib.contextmanager
def _in_task() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # a threads or solo pool
        yield
        return
    previous = signal.signal(signal.SIGTERM, _drain)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _drain(_signum: int, _frame: Any) -> None:
    _DRAINING.set()
    for stop in list(_ACTIVE):
        stop.set()


# -- the worker's own heartbeat and the sweep ---------------------------------------------------

_WATCH_STOP = threading.Event()
_WORKER_INFO: dict[str, Any] = {}


def describe_worker(**info: Any) -> None:
    """What this worker says about itself in its heartbeat (concurrency, intake)."""
    _WORKER_INFO.update(info)


def sweep(store: redis.Redis, *, now: float | None = None) -> list[str]:
    """Send again every started shard whose lease expired without a result; returns them.

    One worker sweeps at a time (a lock of one lease). A shard sent again but not taken for
    two leases, and no longer in the queue (it was reserved by a worker that died before
    starting it), is sent once more; duplicates are harmless: the lease admits one.
    """
    ttl = lease_ttl_s()
    if not store.set(_SWEEP_LOCK, "1", nx=True, px=int(ttl * 500)):
        return []
    now = time.time() if now is None else now
    queued: set[str] | None = None
    sent: list[str] = []
    for field, raw in _hash(store, LEASED).items():
        run_id, _, index = field.rpartition(":")
        if store.hexists(_key(run_id, "shards"), index) or not store.exists(
            _key(run_id, "planned")
        ):
            store.hdel(LEASED, field)  # recorded, or the run is gone
            continue
        if store.exists(_lease_key(run_id, int(index))):
            continue
        entry = json.loads(raw)
        if entry["state"] == _REQUEUED:
            if now - entry["since"] < 2 * ttl:
                continue
            if queued is None:
                queued = _queued_task_ids(store)
            if entry["task"].get("task_id") in queued:
                continue
        if not store.eval(_SWAP_LUA, 1, LEASED, field, raw, _entry(_REQUEUED, "", entry["task"])):
            continue  # changed since read: somebody acquired or sent it
        log.warning(
            "run %s shard %s: lease of %s expired without a result; sending it again",
            run_id,
            index,
            entry.get("owner") or "nobody",
        )
        shard_task.apply_async((run_id, int(index)), **entry["task"])
        sent.append(field)
    sent += _finish_forgotten(store, now, ttl)
    return sent


def _finish_forgotten(store: redis.Redis, now: float, ttl: float) -> list[str]:
    """Send `finish` for every open run whose shards are all recorded but whose chord did
    not fire for two leases (a chord's count is lost when Redis goes away as its last shard
    ends); returns `<run id>:finish` for each."""
    sent: list[str] = []
    for run_id, since in _hash(store, OPEN_RUNS).items():
        if now - float(since) < 2 * ttl or store.exists(_key(run_id, "finishing")):
            continue
        planned = store.get(_key(run_id, "planned"))
        if planned is None or store.exists(_key(run_id, "finished")):
            store.hdel(OPEN_RUNS, run_id)
            continue
        shards = len(json.loads(planned).get("shards") or ())
        if store.hlen(_key(run_id, "shards")) < shards:
            continue
        log.warning("run %s: every shard is recorded but it was not finished; finishing", run_id)
        finish_task.apply_async(([], run_id))
        store.hset(OPEN_RUNS, run_id, f"{now:.1f}")  # not again before two more leases
        sent.append(f"{run_id}:finish")
    return sent


def _queued_task_ids(store: redis.Redis) -> set[str]:
    ids = set()
    for raw in store.lrange(_QUEUE, 0, -1):
        try:
            ids.add(json.loads(raw)["headers"]["id"])
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def _watch(node: str) -> None:
    """The main process's thread: its heartbeat every third of a lease, a sweep every half."""
    store = _store()
    ttl = lease_ttl_s()
    alive = WORKER_ALIVE.format(node=node)
    started = time.time()
    next_sweep = 0.0
    while not _WATCH_STOP.is_set():
        try:
            info = {"node": node, "pid": os.getpid(), "started": round(started), **_WORKER_INFO}
            store.set(alive, json.dumps(info), px=int(ttl * 1000))
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + ttl / 2
                sweep(store)
        except Exception:  # noqa: BLE001 - the watch outlives any outage
            log.exception("worker watch: heartbeat or sweep failed; trying again")
        _WATCH_STOP.wait(ttl / 3)
    with contextlib.suppress(redis.RedisError):
        store.delete(alive)


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _start_watch(sender: Any = None, **_: Any) -> None:
    node = getattr(sender, "hostname", None) or socket.gethostname()
    _WATCH_STOP.clear()
    threading.Thread(target=_watch, args=(node,), daemon=True, name="worker-watch").start()


@signals.worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _shutting_down(**_: Any) -> None:
    """Warm shutdown: every pool process stops its shard and hands it back at once."""
    import billiard.process

    _WATCH_STOP.set()
    for child in billiard.process.active_children():
        if child.pid:
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGTERM)


# -- what `spyre-ci worker status` shows --------------------------------------------------------


_SHOWN = {_RUNNING: "expired", _RELEASED: "handed back", _REQUEUED: "queued again"}


def status(url: str) -> dict[str, Any]:
    """Intake consumers, live workers, leased and waiting shards, queue length; raises
    `redis.RedisError` when Redis cannot be reached."""
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)
    client.ping()
    workers = []
    for key in sorted(client.scan_iter(match=WORKER_ALIVE.format(node="*"))):
        raw = client.get(key)
        if raw is not None:
            workers.append(json.loads(str(raw)))
    shards = []
    for field, raw in sorted(_hash(client, LEASED).items()):
        run_id, _, index = field.rpartition(":")
        entry = json.loads(raw)
        lease = _lease_key(run_id, int(index))
        holder, ttl_ms = client.get(lease), client.pttl(lease)
        shards.append(
            {
                "run": run_id,
                "shard": int(index),
                # a running entry without its lease: its worker is gone, the sweep sends it again
                "state": "leased" if holder else _SHOWN.get(entry["state"], entry["state"]),
                "owner": holder or entry.get("owner") or "",
                "lease_left_s": round(int(ttl_ms) / 1000, 1) if holder is not None else None,
                "since": entry.get("since"),
            }
        )
    plans = int(client.llen(_PLAN_QUEUE))
    return {
        "intake": intake_alive(url),
        "workers": workers,
        "shards": shards,
        "queue": int(client.llen(_QUEUE)) + plans,
        "queued_plans": plans,
        "lease_ttl_s": lease_ttl_s(),
    }
