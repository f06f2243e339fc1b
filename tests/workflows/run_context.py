"""The run context a test hands to the pipeline: no environment read, nothing shared."""

from __future__ import annotations

import time

from workflows.run.context import Clock, RunContext
from workflows.settings import Settings
from workflows.stores.history import SQLiteHistory
from workflows.tracing.trace_store import trace_store_for


def run_context(history: SQLiteHistory, clock: Clock = time.time) -> RunContext:
    """A run over `history` (a temporary SQLite file): its state directory is the file's
    folder (the base outcomes' cache), its traces are stored beside it, no GitHub is asked,
    and `clock` tells the time."""
    settings = Settings(state_dir=history.path.parent, redis_url=None)
    return RunContext(settings, history, trace_store_for(history), None, clock)
