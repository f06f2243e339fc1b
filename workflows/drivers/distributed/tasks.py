"""The Celery tasks a run is made of, and how a run is sent to them.

plan -> chord(one shard task per verdict shard) -> finish, then, when the run has a holdout,
chord(one shard task per holdout shard) -> holdout (`phases`: the verdict first). Celery
routes by the names given here (`spyre_ci.plan`, `spyre_ci.shard`, `spyre_ci.finish`,
`spyre_ci.holdout`): a worker and a sender of any version must agree on them. Each task's body
is a step of its own module (`shard`, `finish`).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery import chord

from workflows.drivers import pending_check
from workflows.run import pipeline, run_model

from . import celery_app, finish, phases, shard
from .celery_app import app
from .drain import in_task
from .keys import OPEN_RUNS, PLAN_PRIORITY, RESULT_TTL_S, key
from .outages import through_outages

_log = logging.getLogger("spyre_ci.pending")


# Celery ships no type information: its task decorator is untyped for mypy --strict.
@app.task(name="spyre_ci.plan")  # type: ignore[untyped-decorator]
def plan_task(request_json: dict[str, Any]) -> str:
    """Stage 1-3, then fan out one shard task per shard with `finish` as the chord body."""
    request = run_model.RunRequest.from_json(request_json)
    token = uuid.uuid4().hex  # one finish token across the retries of an outage
    return through_outages(f"plan of run {request.run_id}", lambda: plan(request, token))


def plan(request: run_model.RunRequest, token: str) -> str:
    store = celery_app.store()
    body = store.get(key(request.run_id, "planned"))
    if body is None:
        context = celery_app.context()
        pipeline.warm_up(request, context.settings)  # the zygotes' imports overlap the plan
        planned, verdict = phases.verdict_first(pipeline.plan(request, context))
        store.set(key(request.run_id, "planned"), phases.dumps(planned, verdict), ex=RESULT_TTL_S)
    else:  # a redelivered plan task reuses the stored plan: the same shards, the same keys
        planned, verdict = phases.loads(body)
    # Open before anything is sent: a finish that ends first must find the entry to close.
    store.hsetnx(OPEN_RUNS, request.run_id, f"{time.time():.1f}")
    if not planned.shards:  # nothing to run (a docs-only push): finish here, not in a task
        finish.finish_once(request.run_id, token)
        return request.run_id
    _fan_out(request.run_id, range(verdict))
    return request.run_id


@app.task(name="spyre_ci.shard", bind=True, max_retries=1)  # type: ignore[untyped-decorator]
def shard_task(self: Any, run_id: str, index: int) -> int:
    """Run one shard under its lease; its outcomes are recorded once, by the lease's owner.

    A shard whose test processes cannot start here (an `InfraFault`, after the shard
    runner's own retry) is sent back to the queue once, for another worker to try; a second
    fault is stored as such and the run ends as an infrastructure error. A delivery that
    finds the lease held by another live worker leaves the shard to it.
    """
    with in_task():
        return shard.run(self, run_id, index)


@app.task(name="spyre_ci.finish")  # type: ignore[untyped-decorator]
def finish_task(_indices: list[int], run_id: str) -> dict[str, Any]:
    """Stage 4, History and export, from every shard's stored outcomes: once per run.

    Sent by the run's chord, or by the sweep when the chord never fired (its last shard
    completed while Redis was away)."""
    token = uuid.uuid4().hex
    summary = through_outages(f"finish of run {run_id}", lambda: finish.finish_once(run_id, token))
    planned, verdict = celery_app.load_phased(run_id)
    if verdict < len(planned.shards) and not holdout_skipped(summary):
        _fan_out(run_id, range(verdict, len(planned.shards)), holdout_task)
    try:
        request = celery_app.load_planned(run_id).request
        if pending_check.waiting_after(request, celery_app.context().settings):
            pending_check_task.delay(run_id)
    except Exception as exc:  # noqa: BLE001 - the run is finished; the next nightly checks
        _log.warning("run %s: deferred changes not checked after it: %s", run_id, exc)
    return summary


@app.task(name="spyre_ci.holdout")  # type: ignore[untyped-decorator]
def holdout_task(_indices: list[int], run_id: str) -> dict[str, Any] | None:
    """The holdout of a run whose verdict went out first: judged, measured and learned once
    (`finishing.finish_holdout`). Sent by the holdout's chord, or by the sweep."""
    token = uuid.uuid4().hex
    return through_outages(f"holdout of run {run_id}", lambda: finish.holdout_once(run_id, token))


@app.task(name="spyre_ci.pending_check")  # type: ignore[untyped-decorator]
def pending_check_task(run_id: str) -> int | None:
    """After a scheduled run: judge the deferred changes on the builds that now hold them
    (`spyre-ci pending check`), as their own task so the run's finish never waits on it."""
    with in_task():
        request = celery_app.load_planned(run_id).request
        return pending_check.after_scheduled(request, celery_app.context().settings, _log.info)


def holdout_skipped(summary: dict[str, Any]) -> bool:
    """Whether a finished run's holdout is not run: its verdict was an infrastructure error
    (the finish closed the run)."""
    return bool(summary.get("infrastructure"))  # the summary's JSON: its results' keys


def _fan_out(run_id: str, shards: range, then: Any = None) -> None:
    """One shard task per index of `shards`, with `then` (the finish) as the chord's body."""
    body = finish_task if then is None else then
    chord([shard_task.s(run_id, index) for index in shards])(body.s(run_id))


def submit(request: run_model.RunRequest, broker_url: str | None = None) -> str:
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


def resume(run_id: str) -> bool:
    """Fan out a stored run again: shards with stored results return at once, then finish.

    False when Redis holds no plan for the run (it was not started by this executor, or the
    state was lost with a Redis that keeps nothing on disk).
    """
    body = celery_app.store().get(key(run_id, "planned"))
    if body is None:
        return False
    _planned, verdict = phases.loads(body)
    _fan_out(run_id, range(verdict))  # the finish sends the holdout's shards, as at first
    return True
