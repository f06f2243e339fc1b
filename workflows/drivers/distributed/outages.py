"""Waiting out a Redis outage in a task's step, instead of failing the task."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis

from contracts.errors import Unavailable
from workflows.stores.history import HistoryError

log = logging.getLogger(__name__)
T = TypeVar("T")

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
