from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from suites.model import Outcome, Status
from workflows.history import (
    History,
    HistoryError,
    RedisHistory,
    RunRecord,
    SQLiteHistory,
    open_history,
)


@pytest.fixture(params=["sqlite", "redis"])
def history(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[History]:
    if request.param == "sqlite":
        yield SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    else:
        yield RedisHistory(request.getfixturevalue("redis_server"))


def test_outcomes_flaky_and_baseline(history: History) -> None:
    first = [Outcome("a", Status.PASSED, 2.0), Outcome("b", Status.FAILED, 1.0)]
    history.record_outcomes("r1", first, baseline=True)
    history.record_outcomes("r2", [Outcome("a", Status.FAILED, 4.0)], flaky=["a"])
    records = history.variants()
    assert records["a"].recent == ("failed", "passed")
    assert records["a"].mean_duration_s == pytest.approx(3.0)
    assert records["a"].flaky and not records["b"].flaky
    assert records["a"].baseline == "passed" and records["b"].baseline == "failed"
    assert set(history.variants(["b", "zzz"])) == {"b"}


def test_recording_the_same_run_twice_changes_nothing(history: History) -> None:
    outcomes = [Outcome("a", Status.PASSED, 1.0)]
    history.record_outcomes("r1", outcomes)
    history.record_outcomes("r1", outcomes)  # a redelivered task
    history.record_cofailures("r1", ["aten/x.cpp"], ["a"])
    history.record_cofailures("r1", ["aten/x.cpp"], ["a"])
    assert history.variants()["a"].recent == ("passed",)
    assert history.cofailures(["aten/x.cpp", "other"]) == {"aten/x.cpp": {"a": 1}}
    history.record_cofailures("r2", ["aten/x.cpp"], ["a"])
    assert history.cofailures(["aten/x.cpp"]) == {"aten/x.cpp": {"a": 2}}


def test_runs_listed_newest_first(history: History) -> None:
    history.save_run(RunRecord("run-1", "completed", summary={"failed": 0}))
    history.save_run(RunRecord("run-2", "running"))
    assert [r.run_id for r in history.list_runs()] == ["run-2", "run-1"]
    run = history.get_run("run-1")
    assert run is not None and run.summary == {"failed": 0}
    assert history.get_run("nope") is None


def test_redis_outage_is_a_clear_error() -> None:
    store = RedisHistory("redis://127.0.0.1:1/0")
    with pytest.raises(HistoryError, match=r"redis://127\.0\.0\.1:1/0.*listing runs"):
        store.list_runs()


def test_corrupt_sqlite_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(HistoryError, match="history.sqlite3"):
        SQLiteHistory(path)


def test_open_history_picks_the_store(tmp_path: Path) -> None:
    assert isinstance(open_history(tmp_path), SQLiteHistory)
    assert isinstance(open_history(tmp_path, "redis://127.0.0.1:1/0"), RedisHistory)
