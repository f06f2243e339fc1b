"""A shard task's steps: take the shard's lease, run what is left of it, record it once.

A shard whose test processes cannot start here (an `InfraFault`, after the shard runner's own
retry) is sent back to the queue once, for another worker to try; a warm shutdown hands the
shard back with what finished kept; a worker that lost its lease records nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

import redis
from celery.exceptions import Ignore

from suites.model import Outcome
from workflows.run import pipeline, run_folder, run_model
from workflows.run.layout import shard_name

from . import celery_app
from .drain import DRAINING
from .keys import DONE, LEASED, RELEASED, REQUEUED, entry, key
from .lease import ShardLease
from .outages import through_outages

log = logging.getLogger(__name__)


def run(task: Any, run_id: str, index: int) -> int:
    """A shard task's steps; each Redis step waits out an outage (`through_outages`): a task
    that fails is acknowledged, and a shard that ran but could not record would leave its
    chord without `finish` (and a redelivery would run its tests again)."""
    what = f"run {run_id} shard {index}"
    store = celery_app.store()
    started = through_outages(what, lambda: begin(task, store, run_id, index))
    if started is None:
        return index
    planned, lease, kept = started
    todo = [vid for vid in planned.shards[index] if vid not in kept]
    with lease.held() as stop:
        shard = pipeline.execute_shard(
            planned.request,
            shard_name(index),
            todo,
            lease.keep,
            settings=celery_app.context().settings,  # this worker's: its builds, its zygote
            stop=stop,
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
    if DRAINING.is_set() and cut_short:  # warm shutdown: another worker goes on from here
        through_outages(what, lambda: hand_back(task, lease, "worker shutting down"))
        raise Ignore()
    if shard.fault is not None and task.request.retries < task.max_retries:
        log.warning(
            "run %s shard %d: %s; retrying on another worker", run_id, index, shard.fault.summary
        )
        through_outages(what, lambda: lease.release(REQUEUED))
        raise task.retry(countdown=1)
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


def begin(
    task: Any, store: redis.Redis, run_id: str, index: int
) -> tuple[run_model.PlannedRun, ShardLease, dict[str, Outcome]] | None:
    """The shard's plan, its lease (now ours) and what an earlier owner finished; None when
    the shard is recorded already. Raises Ignore when another live worker holds it."""
    if store.hexists(key(run_id, "shards"), str(index)):
        return None  # already done by an earlier delivery of this task
    planned = celery_app.load_planned(run_id)
    ttl_s = celery_app.context().settings.lease_ttl_s
    lease = ShardLease(store, run_id, index, owner_token(task.request), task_options(task), ttl_s)
    holder = lease.acquire()
    if holder == DONE:
        return None
    if holder is not None and died_here(holder, task.request.hostname):
        # this worker's pool process that held it was killed (and the message redelivered
        # at once): no need to wait the lease out
        holder = None if lease.take_from(holder) else holder
    if holder is not None:
        log.info("run %s shard %d: leased by %s; leaving it to that worker", run_id, index, holder)
        raise Ignore()
    # An earlier owner's finished tests: those it kept in Redis, and those its test processes
    # wrote into the shard's folder when this worker shares it (the tests that ended between
    # the last keep and its death, which Redis never heard of). Neither runs again.
    on_disk = run_folder.recorded_outcomes(planned.request, shard_name(index))
    return planned, lease, {**on_disk, **lease.kept_outcomes()}


def hand_back(task: Any, lease: ShardLease, why: str) -> None:
    """Give the shard up now and send its task to the queue again, as itself, for another
    worker; the registry says it is queued."""
    if not lease.release(RELEASED, why=why):
        return  # taken over meanwhile: the new owner has it
    log.warning("run %s shard %d: %s; handing the shard back", lease.run_id, lease.index, why)
    try:
        task.apply_async((lease.run_id, lease.index), **lease.options)
        lease.store.hset(LEASED, lease.field, entry(REQUEUED, "", lease.options))
    except Exception:  # noqa: BLE001 - the released entry is swept by any live worker
        log.exception(
            "run %s shard %d: cannot send it again; the sweep will", lease.run_id, lease.index
        )


def owner_token(request: Any) -> str:
    return f"{request.hostname or socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def died_here(token: str, node: str | None) -> bool:
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


def task_options(task: Any) -> dict[str, Any]:
    """What sends this task again as itself: the same id, chord membership and retry count
    (the chord counts its parts by task id and index, so a resent shard completes it)."""
    options = task.request.as_execution_options()
    keep = ("task_id", "root_id", "parent_id", "group_id", "group_index", "chord", "retries")
    return {name: options[name] for name in keep if options.get(name) is not None}
