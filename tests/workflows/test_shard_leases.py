"""Shard leases on a real Redis: one owner at a time, results recorded once, by the owner."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from suites.model import Outcome, Status
from workflows import distributed

RUN = "lease-run"


@pytest.fixture()
def store(redis_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    monkeypatch.setenv("SPYRE_CI_LEASE_TTL", "3")
    client = redis.Redis.from_url(redis_server, decode_responses=True)
    client.set(f"spyre-ci:run:{RUN}:planned", "{}")
    yield client
    client.close()


def lease(store: redis.Redis, owner: str) -> distributed.ShardLease:
    options = {"task_id": "t-0", "group_id": "g", "group_index": 0, "retries": 0}
    return distributed.ShardLease(store, RUN, 0, f"{owner}@host/1/abc", options)


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
    assert lease(store, "c").acquire() == distributed._DONE  # a late delivery: done


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

    monkeypatch.setattr(distributed.shard_task, "apply_async", apply_async)
    held = lease(store, "a")
    assert held.acquire() is None
    assert distributed.sweep(store) == []  # alive: left alone

    expire(store)
    store.delete("spyre-ci:shards:sweep-lock")
    assert distributed.sweep(store) == [f"{RUN}:0"]
    assert sent == [((RUN, 0), held.options)]  # the same task id, chord place and retries
    store.delete("spyre-ci:shards:sweep-lock")
    assert distributed.sweep(store) == []  # queued again: not sent twice
    entry = json.loads(str(store.hget(distributed.LEASED, f"{RUN}:0")))
    assert entry["state"] == "requeued"

    # Not taken for two leases and not in the queue: lost with a dead worker, sent again.
    store.delete("spyre-ci:shards:sweep-lock")
    assert distributed.sweep(store, now=entry["since"] + 7) == [f"{RUN}:0"]


def test_a_swept_shard_of_a_finished_or_vanished_run_is_forgotten(store: redis.Redis) -> None:
    assert lease(store, "a").acquire() is None
    expire(store)
    store.delete(f"spyre-ci:run:{RUN}:planned")
    assert distributed.sweep(store) == []
    assert not store.hexists(distributed.LEASED, f"{RUN}:0")


def test_plan_and_finish_wait_out_a_redis_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed Celery task is acknowledged as done: a plan or finish that met a Redis
    restart lost its run. They wait for Redis instead (and give up after a bound)."""
    from workflows.history import HistoryError

    monkeypatch.setattr(distributed.time, "sleep", lambda s: None)
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

    def plan_once(request: object) -> str:
        planned_calls.append(1)
        if len(planned_calls) == 1:
            raise redis.ConnectionError("Connection refused")
        return "run-x"

    monkeypatch.setattr(distributed, "_plan", plan_once)
    from contracts.event import TriggerEvent
    from workflows import pipeline

    event = TriggerEvent(
        kind="push", delivery_id="d", repo="pytorch/pytorch", head_sha="a" * 40, source="cli"
    )
    request = pipeline.RunRequest(run_id="run-x", event=event.to_json(), out_dir="o", inventory="i")
    assert distributed.plan_task(request.to_json()) == "run-x" and len(planned_calls) == 2
