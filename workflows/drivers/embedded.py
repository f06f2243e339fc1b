"""The embedded executor: the whole main job in one process tree, no services needed.

Shards run as pytest subprocesses, `jobs` at a time (threads only wait on them), the longest
(by the plan's History estimate) first; a runner with nothing left to start steals the tail
of the shard with the most time left (`workflows/runner/stealing.py`), so the runners finish
together. A runner with nothing left to run or steal reruns the failures reported so far
(`workflows/drivers/early_reruns.py`): stage 4's rerun round then runs only what no runner
took. The warm runner's zygotes (`workflows/runner/zygote.py`: the changed torch's and the
base's, `pipeline.warm_up`) start warming before the plan is made and stop when the run ends;
`SPYRE_CI_ZYGOTE=0` (the context's `settings.zygote`) starts every test process cold. A run
holds its out directory from its plan to its last export (`run_folder.holding`): a second
run, or a `runs resume`, into the same `--out` meanwhile is refused, naming the run that holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from suites.claims import Claims
from suites.model import Outcome
from workflows.drivers.early_reruns import EarlyReruns
from workflows.drivers.progress import Progress
from workflows.run import finishing, pipeline, run_folder, run_model
from workflows.run.context import RunContext
from workflows.run.layout import RERUN_SHARD, shard_name
from workflows.runner import stealing, zygote
from workflows.runner.shard_runner import ProgressCallback, ShardRun


def run(
    request: run_model.RunRequest, ctx: RunContext, jobs: int = 1, show_progress: bool = True
) -> run_model.FinishedRun:
    """plan -> shards in a pool of `jobs` -> finish; returns the finished run."""
    with run_folder.holding(Path(request.out_dir), request.run_id):
        _warm_up(request, ctx)
        try:
            planned = pipeline.plan(request, ctx)
        except BaseException:
            zygote.stop_all()
            raise
        return _execute(planned, ctx, jobs, show_progress, done={})


def resume(
    run_id: str, ctx: RunContext, jobs: int = 1, show_progress: bool = True
) -> run_model.FinishedRun:
    """Continue a run that stopped: keep what its shards reported, run the rest, finish."""
    run = ctx.history.get_run(run_id)
    if run is None:
        raise run_model.PipelineError(
            f"no run {run_id!r} in History; `spyre-ci runs list` shows the ids"
        )
    if run.state.final:
        raise run_model.PipelineError(f"run {run_id} is already {run.state}: nothing to resume")
    with run_folder.holding(Path(run.summary.out_dir), run_id):
        planned = run_folder.load_planned(run.summary.out_dir, run_id)
        _warm_up(planned.request, ctx)
        names = ctx.layout(planned.request).shard_names(len(planned.shards))
        done = {name: run_folder.recorded_outcomes(planned.request, name) for name in names}
        return _execute(planned, ctx, jobs, show_progress, done)


def _warm_up(request: run_model.RunRequest, ctx: RunContext) -> None:
    pipeline.warm_up(request, ctx.settings)


def _shards(planned: run_model.PlannedRun) -> list[tuple[str, list[str], float]]:
    """(name, ids, estimated seconds) of each shard: the plan's History estimates."""
    estimates = {shard.index: shard.estimated_s for shard in planned.plan.shards}
    return [
        (shard_name(i), list(ids), estimates.get(i, float(len(ids))))
        for i, ids in enumerate(planned.shards)
    ]


def _execute(
    planned: run_model.PlannedRun,
    ctx: RunContext,
    jobs: int,
    show_progress: bool,
    done: Mapping[str, Mapping[str, Outcome]],
) -> run_model.FinishedRun:
    request = planned.request
    settings = ctx.settings
    kept = [o for outcomes in done.values() for o in outcomes.values()]
    total = sum(len(s) for s in planned.shards)
    progress = Progress(total) if show_progress else None
    if progress is not None:
        for outcome in kept:
            progress(outcome)

    stop = threading.Event()  # set on Ctrl-C / SIGTERM: every shard's process group dies

    def run_alone(name: str, ids: Sequence[str]) -> ShardRun:
        if progress is not None:
            progress.start_phase(name, len(ids))
        return pipeline.execute_shard(
            request, name, ids, progress, settings=settings, parallel=1, stop=stop
        )

    def rerun_early(ids: Sequence[str]) -> ShardRun:
        # Beside a shard still running, yet with the round's threads (`parallel=1`): a
        # rerun's environment, hence its verdict, is the same whenever it runs.
        return pipeline.execute_shard(
            request, RERUN_SHARD, ids, None, settings=settings, parallel=1, stop=stop
        )

    early = EarlyReruns(rerun_early, stop)

    def execute(name: str, ids: Sequence[str]) -> ShardRun:
        if name == RERUN_SHARD:
            return early.answer(ids, lambda rest: run_alone(name, rest))
        return run_alone(name, ids)

    def report(outcome: Outcome) -> None:
        early.seen(outcome)
        if progress is not None:
            progress(outcome)

    def run_part(
        name: str, ids: Sequence[str], claims: Claims, report: ProgressCallback
    ) -> ShardRun:
        return pipeline.execute_shard(
            request,
            name,
            ids,
            report,
            settings=settings,
            stop=stop,
            claims=claims,
        )

    try:
        work = ctx.layout(request).work
        work.mkdir(parents=True, exist_ok=True)
        pooled = stealing.run_pool(
            _shards(planned),
            run_part,
            jobs,
            work,
            warm=settings.zygote,
            stop=stop,
            progress=report,
            done={name: list(outcomes) for name, outcomes in done.items()},
            idle=early.idle if request.rerun_failures else None,
        )
        outcomes = kept + pooled.outcomes
        faults = [run.fault for run in pooled.runs if run.fault is not None]
        finished = finishing.finish(planned, outcomes, ctx, execute, faults)
    except BaseException as exc:
        stop.set()
        zygote.stop_all()
        pipeline.mark_stopped(ctx.history, request.run_id, exc)
        raise
    zygote.stop_changed()  # the installed torch's zygote serves this process's next run
    if progress is not None:
        progress.finish()
    return finished
