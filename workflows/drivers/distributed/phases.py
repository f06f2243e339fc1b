"""The verdict first: a run's shards in two phases, the verdict's and the holdout's.

The selected variants, their reruns and their A/B base decide a run's verdict; the holdout
measures the selector and never changes that verdict (a new failure only it finds is a
selector miss). So the service runs the selected variants' shards first, finishes the run on
them (callback, exports, History) and only then runs the holdout's shards, whose finish
completes the selector's metrics (`workflows.run.finishing.finish_holdout`).

The stored plan carries the phases: its shards are the verdict's first, then the
holdout's, and `verdict_shards` says how many are the verdict's. A plan stored without it (by
an earlier version) is one phase, as it was planned.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from workflows.run.run_model import PlannedRun

VERDICT_SHARDS = "verdict_shards"  # the key in the stored plan


def verdict_first(planned: PlannedRun) -> tuple[PlannedRun, int]:
    """`planned` with its shards in two phases (`split`), and how many decide the verdict."""
    shards, verdict = split(planned.shards, planned.holdout)
    return (planned if shards is planned.shards else replace(planned, shards=shards)), verdict


def split(shards: list[list[str]], holdout: Sequence[str]) -> tuple[list[list[str]], int]:
    """The holdout's ids out of `shards` and into shards of their own, after them; and how
    many shards decide the verdict. Without a holdout, or without a selection, `shards`
    itself: one phase."""
    held = set(holdout)
    verdict = [s for s in ([v for v in shard if v not in held] for shard in shards) if s]
    if not held or not verdict:
        return shards, len(shards)
    # Each shard lists its ids longest first (LPT): dealt in turn, the holdout's shards stay
    # balanced, as many as the verdict's.
    order = [vid for shard in shards for vid in shard if vid in held]
    count = max(1, min(len(verdict), len(order)))
    return verdict + [order[i::count] for i in range(count)], len(verdict)


def dumps(planned: PlannedRun, verdict_shards: int) -> str:
    """The stored plan: the planned run's JSON with its phases."""
    body = planned.to_json()
    body[VERDICT_SHARDS] = verdict_shards
    return json.dumps(body)


def loads(body: str | bytes) -> tuple[PlannedRun, int]:
    """A stored plan and how many of its shards decide the verdict (all of them when it was
    stored without phases)."""
    data: dict[str, Any] = json.loads(body)
    planned = PlannedRun.from_json(data)
    count = data.get(VERDICT_SHARDS)
    shards = len(planned.shards)
    if isinstance(count, int) and not isinstance(count, bool) and 0 < count <= shards:
        return planned, count
    return planned, shards
