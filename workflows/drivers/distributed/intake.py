"""The intake loop: relay deliveries from Redis into Celery runs, each acknowledged once sent."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

import redis

from .keys import INTAKE_ALIVE

log = logging.getLogger(__name__)
ALIVE_TTL_S = 30
BACKOFF_MAX_S = 30.0


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

    if url is None or send is None:  # the app: only a loop that sends through it builds it
        from .celery_app import app
        from .tasks import submit

        url, send = url or app.conf.broker_url, send or submit
    intake = RedisIntake.from_url(url)
    consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
    alive = INTAKE_ALIVE.format(consumer=consumer)
    delay = 0.0
    own_after: str | None = "0"  # after an outage: first this consumer's own pending entries
    while not stop.is_set():
        try:
            intake.client.set(alive, f"{time.time():.0f}", ex=ALIVE_TTL_S)
            claimed = intake.claim_own(consumer, own_after) if own_after is not None else None
            if claimed is None:
                own_after = None
                claimed = intake.claim(consumer, block_ms=block_ms)
            else:
                own_after = claimed.entry_id  # each own pending entry once, then new ones
        except (QueueUnavailable, redis.RedisError) as exc:
            delay = min(BACKOFF_MAX_S, max(0.5, delay * 2))
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
