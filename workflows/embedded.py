"""The embedded executor: the whole main job in one process tree, no services needed.

Shards run as pytest subprocesses, `jobs` at a time (threads only wait on them), the longest
(by the plan's History estimate) first. The warm runner's zygote (`workflows/zygote.py`)
starts warming before the plan is made and stops when the run ends.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from suites.model import Outcome
from workflows import pipeline, zygote
from workflows.history import HistoryStore
from workflows.progress import Progress
from workflows.settings import zygote_enabled
from workflows.shard_runner import PLUGIN


def run(
    request: pipeline.RunRequest, history: HistoryStore, jobs: int = 1, show_progress: bool = True
) -> pipeline.FinishedRun:
    """plan -> shards in a pool of `jobs` -> finish; returns the finished run."""
    _warm_up(request)
    try:
        planned = pipeline.plan(request, history)
    except BaseException:
        zygote.stop_all()
        raise
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
    _warm_up(planned.request)
    done = {
        f"shard-{i}": pipeline.recorded_outcomes(planned.request, f"shard-{i}")
        for i in range(len(planned.shards))
    }
    return _execute(planned, history, jobs, show_progress, done)


def _warm_up(request: pipeline.RunRequest) -> None:
    if zygote_enabled():
        zygote.prestart(PLUGIN, request.specs)


def _longest_first(planned: pipeline.PlannedRun) -> list[int]:
    """Shard indexes by the plan's estimated seconds, longest first: with fewer jobs than
    shards, the long ones start early and the short ones fill the gaps at the end."""
    estimates: dict[int, float] = {}
    for shard in planned.plan.get("shards") or ():
        if isinstance(shard, dict) and isinstance(shard.get("estimated_s"), int | float):
            estimates[int(shard.get("index", -1))] = float(shard["estimated_s"])
    order = range(len(planned.shards))
    return sorted(order, key=lambda i: (-estimates.get(i, len(planned.shards[i])), i))


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
        futures = {}
        for i in _longest_first(planned):
            name = f"shard-{i}"
            todo = [v for v in planned.shards[i] if v not in done.get(name, {})]
            futures[i] = pool.submit(
                pipeline.execute_shard, request, name, todo, progress, stop=stop
            )
        shards = [futures[i].result() for i in range(len(planned.shards))]
        outcomes = kept + [o for shard in shards for o in shard.outcomes]
        faults = [shard.fault for shard in shards if shard.fault is not None]
        finished = pipeline.finish(planned, outcomes, history, execute, faults)
    except BaseException as exc:
        # Not `with pool`: its exit would wait for every shard to end on its own.
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        zygote.stop_all()
        pipeline.mark_stopped(history, request.run_id, exc)
        raise
    pool.shutdown()
    zygote.stop_all()
    if progress is not None:
        progress.finish()
    return finished
