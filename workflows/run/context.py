"""The services a run uses, built once where a process starts and handed in.

`RunContext` holds the settings, History, the trace store beside it, the GitHub old-side
sources and a clock. The `spyre-ci` commands that run or read runs build it from the
environment (`RunContext.open`), a Celery worker builds it at its start
(`workflows.drivers.distributed.celery_app`), and a test builds one over a temporary History
with a fixed clock: nothing below reads the environment for them. Each run's files are
placed by `layout(request)` (`workflows.run.layout.RunLayout`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workflows.run.layout import RunLayout
from workflows.run.run_model import RunRequest
from workflows.settings import Settings
from workflows.stores.history import HistoryStore, open_history
from workflows.stores.sources import GitHubSources, github_sources
from workflows.tracing.trace_store import TraceStore, trace_store_for

Clock = Callable[[], float]  # seconds since the epoch, as `time.time`


@dataclass(frozen=True)
class RunContext:
    settings: Settings
    history: HistoryStore
    traces: TraceStore | None = None  # None: no traces are joined or stored
    sources: GitHubSources | None = None  # None: no GitHub for old-side sources
    clock: Clock = field(default=time.time)

    @classmethod
    def open(cls, settings: Settings, history: HistoryStore | None = None) -> RunContext:
        """The context the settings configure: their History (or `history`), the trace store
        beside it, their GitHub sources. Raises HistoryError when History cannot be opened."""
        if history is None:
            history = open_history(settings.state_dir, settings.redis_url)
        return cls(settings, history, trace_store_for(history), github_sources(settings))

    def layout(self, request: RunRequest) -> RunLayout:
        """Where the files of `request`'s run live."""
        return RunLayout.of(request)
