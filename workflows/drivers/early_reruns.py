"""Reruns of failures while the shards still run (the embedded run's pool).

Stage 4 reruns every failure once in a fresh test process to tell flaky from real. Done after
the shards, that is one more round the user waits for: a fork, pytest around the tests, the
tests. But a runner of the pool often has nothing left before the others do (a shard ends in
one long test that nobody can steal), and the failures of the shards it ran are known by then.
So an idle runner reruns the failures reported so far, each in a fresh test process exactly
as the rerun round would (`pipeline.execute_shard` under the name `rerun`: the same folder,
limits, environment and JUnit files), and keeps taking the failures that come in meanwhile
until there are none; the rerun round then runs only what no runner took.

A failure reaches the pool when its test process reports it: the plugin's device-fault guard
holds a failure back until a later test of the same process passes or the process ends, so
a shard's failures are often known only at its end. A variant an early rerun brought back no
result for (its process could not run it: an `InfraFault`) is left to the rerun round, where
a fault is what it always was (the run ends as an infrastructure error); after one such
fault no runner tries an early rerun again. One early rerun runs at a time, as one rerun
round does. A failure reported before the pool starts (a resumed run's kept outcomes) is
rerun by the round.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from suites.model import Outcome
from workflows.runner.shard_runner import ShardRun

RunIds = Callable[[Sequence[str]], ShardRun]


class EarlyReruns:
    """Failures seen in the pool's outcome stream, rerun by idle runners (`idle`), and
    handed to the rerun round (`answer`)."""

    def __init__(self, run: RunIds, stop: threading.Event) -> None:
        self._run = run
        self._stop = stop
        self._lock = threading.Lock()
        self._one_at_a_time = threading.Lock()
        self._failed: dict[str, None] = {}  # in the order reported
        self._taken: set[str] = set()
        self._reran: dict[str, Outcome] = {}
        self._faulted = False  # an early rerun could not run: no runner tries again

    def seen(self, outcome: Outcome) -> None:
        """An outcome a shard reported: a failure is to be rerun."""
        if outcome.status.is_failure:
            with self._lock:
                self._failed.setdefault(outcome.id)

    def idle(self) -> None:
        """A runner with nothing left: rerun the failures no one took yet, until none is left
        (or another runner is rerunning already, or the run is stopped)."""
        if not self._one_at_a_time.acquire(blocking=False):
            return
        try:
            while not self._stop.is_set() and not self._faulted:
                with self._lock:
                    ids = [vid for vid in self._failed if vid not in self._taken]
                    self._taken.update(ids)
                if not ids:
                    return
                result = self._run(ids)
                asked = set(ids)
                came = {o.id: o for o in result.outcomes if o.id in asked}
                with self._lock:
                    self._reran.update(came)
                    # what came back without a result is the round's: it meets any fault again
                    self._taken.difference_update(vid for vid in ids if vid not in came)
                if result.fault is not None:
                    self._faulted = True
                    return
        finally:
            self._one_at_a_time.release()

    @property
    def reran(self) -> dict[str, Outcome]:
        with self._lock:
            return dict(self._reran)

    def answer(self, ids: Sequence[str], run: RunIds) -> ShardRun:
        """The rerun round's `ids`: the early reruns' outcomes, and `run` for the rest."""
        done = self.reran
        rest = [vid for vid in ids if vid not in done]
        fresh = run(rest) if rest else ShardRun([])
        by_id = {o.id: o for o in fresh.outcomes} | {v: done[v] for v in ids if v in done}
        asked = set(ids)
        ordered = [by_id[vid] for vid in ids if vid in by_id]
        extra = [o for o in fresh.outcomes if o.id not in asked]
        return ShardRun(ordered + extra, fresh.fault, fresh.junit_paths)
