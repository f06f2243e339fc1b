"""The embedded executor: the whole main job in one process tree, no services needed.

Shards run as pytest subprocesses, `jobs` at a time (threads only wait on them).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from suites.model import Outcome
from workflows import pipeline
from workflows.history import History
from workflows.progress import Progress


def run(request: pipeline.RunRequest, history: History, jobs: int = 1,
        show_progress: bool = True) -> pipeline.FinishedRun:
    """plan -> shards in a pool of `jobs` -> finish; returns the finished run."""
    planned = pipeline.plan(request, history)
    total = sum(len(s) for s in planned.shards)
    progress = Progress(total) if show_progress else None

    def execute(name: str, ids: Sequence[str]) -> list[Outcome]:
        if progress is not None:
            progress.add_total(len(ids))
        return pipeline.execute_shard(request, name, ids, progress)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [
            pool.submit(pipeline.execute_shard, request, f"shard-{i}", ids, progress)
            for i, ids in enumerate(planned.shards)
        ]
        outcomes = [o for future in futures for o in future.result()]
    finished = pipeline.finish(planned, outcomes, history, execute)
    if progress is not None:
        progress.finish()
    return finished
