"""A run's finish: stage 4, History and export from its verdict shards' stored outcomes, once;
then, when its holdout ran after the verdict (`phases`), the holdout's finish, once.

A finish holds the run's `finishing` key (`holdout-finishing` for the holdout's) with
heartbeats while it runs; another finish of the same run leaves it alone, and one that comes
after returns what was stored: reruns and expansions never run twice. The run stays open (the
sweep's `OPEN_RUNS`) until its last finish.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import redis
from celery.exceptions import Ignore

from suites.model import Outcome
from workflows.run import finishing, pipeline, run_model
from workflows.runner.shard_runner import InfraFault, ShardRun

from . import celery_app
from .keys import OPEN_RUNS, RESULT_TTL_S, key

log = logging.getLogger(__name__)

# What a finish returns and stores: the summary; the holdout's result or None (not stored).
Finished = TypeVar("Finished", dict[str, Any], dict[str, Any] | None)


def finish_once(run_id: str, token: str) -> dict[str, Any]:
    """The run's finish on its verdict shards, once; the run stays open when its holdout
    runs after it."""

    def work() -> tuple[dict[str, Any], bool]:
        summary, holdout_after = finish(run_id)
        return summary, not holdout_after

    return _once(run_id, token, "", work)


def holdout_once(run_id: str, token: str) -> dict[str, Any] | None:
    """The holdout's finish, once; None while a shard of it has no stored result yet (a
    duplicate shard task let the chord fire early: the shard's own task finishes it)."""

    def work() -> tuple[dict[str, Any] | None, bool]:
        result = finish_holdout(run_id)
        return result, result is not None

    return _once(run_id, token, "holdout-", work)


def _once(
    run_id: str,
    token: str,
    prefix: str,
    work: Callable[[], tuple[Finished, bool]],
) -> Finished:
    """`work` once per run under the run's `<prefix>finishing` key (heartbeats); what it
    returns is stored under `<prefix>finished` and returned to every later call. `work` says
    whether the run is done with (closed in the sweep's open runs)."""
    store = celery_app.store()
    finished = key(run_id, f"{prefix}finished")
    stored = store.get(finished)
    if stored is not None:
        body: Finished = json.loads(stored)  # what `work` returned, stored below
        return body
    hold = _Hold(
        store, key(run_id, f"{prefix}finishing"), token, celery_app.context().settings.lease_ttl_s
    )
    if not hold.take():
        log.info("run %s: another %sfinish is running; leaving it to that one", run_id, prefix)
        raise Ignore()
    with hold.beating():
        result, closes = work()
        if result is not None:
            store.set(finished, json.dumps(result, default=str), ex=RESULT_TTL_S)
        if closes:
            store.hdel(OPEN_RUNS, run_id)
    hold.release()
    return result


class _Hold:
    """A key held by one token, renewed while its holder works (a run's finish)."""

    def __init__(self, store: redis.Redis, key: str, token: str, ttl_s: float) -> None:
        self.store, self.key, self.token = store, key, token
        self.ttl_ms = int(ttl_s * 1000)

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


def finish(run_id: str) -> tuple[dict[str, Any], bool]:
    """The run finished on its verdict shards; and whether its holdout runs after it."""
    planned, verdict = celery_app.load_phased(run_id)
    outcomes, faults = _stored(run_id, range(verdict))
    holdout_after = verdict < len(planned.shards)
    finished = finishing.finish(
        planned, outcomes, celery_app.context(), _executor(planned), faults,
        holdout_after=holdout_after,
    )  # fmt: skip
    # A verdict that is an infrastructure error measures nothing: its holdout never runs.
    return finished.summary.to_json(), holdout_after and not finished.faults


def finish_holdout(run_id: str) -> dict[str, Any] | None:
    planned, verdict = celery_app.load_phased(run_id)
    try:
        outcomes, faults = _stored(run_id, range(verdict, len(planned.shards)))
    except run_model.PipelineError as exc:
        log.info("%s; its own shard task finishes the holdout", exc)
        return None
    return finishing.finish_holdout(
        planned, outcomes, celery_app.context(), _executor(planned), faults
    )


def _stored(run_id: str, shards: range) -> tuple[list[Outcome], list[InfraFault]]:
    """The stored outcomes and faults of `shards`; an error names those with none."""
    stored = celery_app.store().hgetall(key(run_id, "shards"))
    missing = [i for i in shards if str(i) not in stored]
    if missing:
        raise run_model.PipelineError(f"run {run_id}: shards {missing} have no stored results")
    outcomes: list[Outcome] = []
    faults: list[InfraFault] = []
    for body in (json.loads(stored[str(i)]) for i in shards):
        outcomes += [Outcome.from_json(o) for o in body["outcomes"]]
        if body.get("fault"):
            faults.append(InfraFault.from_json(body["fault"]))
    return outcomes, faults


def _executor(planned: run_model.PlannedRun) -> finishing.ShardExecutor:
    """Reruns, expansions and base runs, one at a time, with this worker's settings."""
    settings = celery_app.context().settings

    def execute(name: str, ids: Any) -> ShardRun:
        return pipeline.execute_shard(planned.request, name, ids, settings=settings, parallel=1)

    return execute
