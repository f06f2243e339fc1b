from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from contracts.run_summary import RunResults, RunSummary
from selector.history import History, HistoryUpdate, OutcomeRecord, apply_update
from suites.model import Status
from workflows.stores.history import (
    HistoryError,
    HistoryStore,
    RedisHistory,
    RunRecord,
    RunState,
    SQLiteHistory,
    open_history,
)

FIRST = HistoryUpdate(
    outcomes=(
        OutcomeRecord("a", Status.PASSED, 2.0),
        OutcomeRecord("b", Status.FAILED, 1.0),
        OutcomeRecord("b", Status.FAILED, 1.5),
    ),
    baseline={"a": Status.PASSED, "b": Status.FAILED},
    co_failures={"aten/src/ATen/native/SoftMax.cpp": ("b",)},
    known_variants=frozenset({"a", "b", "c"}),
)
SECOND = HistoryUpdate(
    outcomes=(OutcomeRecord("a", Status.FAILED, 4.0), OutcomeRecord("a", Status.PASSED, 3.0)),
    mark_flaky=("a",),
    co_failures={"aten/src/ATen/native/SoftMax.cpp": ("b",), "torch/nn/functional.py": ("a",)},
)
PATHS = ["aten/src/ATen/native/SoftMax.cpp", "torch/nn/functional.py", "README.md"]


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HistoryStore]:
    if request.param == "sqlite":
        yield SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    else:
        yield RedisHistory(request.getfixturevalue("redis_server"))


def test_store_follows_the_selectors_reference_semantics(store: HistoryStore) -> None:
    store.apply("r1", FIRST)
    store.apply("r2", SECOND)
    expected = apply_update(apply_update(History(), FIRST), SECOND)
    snapshot = store.snapshot(PATHS)
    assert snapshot.variants == expected.variants
    assert snapshot.known_variants == frozenset({"a", "b", "c"})
    assert snapshot.co_failures == {
        "aten/src/ATen/native/SoftMax.cpp": {"b": 2},
        "torch/nn/functional.py": {"a": 1},
    }
    a = snapshot.variants["a"]
    assert a.recent == (Status.PASSED, Status.FAILED, Status.PASSED) and a.flaky
    assert a.mean_duration_s == pytest.approx(3.0)


def test_applying_the_same_run_twice_changes_nothing(store: HistoryStore) -> None:
    store.apply("r1", FIRST)
    once = store.snapshot(PATHS)
    store.apply("r1", FIRST)  # a redelivered finish task
    assert store.snapshot(PATHS) == once


def test_runs_listed_newest_first(store: HistoryStore) -> None:
    summary = RunSummary(results=RunResults(failed=0))
    store.save_run(RunRecord("run-1", RunState.COMPLETED, summary=summary))
    store.save_run(RunRecord("run-2", RunState.PLANNED))
    assert [r.run_id for r in store.list_runs()] == ["run-2", "run-1"]
    run = store.get_run("run-1")
    assert run is not None and run.summary == summary
    assert store.get_run("nope") is None


def test_run_heads_are_the_runs_listed_decoded_in_part(store: HistoryStore) -> None:
    """`list_run_heads` (what forensics reads over 500 runs): the same runs, newest first,
    with the same id, state, time and plan facts as `list_runs`, the rest left undecoded."""
    from contracts.backend import BackendId
    from contracts.run_summary import PlanFacts

    plan = PlanFacts(
        event="push 0123", kind="push", head_sha="a" * 40, selected=3,
        backend=BackendId(package="backend_under_test", version="0.1.0", device="spyre"),
        torch_sha="b" * 12,
    )  # fmt: skip
    summary = RunSummary(plan=plan, results=RunResults(failed=2))
    store.save_run(RunRecord("run-1", RunState.COMPLETED, created_at=10.0, summary=summary))
    store.save_run(RunRecord("run-2", RunState.PLANNED, created_at=20.0))  # no plan facts
    heads, runs = store.list_run_heads(), store.list_runs()
    assert [h.run_id for h in heads] == [r.run_id for r in runs] == ["run-2", "run-1"]
    for head, run in zip(heads, runs, strict=True):
        assert (head.state, head.created_at, head.plan) == (
            run.state, run.created_at, run.summary.plan,
        )  # fmt: skip
    assert heads[1].plan == plan and heads[0].plan is None
    assert [h.run_id for h in store.list_run_heads(limit=1)] == ["run-2"]


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


def test_an_update_in_another_order_is_still_recorded_once(store: HistoryStore) -> None:
    # A resumed finish hands the same outcomes over in another order: keyed by
    # (run, variant, attempt), not by position, nothing is added twice.
    store.apply("r1", FIRST)
    once = store.snapshot(PATHS)
    reordered = HistoryUpdate(
        outcomes=tuple(reversed(FIRST.outcomes)),
        baseline=FIRST.baseline,
        co_failures=FIRST.co_failures,
        known_variants=FIRST.known_variants,
    )
    store.apply("r1", reordered)
    assert store.snapshot(PATHS) == once


def test_forget_removes_exactly_what_one_run_taught(store: HistoryStore) -> None:
    store.apply("r1", FIRST)
    before = store.snapshot(PATHS)
    poisoned = HistoryUpdate(
        outcomes=(OutcomeRecord("a", Status.ERROR, 0.0), OutcomeRecord("c", Status.ERROR, 0.0)),
        mark_flaky=("b",),
        baseline={"a": Status.ERROR, "c": Status.ERROR},
        co_failures={"aten/src/ATen/native/SoftMax.cpp": ("a", "c")},
        known_variants=frozenset({"a", "c"}),
    )
    store.apply("bad", poisoned)
    assert store.snapshot(PATHS) != before
    removed = store.forget("bad")
    assert removed["outcome"] == 2 and removed["baseline"] == 2 and removed["cofailure"] == 2
    assert store.snapshot(PATHS) == before  # baselines it replaced are back
    assert not any(store.forget("bad").values())  # idempotent


def test_a_held_update_is_not_learned_until_confirmed(store: HistoryStore) -> None:
    store.hold("r1", FIRST, "every variant of shard-0 failed alike")
    assert store.snapshot(PATHS) == History()
    held = store.held("r1")
    assert held is not None and held[1] == "every variant of shard-0 failed alike"
    assert held[0] == FIRST
    assert store.confirm("r1")
    learned = store.snapshot(PATHS)
    assert learned.variants == apply_update(History(), FIRST).variants
    assert learned.co_failures == {"aten/src/ATen/native/SoftMax.cpp": {"b": 1}}
    assert store.held("r1") is None and not store.confirm("r1")


def test_a_history_file_of_the_first_layout_is_migrated_in_place(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "history.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE outcome (run_id TEXT NOT NULL, seq INTEGER NOT NULL, variant TEXT NOT NULL,
            status TEXT NOT NULL, duration_s REAL NOT NULL, at REAL NOT NULL,
            PRIMARY KEY (run_id, seq));
        CREATE TABLE baseline (variant TEXT PRIMARY KEY, status TEXT NOT NULL,
            run_id TEXT NOT NULL);
        CREATE TABLE known (one INTEGER PRIMARY KEY CHECK (one = 1), run_id TEXT,
            ids TEXT NOT NULL);
        INSERT INTO outcome VALUES ('r0', 0, 'a', 'passed', 1.0, 1.0);
        INSERT INTO outcome VALUES ('r0', 1, 'a', 'failed', 1.0, 1.0);
        INSERT INTO baseline VALUES ('a', 'failed', 'r0');
        INSERT INTO known VALUES (1, 'r0', '["a", "b"]');
    """)
    db.commit()
    db.close()
    snapshot = SQLiteHistory(path).snapshot()
    assert snapshot.variants["a"].recent == (Status.PASSED, Status.FAILED)
    assert snapshot.variants["a"].baseline is Status.FAILED
    assert snapshot.known_variants == frozenset({"a", "b"})
    SQLiteHistory(path).forget("r0")
    assert SQLiteHistory(path).snapshot() == History()


def test_a_redis_password_never_reaches_a_message() -> None:
    store = RedisHistory("redis://spyre:s3cret-pw@127.0.0.1:1/0")
    with pytest.raises(HistoryError) as caught:
        store.list_runs()
    assert "s3cret-pw" not in str(caught.value)
    assert "redis://spyre:***@127.0.0.1:1/0" in str(caught.value)


def _scans(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_scan", {}).get("calls", 0))


def test_a_redis_snapshot_reads_its_index_not_the_keyspace(redis_server: str) -> None:
    client = redis.Redis.from_url(redis_server, decode_responses=True)
    # A store written before the index: its lists exist, no `ids:*` keys.
    client.rpush("spyre-ci:history:v:old", '["failed", 1.0, "r0", 1]')
    client.rpush("spyre-ci:history:b:old", '["failed", "r0"]')
    client.mset({f"spyre-ci:history:run:run-{i}": "{}" for i in range(3000)})  # other keys
    store = RedisHistory(redis_server)
    first = store.snapshot()
    assert first.variants["old"].recent == (Status.FAILED,)
    assert first.variants["old"].baseline is Status.FAILED
    scans = _scans(client)
    assert scans > 0  # the one-time scan of the old layout
    store.apply("r1", FIRST)
    expected = apply_update(first, FIRST)
    for _ in range(3):
        assert store.snapshot(PATHS).variants == expected.variants
    assert _scans(client) == scans  # later snapshots read `ids:v` and `ids:b` only
    store.forget("r1")
    assert store.snapshot().variants == first.variants
