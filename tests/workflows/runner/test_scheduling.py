"""The pool's policies, driven in-process by fake runners: no threads, no test processes."""

from __future__ import annotations

import threading
import time

import pytest

from workflows.runner.scheduling import InOrder, LongestFirst, Pool, Work, slices


def test_in_order_hands_out_each_piece_once_then_nothing() -> None:
    works = slices("torch-2.13.0", [f"v{i}" for i in range(5)], jobs=2)
    assert [w.ids for w in works] == [("v0", "v2", "v4"), ("v1", "v3")]
    assert [w.token for w in works] == ["torch-2.13.0-0", "torch-2.13.0-1"]
    policy = InOrder(works)
    assert [policy.next_work(), policy.next_work(), policy.next_work()] == [*works, None]


def test_slices_of_fewer_ids_than_jobs_are_not_empty() -> None:
    assert [w.ids for w in slices("s", ["a"], jobs=4)] == [("a",)]
    assert slices("s", [], jobs=4) == []


def shards() -> list[tuple[str, list[str], float]]:
    return [
        ("shard-0", [f"a{i}" for i in range(4)], 4.0),
        ("shard-1", [f"b{i}" for i in range(10)], 100.0),
        ("shard-2", [], 0.0),
    ]


def test_longest_first_starts_the_longest_shard_and_skips_empty_ones() -> None:
    policy = LongestFirst(shards(), start_s=0.5, held=lambda _v: False)
    first, second = policy.next_work(), policy.next_work()
    assert first is not None and second is not None
    assert (first.shard, first.token, len(first.ids)) == ("shard-1", "shard-1", 10)
    assert second.shard == "shard-0" and not second.stolen


def test_an_idle_runner_steals_the_unclaimed_tail_from_the_back() -> None:
    claimed = {"b0", "b1", "b2"}
    policy = LongestFirst(shards(), start_s=0.5, held=claimed.__contains__)
    long, short = policy.next_work(), policy.next_work()
    assert long is not None and short is not None
    policy.reported("shard-1", "b0", 10.0)
    policy.done(short, None)  # shard-0 finished; its runner is idle
    steal = policy.next_work()
    assert steal is not None and steal.stolen
    assert steal.token == "shard-1.steal1" and steal.ids == tuple(f"b{i}" for i in range(9, 2, -1))
    assert [(s.victim, s.thief, s.ids) for s in policy.steals] == [("shard-1", "shard-1.steal1", 7)]
    # The next thief of the same shard gets the next token.
    again = policy.next_work()
    assert again is not None and again.token == "shard-1.steal2"


def test_a_tail_worth_less_than_a_process_start_is_not_stolen() -> None:
    policy = LongestFirst([("s", ["x", "y", "z"], 0.9)], start_s=0.1, held=lambda _v: False)
    assert policy.next_work() is not None
    # 3 tests x 0.3 s = 0.9 s left: worth a warm start (WORTH x 0.1 s), not a cold one.
    assert policy.next_work() is not None
    cold = LongestFirst([("s", ["x", "y", "z"], 0.9)], start_s=8.0, held=lambda _v: False)
    assert cold.next_work() is not None and cold.next_work() is None


def test_finished_or_failed_shards_are_not_stolen_from() -> None:
    policy = LongestFirst(shards(), start_s=0.0, held=lambda _v: False)
    long, short = policy.next_work(), policy.next_work()
    assert long is not None and short is not None
    policy.done(long, None)  # its owner is done: nothing left to help with
    steal = policy.next_work()
    assert steal is not None and steal.shard == "shard-0"
    policy.thief_failed(steal)
    assert policy.next_work() is None


def test_a_resumed_run_neither_runs_nor_steals_what_was_reported() -> None:
    policy = LongestFirst(
        [("s", ["x", "y"], 2.0)], start_s=0.0, held=lambda _v: False, done={"s": ["x", "y"]}
    )
    assert policy.next_work() is None


def test_the_pool_runs_every_piece_once_on_its_threads() -> None:
    ran: list[str] = []
    works = slices("s", [f"v{i}" for i in range(12)], jobs=3)
    pool: Pool[int] = Pool(InOrder(works), jobs=2)

    def execute(work: Work) -> int:
        ran.extend(work.ids)
        return len(work.ids)

    results = pool.run(execute)
    assert sorted(ran) == sorted(f"v{i}" for i in range(12))
    assert sorted(count for _work, count in results) == [4, 4, 4]


def test_a_failing_runner_stops_the_others_and_raises() -> None:
    stop = threading.Event()
    started: list[str] = []

    def execute(work: Work) -> None:
        started.append(work.shard)
        if work.shard == "s-0":
            raise RuntimeError("runner broke")
        time.sleep(0.01)  # a shard's work, long enough for the failure to meet runners busy

    pool: Pool[None] = Pool(InOrder(slices("s", [f"v{i}" for i in range(40)], jobs=40)), jobs=2)
    with pytest.raises(RuntimeError, match="runner broke"):
        pool.run(execute, stop)
    assert stop.is_set() and len(started) < 40
