"""A run's finish: stage 4, History and export from every shard's stored outcomes, once.

A finish holds the run's `finishing` key (heartbeats) while it runs; another finish of the
same run leaves it alone, and one that comes after returns the stored summary: reruns and
expansions never run twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import redis
from celery.exceptions import Ignore

from suites.model import Outcome
from workflows.run import pipeline, run_model
from workflows.runner.shard_runner import InfraFault, ShardRun

from . import celery_app
from .keys import OPEN_RUNS, RESULT_TTL_S, key

log = logging.getLogger(__name__)


def finish_once(run_id: str, token: str) -> dict[str, Any]:
    store = celery_app.store()
    finished = key(run_id, "finished")
    stored = store.get(finished)
    if stored is not None:
        summary: dict[str, Any] = json.loads(stored)
        return summary
    ttl_s = celery_app.context().settings.lease_ttl_s
    hold = _Hold(store, key(run_id, "finishing"), token, ttl_s)
    if not hold.take():
        log.info("run %s: another finish is running; leaving it to that one", run_id)
        raise Ignore()
    with hold.beating():
        summary = finish(run_id)
        store.set(finished, json.dumps(summary, default=str), ex=RESULT_TTL_S)
        store.hdel(OPEN_RUNS, run_id)
    hold.release()
    return summary


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


def finish(run_id: str) -> dict[str, Any]:
    planned = celery_app.load_planned(run_id)
    stored = celery_app.store().hgetall(key(run_id, "shards"))
    missing = [i for i in range(len(planned.shards)) if str(i) not in stored]
    if missing:
        raise run_model.PipelineError(f"run {run_id}: shards {missing} have no stored results")
    outcomes: list[Outcome] = []
    faults: list[InfraFault] = []
    for body in map(json.loads, stored.values()):
        outcomes += [Outcome.from_json(o) for o in body["outcomes"]]
        if body.get("fault"):
            faults.append(InfraFault.from_json(body["fault"]))

    ctx = celery_app.context()

    def execute(name: str, ids: Any) -> ShardRun:
        return pipeline.execute_shard(planned.request, name, ids, settings=ctx.settings, parallel=1)

    finished = pipeline.finish(planned, outcomes, ctx, execute, faults)
    return finished.summary.to_json()
