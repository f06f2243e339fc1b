"""The distributed executor: Celery on Redis, the same pipeline steps as the embedded one.

    celery -A workflows.distributed worker        (or `spyre-ci worker`)

plan -> chord(one task per shard) -> finish. Delivery is at least once (`acks_late`,
`task_reject_on_worker_lost`): a worker killed mid-shard gets its shard redelivered. Every
side effect is keyed by run id and shard index (results in a Redis hash, History idempotent
by run, exports idempotent by key), so a redelivered task never duplicates a result.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

import redis
from celery import Celery, chord

from suites.model import Outcome
from workflows import pipeline
from workflows.history import RedisHistory
from workflows.settings import Settings
from workflows.shard_runner import InfraFault

log = logging.getLogger(__name__)

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
    return redis.Redis.from_url(app.conf.broker_url, decode_responses=True)


def _history() -> RedisHistory:
    return RedisHistory(app.conf.broker_url)


def _key(run_id: str, what: str) -> str:
    return _KEY.format(run_id=run_id, what=what)


def _load_planned(run_id: str) -> pipeline.PlannedRun:
    body = _store().get(_key(run_id, "planned"))
    if body is None:
        raise pipeline.PipelineError(f"run {run_id}: no stored plan; re-submit the event")
    return pipeline.PlannedRun.from_json(json.loads(body))


# Celery ships no type information: its task decorator is untyped for mypy --strict.
@app.task(name="spyre_ci.plan")  # type: ignore[untyped-decorator]
def plan_task(request_json: dict[str, Any]) -> str:
    """Stage 1-3, then fan out one shard task per shard with `finish` as the chord body."""
    request = pipeline.RunRequest.from_json(request_json)
    store = _store()
    body = store.get(_key(request.run_id, "planned"))
    if body is None:
        planned = pipeline.plan(request, _history())
        store.set(_key(request.run_id, "planned"), json.dumps(planned.to_json()), ex=_RESULT_TTL_S)
    else:  # a redelivered plan task reuses the stored plan: the same shards, the same keys
        planned = pipeline.PlannedRun.from_json(json.loads(body))
    shards = [shard_task.s(request.run_id, index) for index in range(len(planned.shards))]
    chord(shards)(finish_task.s(request.run_id))
    return request.run_id


@app.task(name="spyre_ci.shard", bind=True, max_retries=1)  # type: ignore[untyped-decorator]
def shard_task(self: Any, run_id: str, index: int) -> int:
    """Run one shard; its outcomes land in one hash field, so a rerun overwrites, never adds.

    A shard whose test processes cannot start here (an `InfraFault`, after the shard
    runner's own retry) is sent back to the queue once, for another worker to try; a second
    fault is stored as such and the run ends as an infrastructure error.
    """
    store = _store()
    if store.hexists(_key(run_id, "shards"), str(index)):
        return index  # already done by an earlier delivery of this task
    planned = _load_planned(run_id)
    shard = pipeline.execute_shard(planned.request, f"shard-{index}", planned.shards[index])
    if shard.fault is not None and self.request.retries < self.max_retries:
        log.warning(
            "run %s shard %d: %s; retrying on another worker", run_id, index, shard.fault.summary
        )
        raise self.retry(countdown=1)
    body = {
        "outcomes": [o.to_json() for o in shard.outcomes],
        "fault": shard.fault.to_json() if shard.fault else None,
    }
    store.hset(_key(run_id, "shards"), str(index), json.dumps(body))
    store.expire(_key(run_id, "shards"), _RESULT_TTL_S)
    return index


@app.task(name="spyre_ci.finish")  # type: ignore[untyped-decorator]
def finish_task(_indices: list[int], run_id: str) -> dict[str, Any]:
    """Stage 4, History and export, from every shard's stored outcomes."""
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
    return finished.summary


def submit(request: pipeline.RunRequest, broker_url: str | None = None) -> str:
    """Enqueue a run; returns the Celery id of its plan task.

    `broker_url` sends through that broker instead of the configured one (a fresh
    connection, so a process may talk to several brokers in turn).
    """
    if broker_url is None:
        return str(plan_task.delay(request.to_json()).id)
    with app.connection_for_write(broker_url) as connection:
        return str(plan_task.apply_async((request.to_json(),), connection=connection).id)


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
) -> None:
    """Move deliveries from the relay's durable intake into Celery, acking only once sent.

    Survives Redis outages: a failed claim or ack is retried with a backoff up to 30 s (the
    client reconnects, a lost consumer group is made again, entries left unacknowledged are
    reclaimed), so deliveries that piled up meanwhile start once Redis is back. Each turn of
    the loop refreshes `INTAKE_ALIVE` (30 s): `intake_alive` reads it.
    """
    from relay.intake import QueueUnavailable, RedisIntake

    intake = RedisIntake.from_url(url or app.conf.broker_url)
    send = send or submit
    consumer = f"{socket.gethostname()}-{os.getpid()}"
    alive = INTAKE_ALIVE.format(consumer=consumer)
    delay = 0.0
    while not stop.is_set():
        try:
            intake.client.set(alive, f"{time.time():.0f}", ex=_ALIVE_TTL_S)
            claimed = intake.claim(consumer, block_ms=block_ms)
        except (QueueUnavailable, redis.RedisError) as exc:
            delay = min(_BACKOFF_MAX_S, max(0.5, delay * 2))
            log.warning("intake: Redis unavailable (%s); trying again in %.1f s", exc, delay)
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
