"""The embedded executor: the whole main job in one process tree, no services needed.

Shards run as pytest subprocesses, `jobs` at a time (threads only wait on them).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from suites.model import Outcome
from workflows import pipeline
from workflows.history import HistoryStore
from workflows.progress import Progress


def run(
    request: pipeline.RunRequest, history: HistoryStore, jobs: int = 1, show_progress: bool = True
) -> pipeline.FinishedRun:
    """plan -> shards in a pool of `jobs` -> finish; returns the finished run."""
    planned = pipeline.plan(request, history)
    return _execute(planned, history, jobs, show_progress, done={})


def resume(
    run_id: str, history: HistoryStore, jobs: int = 1, show_progress: bool = True
) -> pipeline.FinishedRun:
    """Continue a run that stopped: keep what its shards reported, run the rest, finish."""
    run = history.get_run(run_id)
    if run is None:
        raise pipeline.PipelineError(
            f"no run {run_id!r} in History; `spyre-ci runs list` shows the ids"
        )
    if run.state.final:
        raise pipeline.PipelineError(f"run {run_id} is already {run.state}: nothing to resume")
    planned = pipeline.load_planned(run.summary["out_dir"], run_id)
    done = {
        f"shard-{i}": pipeline.recorded_outcomes(planned.request, f"shard-{i}")
        for i in range(len(planned.shards))
    }
    return _execute(planned, history, jobs, show_progress, done)


def _execute(
    planned: pipeline.PlannedRun,
    history: HistoryStore,
    jobs: int,
    show_progress: bool,
    done: Mapping[str, Mapping[str, Outcome]],
) -> pipeline.FinishedRun:
    request = planned.request
    kept = [o for outcomes in done.values() for o in outcomes.values()]
    total = sum(len(s) for s in planned.shards)
    progress = Progress(total) if show_progress else None
    if progress is not None:
        for outcome in kept:
            progress(outcome)

    stop = threading.Event()  # set on Ctrl-C / SIGTERM: every shard's process group dies

    def execute(name: str, ids: Sequence[str]) -> pipeline.ShardRun:
        if progress is not None:
            progress.add_total(len(ids))
        return pipeline.execute_shard(request, name, ids, progress, parallel=1, stop=stop)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = []
        for i, ids in enumerate(planned.shards):
            name = f"shard-{i}"
            todo = [v for v in ids if v not in done.get(name, {})]
            futures.append(
                pool.submit(pipeline.execute_shard, request, name, todo, progress, stop=stop)
            )
        shards = [future.result() for future in futures]
        outcomes = kept + [o for shard in shards for o in shard.outcomes]
        faults = [shard.fault for shard in shards if shard.fault is not None]
        finished = pipeline.finish(planned, outcomes, history, execute, faults)
    except BaseException as exc:
        # Not `with pool`: its exit would wait for every shard to end on its own.
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        pipeline.mark_stopped(history, request.run_id, exc)
        raise
    pool.shutdown()
    if progress is not None:
        progress.finish()
    return finished
