"""Shard leases: one owner at a time per shard, its finished outcomes kept, its result recorded
once and only by that owner (each step one Lua script, so a check and its write are atomic).

A running shard holds a lease (a Redis key holding its owner's token, `lease_ttl_s`, renewed
by a heartbeat thread every third of it). A worker that was merely slow and lost its lease
records nothing; a takeover skips every test the earlier owner kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import redis

from suites.model import Outcome

from .drain import ACTIVE, DRAINING
from .keys import (
    DONE,
    LEASED,
    RESULT_TTL_S,
    RUNNING,
    entry,
    hash_of,
    key,
    lease_key,
)

log = logging.getLogger(__name__)

# Acquire: a recorded shard is done; a lease held by another token names it; else it is ours.
ACQUIRE_LUA = """
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return ARGV[6] end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return holder end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
return false
"""
# Renew: ours is extended; an expired one nobody took is taken back; another's is lost (0).
RENEW_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if holder or redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
return 1
"""
# Take over the lease of a holder known dead, unless it changed meanwhile.
TAKE_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
return 1
"""
# Keep one finished outcome, while the lease is ours.
KEEP_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
"""
# Record once: not over another's lease; a shard already recorded stays as it is (-1).
RECORD_LUA = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 0 then return -1 end
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('DEL', KEYS[1], KEYS[4])
redis.call('HDEL', KEYS[3], ARGV[4])
return 1
"""
# Give the lease up (warm shutdown, a fault's retry) and say what became of the shard.
RELEASE_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""


class ShardLease:
    """One delivery's hold on a shard: acquire, heartbeat while it runs, record or give up."""

    def __init__(
        self,
        store: redis.Redis,
        run_id: str,
        index: int,
        token: str,
        options: dict[str, Any],
        ttl_s: float,
    ) -> None:
        """`ttl_s`: how long the lease outlives its last heartbeat (`Settings.lease_ttl_s`)."""
        self.store, self.run_id, self.index, self.token = store, run_id, index, token
        self.options = options
        self.ttl_ms = int(ttl_s * 1000)
        self.field = f"{run_id}:{index}"
        self.lost = False
        self._lease = lease_key(run_id, index)
        self._shards = key(run_id, "shards")
        self._partial = key(run_id, f"partial:{index}")
        self._unkept: list[Outcome] = []  # finished, not yet stored (Redis was away)

    def _running_entry(self) -> str:
        return entry(RUNNING, self.token, self.options)

    def acquire(self) -> str | None:
        """None when the lease is now ours; `DONE` when the shard is recorded; else the holder."""
        holder = self.store.eval(
            ACQUIRE_LUA,
            3,
            self._lease,
            self._shards,
            LEASED,
            self.token,
            self.ttl_ms,
            str(self.index),
            self.field,
            self._running_entry(),
            DONE,
        )
        return None if holder is None else str(holder)

    def take_from(self, dead: str) -> bool:
        """Take the lease of a holder known to be dead; False when it changed meanwhile."""
        taken = self.store.eval(
            TAKE_LUA,
            2,
            self._lease,
            LEASED,
            dead,
            self.token,
            self.ttl_ms,
            self.field,
            self._running_entry(),
        )
        return bool(taken)

    def holder(self) -> str | None:
        try:
            return self.store.get(self._lease)  # type: ignore[return-value]
        except redis.RedisError:
            return None

    def renew(self) -> bool:
        """False once another worker holds the lease: this one must stop and record nothing."""
        renewed = self.store.eval(
            RENEW_LUA,
            3,
            self._lease,
            self._shards,
            LEASED,
            self.token,
            self.ttl_ms,
            str(self.index),
            self.field,
            self._running_entry(),
        )
        return bool(renewed)

    @contextlib.contextmanager
    def held(self) -> Iterator[threading.Event]:
        """Heartbeats while the block runs; the event is set when the lease is lost or the
        worker shuts down (the shard runner then kills its test process's group)."""
        stop = threading.Event()
        ended = threading.Event()
        interval = self.ttl_ms / 3000

        def beat() -> None:
            while not ended.wait(interval):
                try:
                    if not self.renew():
                        self.lost = True
                        stop.set()
                        return
                except redis.RedisError as exc:  # the lease may expire; renew decides later
                    log.warning(
                        "run %s shard %d: heartbeat failed: %s", self.run_id, self.index, exc
                    )

        thread = threading.Thread(target=beat, daemon=True, name=f"lease-{self.field}")
        ACTIVE.add(stop)
        if DRAINING.is_set():
            stop.set()
        thread.start()
        try:
            yield stop
        finally:
            ended.set()
            ACTIVE.discard(stop)
            thread.join()

    def kept_outcomes(self) -> dict[str, Outcome]:
        stored = hash_of(self.store, self._partial)
        return {vid: Outcome.from_json(json.loads(body)) for vid, body in stored.items()}

    def keep(self, outcome: Outcome) -> None:
        """Store one finished outcome, so a takeover does not run that test again.

        What Redis refuses (an outage) waits here and goes with the next outcome: a takeover
        after the outage still skips every test this owner finished."""
        self._unkept.append(outcome)
        try:
            while self._unkept:
                kept = self._unkept[0]
                self.store.eval(
                    KEEP_LUA,
                    2,
                    self._lease,
                    self._partial,
                    self.token,
                    kept.id,
                    json.dumps(kept.to_json()),
                    RESULT_TTL_S,
                )
                self._unkept.pop(0)
        except redis.RedisError as exc:  # kept later; only a takeover's shortcut waits
            log.warning(
                "run %s shard %d: cannot keep %d outcome(s) yet: %s",
                self.run_id,
                self.index,
                len(self._unkept),
                exc,
            )

    def record(self, body: dict[str, Any]) -> bool:
        """Store the shard's result once; False when another worker holds the lease."""
        recorded = self.store.eval(
            RECORD_LUA,
            4,
            self._lease,
            self._shards,
            LEASED,
            self._partial,
            self.token,
            str(self.index),
            json.dumps(body),
            self.field,
            RESULT_TTL_S,
        )
        return int(recorded) != 0

    def release(self, state: str, **extra: Any) -> bool:
        return bool(
            self.store.eval(
                RELEASE_LUA,
                2,
                self._lease,
                LEASED,
                self.token,
                self.field,
                entry(state, "", self.options, **extra),
            )
        )
