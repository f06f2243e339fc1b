"""Shards on a pool of runners, longest first, with work stealing at the end of a run.

`jobs` runner threads take the plan's shards longest first (the plan's History estimates).
When none is left to start, an idle runner steals: it picks the running shard with the most
estimated time left and runs that shard's unclaimed ids from the back, while the owner goes
on from the front. Each test process claims a variant before it runs it (`suites.claims`),
so the two meet in the middle, each variant runs once, and the runners finish together
instead of one idling while the other works through its tail.

The policy is `scheduling.LongestFirst` (pure); this module gives it the claims folder and
runs it on `scheduling.Pool`. A thief writes into the shard's own folder under its own token
(`shard-3.steal1.*`), so a resumed run reads its outcomes with the owner's.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from suites.claims import Claims
from suites.model import Outcome
from workflows.runner.scheduling import COLD_START_S, WARM_START_S, LongestFirst, Pool, Steal, Work
from workflows.runner.shard_runner import ProgressCallback, ShardRun

__all__ = ["Pooled", "Steal", "run_pool"]

RunShard = Callable[[str, Sequence[str], Claims, ProgressCallback], ShardRun]


@dataclass
class Pooled:
    """What the pool came back with: each runner's ShardRun, and the steals it made."""

    runs: list[ShardRun]
    steals: list[Steal]

    @property
    def outcomes(self) -> list[Outcome]:
        return [o for run in self.runs for o in run.outcomes]


def run_pool(
    shards: Sequence[tuple[str, Sequence[str], float]],
    run: RunShard,
    jobs: int,
    work: Path,
    *,
    warm: bool,
    stop: threading.Event,
    progress: ProgressCallback | None = None,
    done: Mapping[str, Iterable[str]] | None = None,
    idle: Callable[[], None] | None = None,
) -> Pooled:
    """Run `shards` ((name, ids, estimated seconds), longest first) on `jobs` runners.

    `run(name, ids, claims, progress)` runs ids of shard `name` as the runner `claims.token`.
    `work`: where the claims folder lives while the pool runs (removed after). `done`: ids
    per shard already reported (a resumed run), neither run nor stolen. `idle()`: what a
    runner does when nothing is left to start or steal, before it ends (`Pool.run`).
    """
    folder = Path(tempfile.mkdtemp(prefix="claims-", dir=work))
    probe = Claims(folder, "")
    policy = LongestFirst(
        shards,
        start_s=WARM_START_S if warm else COLD_START_S,
        held=lambda variant: probe.holder(variant) is not None,
        done=done,
    )
    pool: Pool[ShardRun] = Pool(policy, jobs)

    def execute(piece: Work) -> ShardRun:
        def report(outcome: Outcome) -> None:
            with pool.lock:
                policy.reported(piece.shard, outcome.id, outcome.duration_s)
            if progress is not None:
                progress(outcome)

        claims = Claims(folder, piece.token)
        result = run(piece.shard, piece.ids, claims, report)
        if piece.stolen and result.fault is not None:
            with pool.lock:
                policy.thief_failed(piece)
            result = _thief_fault(result, claims)
        return result

    try:
        finished = pool.run(execute, stop, idle)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # In the plan's shard order, each owner before its thieves: faults read as before.
    place = {name: i for i, (name, _ids, _estimate) in enumerate(shards)}
    ordered = sorted(finished, key=lambda pair: (place[pair[0].shard], pair[0].token))
    return Pooled([result for _work, result in ordered], policy.steals)


def _thief_fault(result: ShardRun, claims: Claims) -> ShardRun:
    """A thief whose process could not run: what it never took, its owner runs; only what
    it holds and left unreported is unrun (nothing, usually: then there is no fault)."""
    assert result.fault is not None
    held = tuple(v for v in result.fault.unrun if claims.holder(v) == claims.token)
    return replace(result, fault=replace(result.fault, unrun=held) if held else None)
