"""Failures rerun by an idle runner while other shards still run (`early_reruns`), and the
rerun round that then runs only what no runner took. The policy with fake test processes
here; a real run with real pytest processes in the `long` test at the end."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.classification import Classification
from suites.model import Outcome, Status
from tests.testing.cli import build_inventory
from tests.workflows.run.test_infra_faults import _request
from tests.workflows.run_context import run_context
from workflows.drivers import embedded
from workflows.drivers.early_reruns import EarlyReruns
from workflows.run import pipeline
from workflows.run.layout import RERUN_SHARD
from workflows.runner.scheduling import InOrder, Pool, Work
from workflows.runner.shard_runner import InfraFault, ShardRun, thread_env
from workflows.settings import child_environment
from workflows.stores.history import RunState, SQLiteHistory


class FakeReruns:
    """Rerun processes that fail every id in `broken` and pass the rest; each call kept."""

    def __init__(self, broken: Sequence[str] = (), fault_on: Sequence[str] = ()) -> None:
        self.calls: list[list[str]] = []
        self.broken = set(broken)
        self.fault_on = set(fault_on)

    def __call__(self, ids: Sequence[str]) -> ShardRun:
        self.calls.append(list(ids))
        ran = [vid for vid in ids if vid not in self.fault_on]
        outcomes = [
            Outcome(v, Status.FAILED if v in self.broken else Status.PASSED, 0.01) for v in ran
        ]
        unrun = tuple(v for v in ids if v in self.fault_on)
        fault = InfraFault("rerun", "could not start", unrun, 2) if unrun else None
        return ShardRun(outcomes, fault)


def failed(vid: str) -> Outcome:
    return Outcome(vid, Status.FAILED, 0.01, "AssertionError")


def test_an_idle_runner_reruns_the_failures_seen_and_the_round_runs_only_the_rest() -> None:
    early_run = FakeReruns(broken=["b"])
    early = EarlyReruns(early_run, threading.Event())
    for outcome in (failed("a"), Outcome("p", Status.PASSED, 0.01), failed("b")):
        early.seen(outcome)
    early.idle()
    assert early_run.calls == [["a", "b"]]  # the failures only, in the order reported
    early.seen(failed("c"))  # reported after the idle runner ended: the round's

    round_run = FakeReruns()
    answer = early.answer(["a", "b", "c"], round_run)
    assert round_run.calls == [["c"]]
    assert [(o.id, o.status) for o in answer.outcomes] == [
        ("a", Status.PASSED),
        ("b", Status.FAILED),
        ("c", Status.PASSED),
    ]
    assert answer.fault is None


def test_with_everything_rerun_early_the_round_starts_no_process() -> None:
    early = EarlyReruns(FakeReruns(), threading.Event())
    early.seen(failed("a"))
    early.idle()

    def nothing_left(ids: Sequence[str]) -> ShardRun:
        raise AssertionError(f"the round ran {ids}, already rerun")

    assert [o.id for o in early.answer(["a"], nothing_left).outcomes] == ["a"]


def test_a_rerun_process_that_could_not_run_leaves_its_ids_to_the_round_and_its_fault() -> None:
    faulty = FakeReruns(fault_on=["b"])
    early = EarlyReruns(faulty, threading.Event())
    early.seen(failed("a"))
    early.seen(failed("b"))
    early.idle()
    assert set(early.reran) == {"a"}  # what did run is a rerun like any other
    early.seen(failed("c"))
    early.idle()  # another idle runner: no second try on a machine that just failed one
    assert faulty.calls == [["a", "b"]]
    # The round meets the fault itself, as it would have without early reruns.
    answer = early.answer(["a", "b", "c"], FakeReruns(fault_on=["b"]))
    assert answer.fault is not None and answer.fault.unrun == ("b",)
    assert [o.id for o in answer.outcomes] == ["a", "c"]


def test_failures_reported_during_an_early_rerun_are_taken_next_by_the_same_runner() -> None:
    early: EarlyReruns
    calls: list[list[str]] = []

    def run(ids: Sequence[str]) -> ShardRun:
        calls.append(list(ids))
        if ids == ["a"]:
            early.seen(failed("b"))  # another shard reports while this rerun runs
        return ShardRun([Outcome(v, Status.PASSED, 0.01) for v in ids])

    early = EarlyReruns(run, threading.Event())
    early.seen(failed("a"))
    early.idle()
    assert calls == [["a"], ["b"]]


def test_one_early_rerun_at_a_time_and_none_once_the_run_is_stopped() -> None:
    inside, release = threading.Event(), threading.Event()
    calls: list[list[str]] = []

    def slow(ids: Sequence[str]) -> ShardRun:
        calls.append(list(ids))
        inside.set()
        release.wait(10)
        return ShardRun([Outcome(v, Status.PASSED, 0.01) for v in ids])

    stop = threading.Event()
    early = EarlyReruns(slow, stop)
    early.seen(failed("a"))
    first = threading.Thread(target=early.idle)
    first.start()
    assert inside.wait(10)
    early.seen(failed("b"))
    early.idle()  # a second idle runner: returns at once, leaves "b" to the first
    assert calls == [["a"]]
    stop.set()  # stopped meanwhile: the first runner starts nothing more
    release.set()
    first.join(10)
    assert calls == [["a"]]
    assert set(early.reran) == {"a"}


def test_a_pool_runner_with_nothing_left_goes_idle_once_while_others_work() -> None:
    order: list[str] = []
    lock = threading.Lock()
    long_running = threading.Event()

    def execute(work: Work) -> str:
        if work.shard == "long":
            long_running.set()
            assert idle_seen.wait(10)  # the other runner went idle while this one worked
        with lock:
            order.append(work.shard)
        return work.shard

    idle_seen = threading.Event()

    def idle() -> None:
        with lock:
            order.append("idle")
        if long_running.is_set():
            idle_seen.set()

    works = [Work("long", ("x",), "long"), Work("short", ("y",), "short")]
    pool: Pool[str] = Pool(InOrder(works), 2)
    pool.run(execute, idle=idle)
    assert order.count("idle") == 2  # each runner once, before it ends
    assert order.index("short") < order.index("idle") < order.index("long")


EARLY_TESTS = """
import os
import time

from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flaky.seen")


class TestEarly(TestCase):
    def test_long(self, device):
        time.sleep(4.0)

    def test_flaky(self, device):  # fails in the first process that runs it only
        if not os.path.exists(MARK):
            open(MARK, "w").close()
            raise AssertionError("first run fails")

    def test_broken(self, device):  # says the threads its process was given
        raise AssertionError("always fails, OMP=" + os.environ.get("OMP_NUM_THREADS", "unset"))


instantiate_device_type_tests(TestEarly, globals())
"""


@pytest.mark.long
def test_a_run_reruns_its_failures_beside_a_long_shard_with_the_verdict_of_a_rerun_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default path (warm runner on, 2 runners): one shard is a 4-second test, the other
    two failures. Their reruns run in one fresh process while the long test still runs, and
    the verdict is what the rerun round gives: the flaky one flaky, the broken one new."""
    root = tmp_path / "tree"
    (root / "test").mkdir(parents=True)
    (root / "test" / "test_early.py").write_text(EARLY_TESTS, encoding="utf-8")
    spec = tmp_path / "early.yaml"
    spec.write_text(
        "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_early.py\n"
        "      unlisted_test_mode: mandatory_success\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("TORCH_ROOT", str(root))
    inventory = build_inventory(spec, tmp_path / "early.json.gz", env=dict(os.environ))
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    ctx = run_context(history)
    request = replace(
        _request(inventory, tmp_path / "out", "early-1"), specs=(str(spec),), shards=2
    )
    planned = pipeline.plan(request, ctx)
    ids = sorted(v for shard in planned.shards for v in shard)
    broken, flaky, long = ids  # by name: test_broken, test_flaky, test_long
    assert long.endswith("test_long::none") and flaky.endswith("test_flaky::none")
    # The split a History that knows the long test would make: it alone, the rest beside it.
    planned = replace(planned, shards=[[long], [flaky, broken]])

    finished = embedded._execute(planned, ctx, jobs=2, show_progress=False, done={})

    assert finished.exit_code == 1
    assert finished.outcomes[flaky].status is Status.PASSED  # the passing rerun shown
    assert finished.outcomes[broken].status is Status.FAILED
    assert finished.new_failures == [broken]
    assert finished.classification == {flaky: Classification.FLAKY, broken: Classification.NEW}
    layout = ctx.layout(request)
    reruns = sorted(layout.shard(RERUN_SHARD).glob("*.ids"))
    assert len(reruns) == 1  # one process: the round found nothing left to run
    assert sorted(reruns[0].read_text().split()) == sorted([flaky, broken])
    (long_end,) = layout.shard("shard-0").glob("*.xml")
    assert reruns[0].stat().st_mtime < long_end.stat().st_mtime - 1.0  # beside the long test
    # With the round's threads, though the long shard still ran beside it.
    round_threads = thread_env(1).get("OMP_NUM_THREADS") or child_environment().get(
        "OMP_NUM_THREADS", "unset"
    )
    reran = [
        json.loads(line)
        for path in layout.shard(RERUN_SHARD).glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    (message,) = [e["message"] for e in reran if e["event"] == "end" and e["id"] == broken]
    assert f"OMP={round_threads}" in message, message


def test_through_the_embedded_run_a_rerun_that_cannot_start_still_ends_it_as_infra_error(
    tiny_inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded run with its early reruns: a rerun process that cannot start, tried
    early by the idle runner and again by the round, ends the run as an infrastructure error
    (exit 3), nothing learned, as without early reruns (test_infra_faults.py)."""
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    ctx = run_context(history)
    request = replace(_request(tiny_inventory, tmp_path / "out", "early-fault"), shards=2)
    planned = pipeline.plan(request, ctx)
    assert len(planned.shards) == 2
    failing = planned.shards[0][0]
    asked: list[str] = []

    def fake_shard(
        request: object,
        name: str,
        ids: Sequence[str],
        progress: Callable[[Outcome], None] | None = None,
        **kwargs: object,
    ) -> ShardRun:
        asked.append(name)
        if name == RERUN_SHARD:
            return ShardRun([], InfraFault(name, "exited with code 4", tuple(ids), 2))
        outcomes = [Outcome(v, Status.FAILED if v == failing else Status.PASSED, 0.01) for v in ids]
        for outcome in outcomes:  # as a test process reports them
            if progress is not None:
                progress(outcome)
        return ShardRun(outcomes)

    monkeypatch.setattr(pipeline, "execute_shard", fake_shard)
    finished = embedded._execute(planned, ctx, jobs=2, show_progress=False, done={})

    assert asked.count(RERUN_SHARD) == 2  # early, then the round: the fault is the round's to meet
    assert finished.exit_code == 3 and finished.faults[0].shard_id == RERUN_SHARD
    assert history.get_run("early-fault").state == RunState.INFRA_ERROR  # type: ignore[union-attr]
    assert failing not in history.snapshot().variants  # nothing learned
