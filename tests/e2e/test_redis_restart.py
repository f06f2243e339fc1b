"""Redis restarted while a distributed run is between tasks: the run completes, or stops in a
state that `spyre-ci runs show` explains and `spyre-ci runs resume` finishes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from contracts.event import TriggerEvent
from tests.testing.paths import REPO_ROOT, TINY_SPEC
from tests.testing.processes import free_port
from tests.testing.waiting import wait_for
from workflows.stores.history import RedisHistory


class RestartableRedis:
    """A private redis-server that keeps its data on disk (AOF) across restarts."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _pings(client), 20, "redis-server to answer")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(timeout=20)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.fixture()
def durable_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    server = RestartableRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()


@pytest.mark.slow  # fast twins: the intake-restart test, the worker-kill redelivery
def test_redis_restart_between_tasks(
    durable_redis: RestartableRedis, tiny_inventory: Path, tmp_path: Path
) -> None:
    from workflows.drivers import distributed
    from workflows.run import run_model

    env = {
        **os.environ,
        "SPYRE_CI_REDIS_URL": durable_redis.url,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
    }
    log = tmp_path / "worker.log"
    with open(log, "wb") as fh:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workflows", "worker", "--concurrency", "1"],
            cwd=REPO_ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:
        event = TriggerEvent(
            kind="nightly",
            delivery_id="b" * 40,
            repo="pytorch/pytorch",
            head_sha="b" * 40,
            files_complete=False,
            source="cli",
        )
        request = run_model.RunRequest(
            run_id="restart-test",
            event=event,
            out_dir=str(tmp_path / "out"),
            inventory=str(tiny_inventory),
            specs=(str(TINY_SPEC),),
            full=True,
            holdout=0.0,
            shards=2,
            expand=False,
        )
        distributed.submit(request, durable_redis.url)
        store = redis.Redis.from_url(durable_redis.url)
        # With one worker process the shards run one after the other: restart in between.
        wait_for(
            lambda: store.hlen("spyre-ci:run:restart-test:shards") >= 1,
            300,
            "the first shard's results",
        )
        durable_redis.stop()
        durable_redis.start()

        history = RedisHistory(durable_redis.url)

        def completed() -> bool:
            run = history.get_run("restart-test")
            return run is not None and run.state == "completed"

        try:
            wait_for(completed, 240, "the run to complete after the restart")
        except AssertionError:
            shown = subprocess.run(
                [sys.executable, "-m", "workflows", "runs", "show", "restart-test"],
                env=env,
                capture_output=True,
                text=True,
            )
            assert "runs resume restart-test" in shown.stdout, shown.stdout + shown.stderr
            resumed = subprocess.run(
                [sys.executable, "-m", "workflows", "runs", "resume", "restart-test"],
                env=env,
                capture_output=True,
                text=True,
            )
            assert resumed.returncode == 0, resumed.stderr
            wait_for(completed, 240, "the resumed run to complete")
        record = json.loads((tmp_path / "out" / "run.json").read_text())
        ids = [r["id"] for r in record["results"]]
        assert len(ids) == len(set(ids)) == 16
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def _push(n: int) -> TriggerEvent:
    return TriggerEvent(
        kind="push",
        delivery_id=f"d-{n}",
        repo="pytorch/pytorch",
        head_sha=f"{n:040x}",
        source="cli",
    )


def _intake_loop(
    url: str, sent: list[str], stop: threading.Event, consumer: str | None = None
) -> threading.Thread:
    """The worker's intake loop in a thread, sending each delivery's id into `sent`."""
    from workflows.drivers import distributed

    def make_request(event: TriggerEvent) -> object:
        class Request:
            run_id = event.delivery_id

        return Request()

    loop = threading.Thread(
        target=distributed.consume_intake,
        args=(make_request, stop),
        kwargs={
            "block_ms": 200,
            "url": url,
            "send": lambda r: sent.append(r.run_id),
            "consumer": consumer,
        },
        daemon=True,
    )
    loop.start()
    return loop


def test_the_intake_loop_survives_a_redis_restart(durable_redis: RestartableRedis) -> None:
    from relay.intake import RedisIntake
    from workflows.drivers import distributed

    sent: list[str] = []
    stop = threading.Event()
    loop = _intake_loop(durable_redis.url, sent, stop)
    producer = RedisIntake.from_url(durable_redis.url)
    event = _push

    try:
        producer.accept("d-1", event(1))
        wait_for(lambda: sent == ["d-1"], 20, "the first delivery to be sent")
        assert distributed.intake_alive(durable_redis.url)
        durable_redis.stop()  # Redis goes away under the loop ...
        import time

        time.sleep(2)  # ... for a while: the outage the loop must live through, not a wait
        assert loop.is_alive()
        durable_redis.start()  # ... and comes back with what it had on disk
        producer = RedisIntake.from_url(durable_redis.url)
        producer.accept("d-2", event(2))
        wait_for(lambda: sent == ["d-1", "d-2"], 60, "the delivery accepted after the restart")
        assert loop.is_alive() and distributed.intake_alive(durable_redis.url)
        assert producer.depth() == 0  # acknowledged
    finally:
        stop.set()
        loop.join(timeout=40)


def test_a_delivery_claimed_as_redis_died_is_taken_back_at_once(redis_server: str) -> None:
    """A claim whose answer was lost leaves the entry pending for this consumer: the loop
    takes its own pending entries first after an outage (and at start), not after the
    10-minute reclaim of entries abandoned by silent consumers."""
    import os
    import socket

    from relay.intake import RedisIntake

    intake = RedisIntake.from_url(redis_server)
    for n in (1, 2):
        assert intake.accept(f"d-{n}", _push(n))
    consumer = f"{socket.gethostname()}-{os.getpid()}"  # the loop's own name in this process
    lost = intake.claim(consumer)  # delivered, never answered: pending for this consumer
    assert lost is not None and lost.delivery_id == "d-1"
    assert intake.claim_own(consumer).entry_id == lost.entry_id  # type: ignore[union-attr]
    assert intake.claim_own(consumer, lost.entry_id) is None
    sent: list[str] = []
    stop = threading.Event()
    loop = _intake_loop(redis_server, sent, stop)
    try:
        wait_for(lambda: sent == ["d-1", "d-2"], 20, "the pending delivery, then the new one")
        wait_for(lambda: intake.depth() == 0, 10, "both acknowledged")
    finally:
        stop.set()
        loop.join(timeout=40)


def test_an_intake_restarted_under_its_name_takes_back_what_it_had_claimed(
    redis_server: str,
) -> None:
    """`worker --intake --name N` killed after claiming a delivery and before sending it:
    started again as N, it sends that delivery at once, not after the 10-minute reclaim."""
    from relay.intake import RedisIntake

    intake = RedisIntake.from_url(redis_server)
    assert intake.accept("d-1", _push(1))
    dead = intake.claim("intake-w@ci-1")  # the claim of the worker that then died
    assert dead is not None and intake.claim("someone-else") is None  # pending, not free
    sent: list[str] = []
    stop = threading.Event()
    loop = _intake_loop(redis_server, sent, stop, consumer="intake-w@ci-1")
    try:
        wait_for(lambda: sent == ["d-1"], 20, "the delivery the dead intake had claimed")
        wait_for(lambda: intake.depth() == 0, 10, "it acknowledged")
    finally:
        stop.set()
        loop.join(timeout=40)
