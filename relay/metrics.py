"""Prometheus metrics kept in Redis, so every gunicorn worker process adds to the same counters.

Each process batches its increments and adds them to Redis at most every `flush_interval`
seconds (a background thread; /metrics flushes its own process first), so a delivery costs
no extra Redis round trip and the counters of other processes lag by at most that interval.
A process that cannot reach Redis keeps its increments and adds them on the next flush that
succeeds, so the 503s of an outage are counted once Redis is back.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable

import redis

PREFIX = "spyre-ci:metrics"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The event label comes from a request header: keep its values to a known set.
KNOWN_EVENTS = frozenset(
    {
        "push",
        "pull_request",
        "check_run",
        "check_suite",
        "repository_dispatch",
        "ping",
        "nightly",
        "periodic",
        "callback",
    }
)
_SEP = "|"


class Metrics:
    """Counters and one latency histogram, stored as Redis hashes."""

    def __init__(
        self, client: redis.Redis, prefix: str = PREFIX, flush_interval: float = 0.1
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.flush_interval = flush_interval
        self._pending: Counter[tuple[str, str]] = Counter()
        self._pending_float: defaultdict[tuple[str, str], float] = defaultdict(float)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None
        self._flusher_pid = 0

    def observe(self, event: str, outcome: str, seconds: float | None = None) -> None:
        """Count one delivery (`event`, `outcome` such as accepted/duplicate/unauthorized)."""
        event = event if event in KNOWN_EVENTS else "other"
        with self._lock:
            self._pending[(f"{self.prefix}:deliveries", f"{event}{_SEP}{outcome}")] += 1
            if seconds is not None:
                bucket = next((str(b) for b in BUCKETS if seconds <= b), "+Inf")
                self._pending[(f"{self.prefix}:latency", bucket)] += 1
                self._pending[(f"{self.prefix}:latency", "count")] += 1
                self._pending_float[(f"{self.prefix}:latency", "sum")] += seconds
        self._ensure_flusher()
        self._wake.set()

    def flush(self) -> None:
        """Add this process's pending increments to Redis now (kept if Redis fails).

        Flushes are serialized: one that returns has seen every earlier one land, so
        /metrics never reads Redis while this process's counts are in flight.
        """
        with self._flush_lock:
            with self._lock:
                counts, sums = self._pending, self._pending_float
                self._pending, self._pending_float = Counter(), defaultdict(float)
            if not counts and not sums:
                return
            # MULTI/EXEC: all increments land or none do, so a retry never counts twice.
            pipe = self.client.pipeline(transaction=True)
            for (key, name), count in counts.items():
                pipe.hincrby(key, name, count)
            for (key, name), total in sums.items():
                pipe.hincrbyfloat(key, name, total)
            try:
                pipe.execute()
            except redis.RedisError:
                with self._lock:  # kept; added by the next flush that succeeds
                    self._pending.update(counts)
                    for field_key, total in sums.items():
                        self._pending_float[field_key] += total

    def _ensure_flusher(self) -> None:
        # Started lazily in the process that serves: a thread does not survive gunicorn's fork.
        if self._flusher is not None and self._flusher_pid == os.getpid():
            return
        with self._lock:
            if self._flusher is not None and self._flusher_pid == os.getpid():
                return
            self._flusher_pid = os.getpid()
            self._flusher = threading.Thread(
                target=self._flush_loop, name="metrics-flush", daemon=True
            )
            self._flusher.start()

    def _flush_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self.flush()
            time.sleep(self.flush_interval)

    def render(self, queue_depths: Iterable[tuple[str, int | None]] = ()) -> str:
        """The Prometheus text exposition of every counter (raises redis.RedisError)."""
        self.flush()
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(f"{self.prefix}:deliveries")
        pipe.hgetall(f"{self.prefix}:latency")
        deliveries, latency = pipe.execute()
        lines = [
            "# HELP spyre_ci_deliveries_total Webhook and callback requests by event and outcome.",
            "# TYPE spyre_ci_deliveries_total counter",
        ]
        for name, value in sorted((_text(k), int(v)) for k, v in deliveries.items()):
            event, _, outcome = name.partition(_SEP)
            lines.append(
                f'spyre_ci_deliveries_total{{event="{event}",outcome="{outcome}"}} {value}'
            )
        lat = {_text(k): _text(v) for k, v in latency.items()}
        lines += [
            "# HELP spyre_ci_delivery_seconds Time to answer a webhook delivery.",
            "# TYPE spyre_ci_delivery_seconds histogram",
        ]
        cumulative = 0
        for bound in [*map(str, BUCKETS), "+Inf"]:
            cumulative += int(lat.get(bound, 0))
            lines.append(f'spyre_ci_delivery_seconds_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f"spyre_ci_delivery_seconds_sum {float(lat.get('sum', 0.0))}")
        lines.append(f"spyre_ci_delivery_seconds_count {int(lat.get('count', 0))}")
        lines += [
            "# HELP spyre_ci_queue_depth Entries enqueued and not yet acknowledged.",
            "# TYPE spyre_ci_queue_depth gauge",
        ]
        for queue, depth in queue_depths:
            if depth is not None:
                lines.append(f'spyre_ci_queue_depth{{queue="{queue}"}} {depth}')
        return "\n".join(lines) + "\n"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
