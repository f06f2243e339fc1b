"""One pool of runner threads for every kind of work, with the policy kept apart and pure.

A `Scheduler` decides what a runner does next; a `Pool` runs any scheduler on `jobs` threads
until the scheduler has nothing left or the run is stopped. The policies:

- `InOrder`: the pieces of work in the order given, each once (the upgrade's runs per
  environment, the selection benchmark's mutations);
- `LongestFirst` (`workflows/runner/stealing.py` gives it the claims folder): shards longest first,
  then an idle runner steals the unclaimed tail of the running shard with the most estimated
  time left.

A policy does no I/O and starts no thread: tests drive it with fake runners in milliseconds
(`tests/workflows/runner/test_scheduling.py`), as pytest-xdist tests its schedulers.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

R = TypeVar("R")
R_contra = TypeVar("R_contra", contravariant=True)


@dataclass(frozen=True)
class Work:
    """What one runner does at once: `ids` of shard `shard`, under its claims token `token`
    (the shard's name for its owner, `<shard>.stealN` for a thief)."""

    shard: str
    ids: tuple[str, ...]
    token: str

    @property
    def stolen(self) -> bool:
        return self.token != self.shard


class Scheduler(Protocol[R_contra]):
    """The policy: which work a runner takes next, and what it learns when one is done.

    Called under the pool's lock, so a policy needs no locking of its own."""

    def next_work(self) -> Work | None:
        """The next piece of work, or None when this runner has nothing left to do."""

    def done(self, work: Work, result: R_contra) -> None:
        """`work` came back with `result`."""


class Pool(Generic[R]):
    """`jobs` runner threads that run what `scheduler` hands out until it hands out nothing.

    `execute(work)` runs one piece. A `stop` set from outside (Ctrl-C, a signal) stops the
    runners after their current piece; an exception in a runner stops the others and is
    raised. `results` keeps (work, result) pairs in the order they finished."""

    def __init__(self, scheduler: Scheduler[R], jobs: int) -> None:
        self.scheduler = scheduler
        self.jobs = max(1, jobs)
        self.lock = threading.Lock()
        self.results: list[tuple[Work, R]] = []

    def run(
        self,
        execute: Callable[[Work], R],
        stop: threading.Event | None = None,
        idle: Callable[[], None] | None = None,
    ) -> list[tuple[Work, R]]:
        """`idle()`: what a runner does once the scheduler has nothing more for it, before
        it ends, while the other runners go on (the embedded run's early reruns)."""
        stop = stop or threading.Event()

        def runner() -> None:
            while not stop.is_set():
                with self.lock:
                    work = self.scheduler.next_work()
                if work is None:
                    if idle is not None:
                        idle()
                    return
                result = execute(work)
                with self.lock:
                    self.scheduler.done(work, result)
                    self.results.append((work, result))

        with ThreadPoolExecutor(max_workers=self.jobs) as threads:
            futures = [threads.submit(runner) for _ in range(self.jobs)]
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
        return self.results


class InOrder:
    """Each piece of work once, in the order given."""

    def __init__(self, works: Iterable[Work]) -> None:
        self.queue = deque(works)

    def next_work(self) -> Work | None:
        return self.queue.popleft() if self.queue else None

    def done(self, work: Work, result: object) -> None:
        pass


def slices(name: str, ids: Sequence[str], jobs: int) -> list[Work]:
    """`ids` dealt round-robin into at most `jobs` shards named `<name>-<i>`."""
    n = max(1, min(jobs, len(ids)))
    return [Work(f"{name}-{i}", tuple(ids[i::n]), f"{name}-{i}") for i in range(n) if ids[i::n]]


# Seconds a thief's test process takes to its first test: a fork of the warm zygote, or a
# cold start (import torch, the test databases); `benchmarks/results/speed.json`.
WARM_START_S = 0.5
COLD_START_S = 8.0
WORTH = 3.0  # steal only when the victim has this many start costs of work left


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


class LongestFirst:
    """Shards longest first (the plan's estimates); then work stealing.

    When no shard is left to start, an idle runner takes the running shard with the most
    estimated time left and runs its unclaimed ids from the back, while the owner goes on
    from the front. A steal is worth it only when the time left clearly exceeds a test
    process's start (`start_s`). `held(id)` says whether a runner has claimed an id (the
    claims folder, read by the caller); `reported(shard, id, seconds)` feeds the per-test
    estimate. A shard whose thief's process could not run (`thief_failed`) is not stolen
    from again."""

    def __init__(
        self,
        shards: Sequence[tuple[str, Sequence[str], float]],
        *,
        start_s: float,
        held: Callable[[str], bool],
        done: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self.board = {name: _Shard(name, list(ids), estimate) for name, ids, estimate in shards}
        for name, ids in (done or {}).items():
            if name in self.board:
                self.board[name].reported.update(ids)
        self.queue = deque(sorted(self.board.values(), key=lambda s: -s.estimate_s))
        self.start_s = start_s
        self.held = held
        self.steals: list[Steal] = []

    def reported(self, shard: str, variant: str, seconds: float) -> None:
        entry = self.board[shard]
        entry.reported.add(variant)
        entry.durations.append(seconds)

    def next_work(self) -> Work | None:
        while self.queue:
            shard = self.queue.popleft()
            todo = [v for v in shard.ids if v not in shard.reported]
            if todo:
                shard.running = True
                return Work(shard.name, tuple(todo), shard.name)
        best: tuple[float, _Shard, list[str]] | None = None
        for shard in self.board.values():
            if not (shard.running and shard.stealable):
                continue
            left = [v for v in shard.ids if v not in shard.reported and not self.held(v)]
            left_s = len(left) * shard.per_test_s()
            worth = len(left) >= 2 and left_s >= WORTH * self.start_s
            if worth and (best is None or left_s > best[0]):
                best = (left_s, shard, left)
        if best is None:
            return None
        left_s, shard, left = best
        shard.thieves += 1
        token = f"{shard.name}.steal{shard.thieves}"
        self.steals.append(Steal(shard.name, token, len(left), round(left_s, 3)))
        return Work(shard.name, tuple(left[::-1]), token)

    def done(self, work: Work, result: object) -> None:
        if not work.stolen:
            self.board[work.shard].running = False

    def thief_failed(self, work: Work) -> None:
        """A thief's process could not run: its shard is not stolen from again."""
        self.board[work.shard].stealable = False
