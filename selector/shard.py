"""Longest-processing-time sharding: biggest first, each to the least-loaded shard."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shard:
    index: int
    ids: tuple[str, ...]
    estimated_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "ids": list(self.ids),
            "estimated_s": round(self.estimated_s, 3),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Shard:
        return cls(int(data["index"]), tuple(data["ids"]), float(data["estimated_s"]))


def shard_lpt(ids: Sequence[str], durations: Mapping[str, float], count: int) -> tuple[Shard, ...]:
    """Split `ids` into `count` shards (fewer when there are fewer ids) balanced on durations.

    LPT is within 4/3 of the best makespan; ties break on the id so shards are reproducible.
    """
    if count < 1:
        raise ValueError(f"shard count must be at least 1, not {count}")
    count = max(1, min(count, len(ids)))
    heap = [(0.0, i) for i in range(count)]
    members: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    # Longest first, ties by id: a stable reverse sort keeps the id order among equals.
    ordered = sorted(ids)
    ordered.sort(key=durations.__getitem__, reverse=True)
    for vid in ordered:
        load, i = heapq.heappop(heap)
        members[i].append(vid)
        loads[i] = load + durations[vid]
        heapq.heappush(heap, (loads[i], i))
    return tuple(Shard(i, tuple(members[i]), loads[i]) for i in range(count))
