"""What `spyre-ci worker status` shows: intake consumers, workers, shards, the queue.

Reads Redis only: neither the Celery app nor the tasks are loaded for it.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from .intake import intake_alive
from .keys import (
    LEASED,
    PLAN_QUEUE,
    QUEUE,
    RELEASED,
    REQUEUED,
    RUNNING,
    WORKER_ALIVE,
    hash_of,
    lease_key,
)

_SHOWN = {RUNNING: "expired", RELEASED: "handed back", REQUEUED: "queued again"}


def status(url: str, lease_ttl_s: float) -> dict[str, Any]:
    """Intake consumers, live workers, leased and waiting shards, queue length; raises
    `redis.RedisError` when Redis cannot be reached. `lease_ttl_s` is the settings' lease,
    said with the rest (`Settings.lease_ttl_s`)."""
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)
    client.ping()
    workers = []
    for key in sorted(client.scan_iter(match=WORKER_ALIVE.format(node="*"))):
        raw = client.get(key)
        if raw is not None:
            workers.append(json.loads(str(raw)))
    shards = []
    for field, raw in sorted(hash_of(client, LEASED).items()):
        run_id, _, index = field.rpartition(":")
        entry = json.loads(raw)
        lease = lease_key(run_id, int(index))
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
    plans = int(client.llen(PLAN_QUEUE))
    return {
        "intake": intake_alive(url),
        "workers": workers,
        "shards": shards,
        "queue": int(client.llen(QUEUE)) + plans,
        "queued_plans": plans,
        "lease_ttl_s": lease_ttl_s,
    }
