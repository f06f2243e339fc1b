"""Shards on a pool of runners, longest first, with work stealing at the end of a run.

`jobs` runner threads take the plan's shards longest first (the plan's History estimates).
When none is left to start, an idle runner steals: it picks the running shard with the most
estimated time left and runs that shard's unclaimed ids from the back, while the owner goes
on from the front. Each test process claims a variant before it runs it (`suites.claims`),
so the two meet in the middle, each variant runs once, and the runners finish together
instead of one idling while the other works through its tail.

A thief writes into the shard's own folder under its own token (`shard-3.steal1.*`), so a
resumed run reads its outcomes with the owner's. A steal is worth it only when the time left
in the victim clearly exceeds a test process's start (a warm fork, or a cold start).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from suites.claims import Claims
from suites.model import Outcome
from workflows.run_model import ShardRun
from workflows.shard_runner import ProgressCallback

# Seconds a thief's test process takes to its first test: a fork of the warm zygote, or a
# cold start (import torch, the test databases); `benchmarks/results/speed.json`.
WARM_START_S = 0.5
COLD_START_S = 8.0
_WORTH = 3.0  # steal only when the victim has this many start costs of work left

RunShard = Callable[[str, Sequence[str], Claims, ProgressCallback], ShardRun]


@dataclass
class _Shard:
    name: str
    ids: list[str]
    estimate_s: float  # the plan's, for all of `ids`
    running: bool = False  # its owner is running it: a thief only helps a running owner
    stealable: bool = True  # until a thief of it could not start its process
    durations: list[float] = field(default_factory=list)
    reported: set[str] = field(default_factory=set)
    thieves: int = 0

    def per_test_s(self) -> float:
        if self.durations:
            return statistics.fmean(self.durations)
        return self.estimate_s / max(1, len(self.ids))


@dataclass(frozen=True)
class Steal:
    """One steal: who took what from whom (for the run's record and the tests)."""

    victim: str
    thief: str
    ids: int
    left_s: float


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
) -> Pooled:
    """Run `shards` ((name, ids, estimated seconds), longest first) on `jobs` runners.

    `run(name, ids, claims, progress)` runs ids of shard `name` as the runner `claims.token`.
    `work`: where the claims folder lives while the pool runs (removed after). `done`: ids
    per shard already reported (a resumed run), neither run nor stolen.
    """
    start_s = WARM_START_S if warm else COLD_START_S
    folder = Path(tempfile.mkdtemp(prefix="claims-", dir=work))
    lock = threading.Lock()
    board = {name: _Shard(name, list(ids), estimate) for name, ids, estimate in shards}
    for name, ids in (done or {}).items():
        if name in board:
            board[name].reported.update(ids)
    queue = deque(sorted(board.values(), key=lambda s: -s.estimate_s))
    runs: list[tuple[int, str, ShardRun]] = []  # (shard's place, runner token, its run)
    steals: list[Steal] = []
    place = {name: i for i, (name, _ids, _estimate) in enumerate(shards)}

    def tracked(shard: _Shard) -> ProgressCallback:
        def report(outcome: Outcome) -> None:
            with lock:
                shard.reported.add(outcome.id)
                shard.durations.append(outcome.duration_s)
            if progress is not None:
                progress(outcome)

        return report

    def unclaimed(shard: _Shard) -> list[str]:
        probe = Claims(folder, "")
        return [v for v in shard.ids if v not in shard.reported and probe.holder(v) is None]

    def next_task() -> tuple[_Shard, list[str], Claims] | None:
        with lock:
            while queue:
                shard = queue.popleft()
                todo = [v for v in shard.ids if v not in shard.reported]
                if todo:
                    shard.running = True
                    return shard, todo, Claims(folder, shard.name)
            best: tuple[float, _Shard, list[str]] | None = None
            for shard in board.values():
                if not (shard.running and shard.stealable):
                    continue
                left = unclaimed(shard)
                left_s = len(left) * shard.per_test_s()
                worth = len(left) >= 2 and left_s >= _WORTH * start_s
                if worth and (best is None or left_s > best[0]):
                    best = (left_s, shard, left)
            if best is None:
                return None
            left_s, shard, left = best
            shard.thieves += 1
            token = f"{shard.name}.steal{shard.thieves}"
            steals.append(Steal(shard.name, token, len(left), round(left_s, 3)))
            return shard, left[::-1], Claims(folder, token)

    def runner() -> None:
        while not stop.is_set():
            task = next_task()
            if task is None:
                return
            shard, ids, claims = task
            result = run(shard.name, ids, claims, tracked(shard))
            owner = claims.token == shard.name
            with lock:
                if owner:
                    shard.running = False
                elif result.fault is not None:
                    shard.stealable = False
                    result = _thief_fault(result, claims)
                runs.append((place[shard.name], claims.token, result))

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(runner) for _ in range(max(1, jobs))]
            for future in futures:
                while True:
                    try:
                        future.result(timeout=0.5)  # a Ctrl-C reaches this thread meanwhile
                        break
                    except TimeoutError:
                        continue
                    except BaseException:
                        stop.set()
                        raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    # In the plan's shard order, each owner before its thieves: faults read as before.
    return Pooled([run for _place, _token, run in sorted(runs, key=lambda r: r[:2])], steals)


def _thief_fault(result: ShardRun, claims: Claims) -> ShardRun:
    """A thief whose process could not run: what it never took, its owner runs; only what
    it holds and left unreported is unrun (nothing, usually: then there is no fault)."""
    assert result.fault is not None
    held = tuple(v for v in result.fault.unrun if claims.holder(v) == claims.token)
    return replace(result, fault=replace(result.fault, unrun=held) if held else None)
