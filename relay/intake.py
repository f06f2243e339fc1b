"""The durable intake queue between the relay and the workflows layer.

Producer side (the webhook): `accept(delivery_id, event) -> bool` records the delivery as
seen and enqueues its TriggerEvent in ONE atomic step (a Lua script), so a duplicate is
never enqueued twice and an enqueue that failed leaves no "seen" mark behind: GitHub's
redelivery is then accepted.

Consumer side (workers): `claim(consumer, block_ms) -> Claimed | None` hands out one entry;
`ack(claimed)` removes it once its work is durably recorded. Entries claimed by a consumer
that died are handed to another after `reclaim_idle_ms` (Redis Streams consumer group +
XAUTOCLAIM), so a crash between claim and ack never loses an event.

Durability is Redis's own: run it with `appendonly yes` (and `appendfsync always` if a
second of writes at a power cut matters).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import redis

from contracts.event import TriggerEvent
from relay.events import RelayError, RelayUnavailable

INTAKE_STREAM = "spyre-ci:intake"
INTAKE_GROUP = "workflows"
DELIVERY_KEY = "spyre-ci:delivery:{}"
# GitHub allows redelivery for 3 days; remember deliveries a day longer.
DELIVERY_TTL_SECONDS = 4 * 24 * 3600
RECLAIM_IDLE_MS = 10 * 60 * 1000

# Write the entries first and the "seen" mark last: a script that fails part-way
# (out of memory on XADD) then leaves no mark, and the redelivery is accepted.
_ACCEPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 2, #KEYS do
  redis.call('XADD', KEYS[i], '*', 'delivery_id', ARGV[1], 'event', ARGV[2])
end
redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4])
return 1
"""


class QueueUnavailable(RelayUnavailable):
    """Redis cannot be reached or refused the write; nothing was recorded (answer 503)."""


@dataclass(frozen=True)
class Claimed:
    """One queue entry handed to a consumer; pass it back to `ack` when its work is recorded."""

    entry_id: str
    delivery_id: str
    event: TriggerEvent
    consumer: str
    reclaimed: bool = False  # True when taken over from a consumer that went silent


@runtime_checkable
class Queue(Protocol):
    """What the relay needs from any intake (Redis here; a Celery-backed one may follow)."""

    def accept(self, delivery_id: str, event: TriggerEvent) -> bool:
        """Dedupe and enqueue atomically; False for a delivery already accepted."""
        ...

    def depth(self) -> int:
        """Entries enqueued and not yet acknowledged."""
        ...


@runtime_checkable
class ClaimableQueue(Queue, Protocol):
    """A Queue that workers consume reliably."""

    def claim(self, consumer: str, block_ms: int = 0) -> Claimed | None: ...

    def ack(self, claimed: Claimed) -> None: ...


class RedisIntake:
    """`ClaimableQueue` on a Redis Stream with a consumer group."""

    def __init__(
        self,
        client: redis.Redis,
        stream: str = INTAKE_STREAM,
        group: str = INTAKE_GROUP,
        reclaim_idle_ms: int = RECLAIM_IDLE_MS,
        delivery_ttl: int = DELIVERY_TTL_SECONDS,
    ) -> None:
        self.client = client
        self.stream = stream
        self.group = group
        self.reclaim_idle_ms = reclaim_idle_ms
        self.delivery_ttl = delivery_ttl
        self._accept = client.register_script(_ACCEPT)
        self._group_ready = False

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisIntake:
        """An intake on its own connection pool, with timeouts short enough to answer 503."""
        return cls(connect(url), **kwargs)

    # -- producer ---------------------------------------------------------------------------

    def accept(self, delivery_id: str, event: TriggerEvent, also: Sequence[str] = ()) -> bool:
        """Record `delivery_id` as seen and enqueue `event`, atomically.

        True: enqueued now. False: a duplicate, nothing written. Raises QueueUnavailable
        when Redis fails; then nothing is recorded and a redelivery will be accepted.
        `also` names further streams that get the same entry in the same atomic step (the
        CRCR fan-out outbox), each consumed through its own `RedisIntake`.
        """
        if not delivery_id:
            raise RelayError("a delivery needs an X-GitHub-Delivery id to be deduplicated")
        body = json.dumps(event.to_json(), separators=(",", ":"))
        keys = [DELIVERY_KEY.format(delivery_id), self.stream, *also]
        try:
            return bool(
                self._accept(keys=keys, args=[delivery_id, body, event.kind, self.delivery_ttl])
            )
        except redis.RedisError as exc:
            raise QueueUnavailable(f"delivery {delivery_id}: not enqueued: {exc}") from exc

    def seen(self, delivery_id: str) -> bool:
        """Whether the delivery was accepted (within the dedupe window)."""
        return bool(self._call(self.client.exists, DELIVERY_KEY.format(delivery_id)))

    def depth(self) -> int:
        """Entries enqueued and not yet acknowledged (acked entries are deleted)."""
        return int(self._call(self.client.xlen, self.stream))

    # -- consumer ---------------------------------------------------------------------------

    def claim(self, consumer: str, block_ms: int = 0) -> Claimed | None:
        """The next entry for `consumer`: first one abandoned by a silent consumer, else a new
        one, waiting up to `block_ms` (0: do not wait). None when there is nothing."""
        try:
            return self._claim(consumer, block_ms)
        except QueueUnavailable as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The stream or its group is gone (a Redis restarted without persistence, a
            # stream deleted by hand): create them again rather than fail forever.
            self._group_ready = False
            return self._claim(consumer, block_ms)

    def _claim(self, consumer: str, block_ms: int) -> Claimed | None:
        self._ensure_group()
        reclaimed = self._call(
            self.client.xautoclaim,
            self.stream,
            self.group,
            consumer,
            self.reclaim_idle_ms,
            "0-0",
            1,
        )
        entries = reclaimed[1] if reclaimed else []
        if entries:
            return self._claimed(entries[0], consumer, reclaimed=True)
        answer = self._call(
            self.client.xreadgroup,
            self.group,
            consumer,
            {self.stream: ">"},
            1,
            self._block(block_ms),
        )
        if not answer:
            return None
        _stream, stream_entries = answer[0]
        if not stream_entries:
            return None
        return self._claimed(stream_entries[0], consumer, reclaimed=False)

    def claim_own(self, consumer: str, after: str = "0") -> Claimed | None:
        """The next entry already delivered to `consumer` and not acknowledged, after entry id
        `after`: what a consumer whose claim answer was lost (Redis died as it answered)
        takes back at once after an outage instead of waiting `reclaim_idle_ms`."""
        self._ensure_group()
        answer = self._call(self.client.xreadgroup, self.group, consumer, {self.stream: after}, 1)
        if not answer:
            return None
        _stream, stream_entries = answer[0]
        entries = [e for e in stream_entries if e and e[1]]  # a deleted entry has no fields
        return self._claimed(entries[0], consumer, reclaimed=True) if entries else None

    def ack(self, claimed: Claimed) -> None:
        """Done with this entry: acknowledge and delete it, so it is never handed out again."""
        pipe = self.client.pipeline(transaction=True)
        pipe.xack(self.stream, self.group, claimed.entry_id)
        pipe.xdel(self.stream, claimed.entry_id)
        self._call(pipe.execute)

    def _block(self, block_ms: int) -> int | None:
        if block_ms <= 0:
            return None
        # A BLOCK longer than the socket timeout would read as a dead connection.
        timeout = self.client.connection_pool.connection_kwargs.get("socket_timeout")
        if timeout:
            block_ms = min(block_ms, max(1, int(timeout * 1000) - 500))
        return block_ms

    def _claimed(self, entry: Any, consumer: str, reclaimed: bool) -> Claimed:
        entry_id, fields = entry
        entry_id = _text(entry_id)
        fields = {_text(k): _text(v) for k, v in fields.items()}
        try:
            event = TriggerEvent.from_json(json.loads(fields["event"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise RelayError(
                f"{self.stream} entry {entry_id}: not a TriggerEvent ({exc}); "
                "inspect it with XRANGE and delete it with XDEL"
            ) from None
        return Claimed(entry_id, fields.get("delivery_id", ""), event, consumer, reclaimed)

    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise QueueUnavailable(f"{self.stream}: cannot create group: {exc}") from exc
        except redis.RedisError as exc:
            raise QueueUnavailable(f"{self.stream}: {exc}") from exc
        self._group_ready = True

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise QueueUnavailable(f"{self.stream}: {exc}") from exc


def connect(url: str, socket_timeout: float = 5.0) -> redis.Redis:
    """A Redis client that fails fast when Redis is gone instead of hanging a request."""
    return redis.Redis.from_url(
        url, socket_timeout=socket_timeout, socket_connect_timeout=1.0, health_check_interval=30
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
