"""Shard leases on a real Redis: one owner at a time, results recorded once, by the owner."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from suites.model import Outcome, Status
from workflows.drivers import distributed
from workflows.drivers.distributed import celery_app, finish, keys, outages, shard, tasks, watch
from workflows.run.layout import RunLayout

RUN = "lease-run"
RECORDS = (
    Path(__file__).resolve().parents[1] / "data" / "records"
)  # a plan as an earlier version saved it


@pytest.fixture()
def store(redis_server: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server, decode_responses=True)
    client.set(f"spyre-ci:run:{RUN}:planned", "{}")
    yield client
    client.close()


TTL_S = 3.0  # the shortest lease the settings take (SPYRE_CI_LEASE_TTL)


def lease(store: redis.Redis, owner: str, ttl_s: float = TTL_S) -> distributed.ShardLease:
    options = {"task_id": "t-0", "group_id": "g", "group_index": 0, "retries": 0}
    return distributed.ShardLease(store, RUN, 0, f"{owner}@host/1/abc", options, ttl_s)


@pytest.fixture()
def worker_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's run context, as its start builds it, with a lease of TTL_S."""
    from tests.workflows.run_context import run_context
    from workflows.stores.history import SQLiteHistory

    ctx = run_context(SQLiteHistory(tmp_path / "state" / "history.sqlite3"))
    ctx = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, lease_ttl_s=TTL_S))
    monkeypatch.setattr(celery_app, "_context", [ctx])


def expire(store: redis.Redis) -> None:
    store.delete(f"spyre-ci:run:{RUN}:lease:0")  # what the TTL does when heartbeats stop


def outcome(vid: str) -> Outcome:
    return Outcome(vid, Status.PASSED, 0.1, "")


def test_one_owner_at_a_time_and_a_taken_over_owner_records_nothing(store: redis.Redis) -> None:
    first, second = lease(store, "a"), lease(store, "b")
    assert first.acquire() is None
    assert second.acquire() == first.token  # held: the second delivery leaves it
    assert first.renew()
    first.keep(outcome("v1"))

    expire(store)
    assert second.acquire() is None  # the takeover
    assert second.kept_outcomes() == {"v1": outcome("v1")}  # what the first finished
    assert not first.renew()  # the first learns it lost the lease ...
    first.keep(outcome("v2"))  # ... and can neither add outcomes ...
    assert not first.record({"outcomes": [], "owner": first.token})  # ... nor record
    assert second.kept_outcomes().keys() == {"v1"}

    assert second.record({"outcomes": ["x"], "owner": second.token})
    stored = json.loads(str(store.hget(f"spyre-ci:run:{RUN}:shards", "0")))
    assert stored["owner"] == second.token
    assert not store.exists(f"spyre-ci:run:{RUN}:lease:0", f"spyre-ci:run:{RUN}:partial:0")
    assert not store.hexists(distributed.LEASED, f"{RUN}:0")
    assert lease(store, "c").acquire() == keys.DONE  # a late delivery: done


def test_an_expired_lease_nobody_took_is_taken_back_by_its_owner(store: redis.Redis) -> None:
    first = lease(store, "a")
    assert first.acquire() is None
    expire(store)  # a Redis blip longer than the lease, and no sweep meanwhile
    assert first.renew()
    assert lease(store, "b").acquire() == first.token


def test_a_result_is_recorded_once(store: redis.Redis) -> None:
    first = lease(store, "a")
    assert first.acquire() is None
    assert first.record({"outcomes": [], "owner": "first"})
    assert first.record({"outcomes": [], "owner": "again"})  # stored already: left as it is
    assert json.loads(str(store.hget(f"spyre-ci:run:{RUN}:shards", "0")))["owner"] == "first"


def test_the_sweep_sends_again_only_shards_whose_lease_expired(
    store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[tuple[str, int], dict[str, object]]] = []

    def apply_async(args: tuple[str, int], **options: object) -> None:
        sent.append((args, options))

    monkeypatch.setattr(watch.shard_task, "apply_async", apply_async)
    held = lease(store, "a")
    assert held.acquire() is None
    assert distributed.sweep(store, TTL_S) == []  # alive: left alone

    expire(store)
    store.delete("spyre-ci:shards:sweep-lock")
    assert distributed.sweep(store, TTL_S) == [f"{RUN}:0"]
    assert sent == [((RUN, 0), held.options)]  # the same task id, chord place and retries
    store.delete("spyre-ci:shards:sweep-lock")
    assert distributed.sweep(store, TTL_S) == []  # queued again: not sent twice
    entry = json.loads(str(store.hget(distributed.LEASED, f"{RUN}:0")))
    assert entry["state"] == "requeued"

    # Not taken for two leases and not in the queue: lost with a dead worker, sent again.
    store.delete("spyre-ci:shards:sweep-lock")
    assert distributed.sweep(store, TTL_S, now=entry["since"] + 7) == [f"{RUN}:0"]


def test_a_swept_shard_of_a_finished_or_vanished_run_is_forgotten(store: redis.Redis) -> None:
    assert lease(store, "a").acquire() is None
    expire(store)
    store.delete(f"spyre-ci:run:{RUN}:planned")
    assert distributed.sweep(store, TTL_S) == []
    assert not store.hexists(distributed.LEASED, f"{RUN}:0")


def test_plan_and_finish_wait_out_a_redis_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed Celery task is acknowledged as done: a plan or finish that met a Redis
    restart lost its run. They wait for Redis instead (and give up after a bound)."""
    from workflows.stores.history import HistoryError

    monkeypatch.setattr(outages.time, "sleep", lambda s: None)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise HistoryError("Redis History at redis://***@x: recording failed")
        return "planned"

    assert distributed.through_outages("plan of run r", flaky) == "planned"
    assert len(calls) == 3
    down = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    with pytest.raises(redis.RedisError):
        distributed.through_outages("finish of run r", down.ping, wait_s=0.0)

    def broken() -> str:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        distributed.through_outages("plan of run r", broken)
    # The task bodies go through it: a plan whose History write fails the first time.
    planned_calls: list[int] = []

    def plan_once(request: object, token: str) -> str:
        planned_calls.append(1)
        if len(planned_calls) == 1:
            raise redis.ConnectionError("Connection refused")
        return "run-x"

    monkeypatch.setattr(tasks, "plan", plan_once)
    from contracts.event import TriggerEvent
    from workflows.run import run_model

    event = TriggerEvent(
        kind="push", delivery_id="d", repo="pytorch/pytorch", head_sha="a" * 40, source="cli"
    )
    request = run_model.RunRequest(run_id="run-x", event=event, out_dir="o", inventory="i")
    assert distributed.plan_task(request.to_json()) == "run-x" and len(planned_calls) == 2


def test_outcomes_finished_during_an_outage_are_kept_once_redis_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A takeover skips every test the owner finished, also those that ended while Redis
    was down (they wait in the lease and go with the next outcome)."""
    from tests.e2e.test_redis_restart import RestartableRedis

    server = RestartableRedis(tmp_path)
    server.start()
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        client.set(f"spyre-ci:run:{RUN}:planned", "{}")
        owner = lease(client, "a", ttl_s=30.0)
        assert owner.acquire() is None
        owner.keep(outcome("v1"))
        server.stop()
        owner.keep(outcome("v2"))  # Redis is down: nothing raised, nothing lost
        owner.keep(outcome("v3"))
        server.start()
        owner.keep(outcome("v4"))
        assert sorted(owner.kept_outcomes()) == ["v1", "v2", "v3", "v4"]
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()


@pytest.mark.usefixtures("worker_context")
def test_a_run_whose_chord_never_fired_is_finished_by_the_sweep_once(
    store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every shard recorded, no finish: the sweep sends it after two leases, once; a finish
    of a finished run returns the stored summary, and one of a run being finished stays out."""
    sent: list[tuple[object, ...]] = []
    monkeypatch.setattr(watch.finish_task, "apply_async", lambda args: sent.append(args))
    run = "open-run"
    recorded = json.loads((RECORDS / "planned.json").read_text(encoding="utf-8"))
    store.set(f"spyre-ci:run:{run}:planned", json.dumps({**recorded, "shards": [["a"], ["b"]]}))
    store.hset(distributed.OPEN_RUNS, run, "1000.0")
    store.hset(f"spyre-ci:run:{run}:shards", "0", "{}")

    def swept(now: float) -> list[str]:
        store.delete(keys.SWEEP_LOCK)  # one sweep at a time: each call its own
        return distributed.sweep(store, TTL_S, now=now)

    assert swept(1010.0) == []  # a shard left: the chord may still fire
    store.hset(f"spyre-ci:run:{run}:shards", "1", "{}")
    assert swept(1001.0) == []  # within two leases of its start
    assert swept(1010.0) == [f"{run}:finish"]
    assert sent == [([], run)]
    assert swept(1012.0) == []  # sent: not again before two leases
    assert swept(1020.0) == [f"{run}:finish"]  # still not finished: sent again
    # The finish itself: once. A second, while the first holds the run, leaves it alone.
    monkeypatch.setattr(celery_app, "store", lambda: store)
    calls: list[str] = []
    monkeypatch.setattr(
        finish, "finish", lambda run_id: (calls.append(run_id), ({"n": 1}, False))[1]
    )
    store.set(f"spyre-ci:run:{run}:finishing", "another")
    from celery.exceptions import Ignore

    with pytest.raises(Ignore):
        finish.finish_once(run, "mine")
    store.delete(f"spyre-ci:run:{run}:finishing")
    assert finish.finish_once(run, "mine") == {"n": 1}
    assert finish.finish_once(run, "late") == {"n": 1} and calls == [run]
    assert not store.hexists(distributed.OPEN_RUNS, run)
    assert not store.exists(f"spyre-ci:run:{run}:finishing")


def test_an_open_run_whose_stored_plan_cannot_be_read_is_not_finished(
    store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep reads the stored plan as a PlannedRun: one it cannot read (`finish` could
    not either) leaves the open runs, and no finish is sent for it."""
    sent: list[tuple[object, ...]] = []
    monkeypatch.setattr(watch.finish_task, "apply_async", lambda args: sent.append(args))
    store.set("spyre-ci:run:unreadable:planned", json.dumps({"shards": [["a"]]}))
    store.hset(distributed.OPEN_RUNS, "unreadable", "1000.0")
    store.hset("spyre-ci:run:unreadable:shards", "0", "{}")
    assert distributed.sweep(store, TTL_S, now=1010.0) == [] and sent == []
    assert not store.hexists(distributed.OPEN_RUNS, "unreadable")


@pytest.mark.usefixtures("worker_context")
def test_a_takeover_skips_the_tests_a_dead_owner_finished_but_never_kept(
    store: redis.Redis, monkeypatch: pytest.MonkeyPatch, tiny_inventory: Path, tmp_path: Path
) -> None:
    """The dead owner's test process wrote `a` ended and `b` started into the shard's folder,
    and kept only `k` in Redis before its worker died: the new owner runs `b` and `c` only."""
    from suites.results_file import end_line, start_line
    from tests.workflows.run.test_infra_faults import _request
    from workflows.run import run_model

    request = _request(tiny_inventory, tmp_path / "out", RUN)
    recorded = json.loads((RECORDS / "planned.json").read_text(encoding="utf-8"))
    planned = dataclasses.replace(
        run_model.PlannedRun.from_json(recorded), request=request, shards=[["k", "a", "b", "c"]]
    )
    store.set(f"spyre-ci:run:{RUN}:planned", json.dumps(planned.to_json()))
    dead = lease(store, "dead")
    assert dead.acquire() is None
    dead.keep(outcome("k"))
    folder = RunLayout.of(request).shard("shard-0")
    folder.mkdir(parents=True)
    (folder / "shard-0.111.0.jsonl").write_text(
        start_line("k") + end_line(outcome("k")) + start_line("a") + end_line(outcome("a"))
        + start_line("b"),
        encoding="utf-8",
    )  # fmt: skip
    expire(store)  # its heartbeats stopped

    class Task:
        class request:  # noqa: N801 - the shape of a Celery task's request
            id, hostname, retries = "t-1", "celery@other", 0
            group, group_index, chord = "g", 0, None

    monkeypatch.setattr(celery_app, "store", lambda: store)
    monkeypatch.setattr(shard, "owner_token", lambda _request: "new@host/2/def")
    monkeypatch.setattr(shard, "task_options", lambda _task: {"task_id": "t-1"})
    begun = shard.begin(Task(), store, RUN, 0)
    assert begun is not None
    got_plan, new, kept = begun
    assert new.token == "new@host/2/def"
    assert sorted(kept) == ["a", "k"]
    todo = [vid for vid in got_plan.shards[0] if vid not in kept]
    assert todo == ["b", "c"]


def test_plans_wait_behind_shards_and_finishes(
    store: redis.Redis, redis_server: str, tiny_inventory: Path, tmp_path: Path
) -> None:
    """A plan is sent at a lower priority: kombu's Redis transport pops its list after the
    default one, which holds shards and finishes (and the sweep's re-sent shards)."""
    from tests.workflows.run.test_infra_faults import _request

    distributed.submit(_request(tiny_inventory, tmp_path / "out", "p-1"), broker_url=redis_server)
    with distributed.app.connection_for_write(redis_server) as connection:
        distributed.finish_task.apply_async(([], "p-0"), connection=connection)
    assert store.llen(keys.PLAN_QUEUE) == 1
    assert store.llen(keys.QUEUE) == 1  # the finish
    popped = store.brpop([keys.QUEUE, keys.PLAN_QUEUE], timeout=1)
    assert popped is not None and json.loads(popped[1])["headers"]["task"] == "spyre_ci.finish"
    state = distributed.status(redis_server, TTL_S)
    assert state["queue"] == 1 and state["queued_plans"] == 1


def test_the_package_builds_no_celery_app_until_one_is_asked_for() -> None:
    """`status` reads Redis only: importing the driver for it builds no app; asking for
    `app` (what `celery -A` and `spyre-ci worker` do) loads the tasks and the watch with it,
    under the names Celery routes by."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from workflows.drivers import distributed\n"
        "distributed.status, distributed.intake_alive, distributed.ShardLease\n"
        "pkg = 'workflows.drivers.distributed.'\n"
        "print(sorted(m for m in sys.modules if m.startswith(pkg)))\n"
        "app = distributed.app\n"
        "print(sorted(n for n in app.tasks if n.startswith('spyre_ci.')))\n"
        "print(pkg + 'watch' in sys.modules)\n"
        "print(all(getattr(distributed, n) is not None for n in distributed.__all__))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    ).stdout.splitlines()
    loaded = out[0]
    assert "celery_app" not in loaded and "tasks" not in loaded and "health" in loaded
    names = ["finish", "holdout", "pending_check", "plan", "shard"]
    assert out[1] == str([f"spyre_ci.{name}" for name in names])
    assert out[2:] == ["True", "True"]


def test_a_finished_run_whose_holdout_was_lost_is_sent_again_and_closed_once_done(
    store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict first: a run finished on its verdict shards stays open until its holdout
    is finished. The sweep leaves a holdout that runs (a live lease) alone, sends the finish
    again (which sends the holdout's shards again) when none runs and it is not finished,
    and closes the run once it is."""
    sent: list[tuple[object, ...]] = []
    monkeypatch.setattr(watch.finish_task, "apply_async", lambda args: sent.append(args))
    run = "held-out"
    recorded = json.loads((RECORDS / "planned.json").read_text(encoding="utf-8"))
    planned = {**recorded, "shards": [["a"], ["h1"], ["h2"]], "holdout": ["h1", "h2"]}
    store.set(f"spyre-ci:run:{run}:planned", json.dumps({**planned, "verdict_shards": 1}))
    store.hset(distributed.OPEN_RUNS, run, "1000.0")
    store.hset(f"spyre-ci:run:{run}:shards", "0", "{}")
    store.set(f"spyre-ci:run:{run}:finished", "{}")

    def swept(now: float) -> list[str]:
        store.delete(keys.SWEEP_LOCK)
        return distributed.sweep(store, TTL_S, now=now)

    store.set(keys.lease_key(run, 2), "someone", px=60_000)  # a holdout shard runs
    assert swept(1010.0) == [] and store.hexists(distributed.OPEN_RUNS, run)
    store.delete(keys.lease_key(run, 2))
    assert swept(1010.0) == [f"{run}:finish"] and sent == [([], run)]
    assert swept(1012.0) == []  # not again before two leases
    store.set(f"spyre-ci:run:{run}:holdout-finished", "{}")
    assert swept(1030.0) == [] and not store.hexists(distributed.OPEN_RUNS, run)
