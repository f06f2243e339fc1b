"""A worker's main process: its heartbeat, and the sweep that sends lost shards and finishes again.

Every live worker sweeps (one at a time, under a lock of one lease): a shard whose lease
expired without a recorded result is sent to the queue again (the same task id, chord and
retry count), so a worker killed outright (the broker would wait out its visibility timeout)
loses its shards for about one lease; a run whose chord never fired is finished.
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
from typing import Any

import redis
from celery import signals

from selector import SelectorError
from workflows.run.run_model import PipelineError

from . import celery_app
from .keys import (
    LEASED,
    OPEN_RUNS,
    QUEUE,
    REQUEUED,
    SWEEP_LOCK,
    WORKER_ALIVE,
    entry,
    hash_of,
    key,
    lease_key,
)
from .tasks import finish_task, shard_task

log = logging.getLogger(__name__)

# Replace a registry entry only if it is still what the sweeper read.
SWAP_LUA = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""

_WATCH_STOP = threading.Event()
_WORKER_INFO: dict[str, Any] = {}


def describe_worker(**info: Any) -> None:
    """What this worker says about itself in its heartbeat (concurrency, intake)."""
    _WORKER_INFO.update(info)


def sweep(store: redis.Redis, ttl: float, *, now: float | None = None) -> list[str]:
    """Send again every started shard whose lease expired without a result; returns them.

    One worker sweeps at a time (a lock of one lease). A shard sent again but not taken for
    two leases, and no longer in the queue (it was reserved by a worker that died before
    starting it), is sent once more; duplicates are harmless: the lease admits one. `ttl`:
    the workers' lease in seconds (`Settings.lease_ttl_s`).
    """
    if not store.set(SWEEP_LOCK, "1", nx=True, px=int(ttl * 500)):
        return []
    now = time.time() if now is None else now
    queued: set[str] | None = None
    sent: list[str] = []
    for field, raw in hash_of(store, LEASED).items():
        run_id, _, index = field.rpartition(":")
        if store.hexists(key(run_id, "shards"), index) or not store.exists(key(run_id, "planned")):
            store.hdel(LEASED, field)  # recorded, or the run is gone
            continue
        if store.exists(lease_key(run_id, int(index))):
            continue
        registered = json.loads(raw)
        if registered["state"] == REQUEUED:
            if now - registered["since"] < 2 * ttl:
                continue
            if queued is None:
                queued = _queued_task_ids(store)
            if registered["task"].get("task_id") in queued:
                continue
        if not store.eval(SWAP_LUA, 1, LEASED, field, raw, entry(REQUEUED, "", registered["task"])):
            continue  # changed since read: somebody acquired or sent it
        log.warning(
            "run %s shard %s: lease of %s expired without a result; sending it again",
            run_id,
            index,
            registered.get("owner") or "nobody",
        )
        shard_task.apply_async((run_id, int(index)), **registered["task"])
        sent.append(field)
    sent += _finish_forgotten(store, now, ttl)
    return sent


def _finish_forgotten(store: redis.Redis, now: float, ttl: float) -> list[str]:
    """Send `finish` for every open run whose verdict shards are all recorded but whose chord
    did not fire for two leases (a chord's count is lost when Redis goes away as its last
    shard ends), and again for a finished run whose holdout (`phases`) has no shard running
    and no finish: that finish sends the holdout's shards again, and those recorded return at
    once. Returns `<run id>:finish` for each."""
    sent: list[str] = []
    for run_id, since in hash_of(store, OPEN_RUNS).items():
        if now - float(since) < 2 * ttl or any(
            store.exists(key(run_id, k)) for k in ("finishing", "holdout-finishing")
        ):
            continue
        if not store.exists(key(run_id, "planned")) or store.exists(
            key(run_id, "holdout-finished")
        ):
            store.hdel(OPEN_RUNS, run_id)
            continue
        try:
            planned, verdict = celery_app.load_phased(run_id, store)
        except (ValueError, KeyError, TypeError, SelectorError, PipelineError) as exc:
            log.warning(
                "run %s: its stored plan cannot be read (%s); not finishing it", run_id, exc
            )
            store.hdel(OPEN_RUNS, run_id)  # `finish` could not read it either
            continue
        recorded = set(store.hkeys(key(run_id, "shards")))
        if store.exists(key(run_id, "finished")):
            holdout = range(verdict, len(planned.shards))
            if not holdout:
                store.hdel(OPEN_RUNS, run_id)
                continue
            if any(store.exists(lease_key(run_id, i)) for i in holdout if str(i) not in recorded):
                continue  # the holdout is running
            log.warning("run %s: its holdout was not finished; sending it again", run_id)
        elif any(str(i) not in recorded for i in range(verdict)):
            continue
        else:
            log.warning("run %s: its verdict shards are recorded but it was not finished", run_id)
        finish_task.apply_async(([], run_id))
        store.hset(OPEN_RUNS, run_id, f"{now:.1f}")  # not again before two more leases
        sent.append(f"{run_id}:finish")
    return sent


def _queued_task_ids(store: redis.Redis) -> set[str]:
    ids = set()
    for raw in store.lrange(QUEUE, 0, -1):
        try:
            ids.add(json.loads(raw)["headers"]["id"])
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def _watch(node: str) -> None:
    """The main process's thread: its heartbeat every third of a lease, a sweep every half."""
    store = celery_app.store()
    ttl = celery_app.context().settings.lease_ttl_s
    alive = WORKER_ALIVE.format(node=node)
    started = time.time()
    next_sweep = 0.0
    while not _WATCH_STOP.is_set():
        try:
            info = {"node": node, "pid": os.getpid(), "started": round(started), **_WORKER_INFO}
            store.set(alive, json.dumps(info), px=int(ttl * 1000))
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + ttl / 2
                sweep(store, ttl)
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
