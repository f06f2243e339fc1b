"""Where the distributed driver keeps a run's state in Redis: every key, state and entry format.

Per run: `spyre-ci:run:<run>:planned` (the stored plan), `:shards` (a hash, shard index ->
recorded result), `:lease:<i>` (the shard's owner token, expiring), `:partial:<i>` (the
outcomes the owner finished so far, kept by a takeover), `:finishing` and `:finished`. Shared:
one registry hash of every shard that was started and has no recorded result yet
(`<run>:<i>` -> how to send its task again, its state and owner: what the sweep reads), the
open runs, and each worker's and intake consumer's heartbeat.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

_KEY = "spyre-ci:run:{run_id}:{what}"
RESULT_TTL_S = 7 * 24 * 3600

LEASED = "spyre-ci:shards:leased"
OPEN_RUNS = "spyre-ci:runs:open"  # run id -> when its chord was sent (until its finish ends)
SWEEP_LOCK = "spyre-ci:shards:sweep-lock"
WORKER_ALIVE = "spyre-ci:worker:alive:{node}"  # set while a worker's main process lives
INTAKE_ALIVE = "spyre-ci:intake:alive:{consumer}"  # set while a consumer's loop turns
QUEUE = "celery"  # the default queue: its Redis list holds the messages no worker took yet
# Plans wait behind shards and finishes. kombu's Redis transport keeps one list per priority
# step (0, the default, is popped first; step N is `celery\x06\x16N`), so under a flood of
# deliveries a started run finishes, and a dead worker's shard is taken over, before the
# next runs are planned; otherwise each finish waits behind every plan queued before it.
PLAN_PRIORITY = 6
PLAN_QUEUE = f"{QUEUE}\x06\x16{PLAN_PRIORITY}"

DONE = "done"  # no owner token is this: tokens hold slashes
# A registry entry's state: its owner runs it, gave it up, or it was sent to the queue again.
RUNNING, RELEASED, REQUEUED = "running", "released", "requeued"


def key(run_id: str, what: str) -> str:
    return _KEY.format(run_id=run_id, what=what)


def lease_key(run_id: str, index: int) -> str:
    return key(run_id, f"lease:{index}")


def entry(state: str, owner: str, options: dict[str, Any], **extra: Any) -> str:
    """A registry entry: the shard's state, its owner and how to send its task again."""
    return json.dumps(
        {"state": state, "owner": owner, "since": round(time.time(), 1), "task": options, **extra}
    )


def hash_of(store: redis.Redis, key: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in store.hgetall(key).items()}
