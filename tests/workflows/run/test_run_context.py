"""The pipeline runs on the context it is handed: a temporary History, a fixed clock, no
GitHub; no environment variable is set for it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from suites.model import Outcome, Status
from tests.workflows.run.test_infra_faults import _request
from tests.workflows.run_context import run_context
from workflows.run import finishing, pipeline
from workflows.run.context import RunContext
from workflows.runner.shard_runner import ShardRun
from workflows.settings import Settings
from workflows.stores.history import RunState, SQLiteHistory
from workflows.tracing.trace_store import SQLiteTraces

NOON = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC).timestamp()


def test_plan_and_finish_take_their_time_and_history_from_the_context(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    ctx = run_context(history, clock=lambda: NOON)
    planned = pipeline.plan(_request(tiny_inventory, tmp_path / "out", "ctx-1"), ctx)
    assert planned.started_at == "2026-06-01T12:00:00Z"
    assert ctx.layout(planned.request).planned_file.is_file()
    ids = [v for shard in planned.shards for v in shard]
    finished = finishing.finish(
        planned,
        [Outcome(v, Status.PASSED, 0.1) for v in ids],
        ctx,
        lambda _name, _ids: ShardRun([]),
    )
    assert finished.exit_code == 0
    run = history.get_run("ctx-1")
    assert run is not None and run.state is RunState.COMPLETED
    assert run.summary.finished_at == NOON
    assert set(history.snapshot().variants) == set(ids)  # learned into the handed History


def test_a_context_opened_from_settings_has_their_history_traces_and_github(
    tmp_path: Path,
) -> None:
    plain = RunContext.open(Settings(state_dir=tmp_path / "s", redis_url=None))
    assert isinstance(plain.history, SQLiteHistory)
    assert plain.history.path == tmp_path / "s" / "history.sqlite3"
    assert isinstance(plain.traces, SQLiteTraces) and plain.sources is None
    configured = Settings(
        state_dir=tmp_path / "s", redis_url=None, github_url="http://gh", github_token="t"
    )
    sources = RunContext.open(configured, plain.history).sources
    assert sources is not None and sources.cache_dir == tmp_path / "s" / "github-sources"
