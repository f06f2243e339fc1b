"""Whole-system runs on a real Redis: the relay takes a signed delivery, a Celery worker runs
plan -> shards -> finish, results land exported; and a worker killed mid-shard loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from relay.signature import sign
from tests.testing.paths import REPO_ROOT, SLOW_SPEC, SLOW_STEPS, TINY_SPEC
from tests.testing.processes import free_port
from tests.testing.waiting import wait_for
from workflows.stores.history import RedisHistory

SECRET = "e2e-secret"
pytestmark = pytest.mark.usefixtures("tiny_inventory")


@pytest.fixture()
def services(redis_server: str, tmp_path: Path, tiny_inventory: Path) -> Iterator[dict[str, Any]]:
    env = {
        **os.environ,
        "SPYRE_CI_REDIS_URL": redis_server,
        "SPYRE_CI_WEBHOOK_SECRET": SECRET,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workflows", *args],
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc

    try:
        yield {
            "env": env,
            "start": start,
            "logs": logs,
            "redis": redis_server,
            "runs": tmp_path / "runs",
            "inventory": tiny_inventory,
        }
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def worker_args(services: dict[str, Any]) -> list[str]:
    return [
        "worker",
        "--concurrency",
        "2",
        "--intake",
        "--no-github",  # push deliveries list their files; nothing to ask GitHub
        "--inventory",
        str(services["inventory"]),
        "--specs",
        str(TINY_SPEC),
        "--out-root",
        str(services["runs"]),
    ]


def post_delivery(port: int, delivery: str, payload: dict[str, Any]) -> tuple[int, str]:
    body = json.dumps(payload).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/github/webhook",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(SECRET, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def listening(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def completed_runs(redis_url: str) -> list[Any]:
    return [r for r in RedisHistory(redis_url).list_runs() if r.state == "completed"]


@pytest.mark.slow  # fast twin: test_worker_killed_mid_shard_is_redelivered_without_duplicates
def test_served_delivery_runs_through_celery_to_exported_results(
    services: dict[str, Any],
) -> None:
    port = free_port()
    services["start"](
        "serve", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"
    )
    services["start"]("worker", *worker_args(services))
    wait_for(lambda: listening(port), 60, "the relay to listen")
    event = json.loads((REPO_ROOT / "examples/events/push_softmax_kernel.json").read_text())

    status, body = post_delivery(port, "e2e-delivery-1", event["payload"])
    assert status == 202 and "enqueued" in body, body
    status, body = post_delivery(port, "e2e-delivery-1", event["payload"])  # GitHub redelivery
    assert status == 202 and "already" in body, body

    runs = wait_for(lambda: completed_runs(services["redis"]), 420, "the run to complete")
    # A fixed wait on purpose: the check is that no duplicate run comes, and one, were there
    # one, would have been planned by now.
    time.sleep(3)
    assert len(RedisHistory(services["redis"]).list_runs()) == 1
    out = Path(runs[0].summary.out_dir)
    record = json.loads((out / "run.json").read_text())
    ids = [r["id"] for r in record["results"]]
    assert ids and len(ids) == len(set(ids))
    assert all(i.startswith("tiny::compare_cpu::") for i in ids)
    assert (out / "callback.json").exists() and (out / "hud" / "crcr_workflow_job.json").exists()
    assert record["event"]["delivery_id"] == "e2e-delivery-1"


def _shard_owners(run_dir: Path, redis_url: str, shards: int) -> set[int]:
    """Pids of the Celery pool children that hold a lease on a shard of this run while a
    test process of that run is running (the lease's token names its holder's pid: the test
    processes themselves are forked by a zygote that any process may have started)."""
    out = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True)
    marker = f"{run_dir}/work/{run_dir.name}/shard-"
    if not any("suites.pytest_plugin" in a and marker in a for a in out.stdout.splitlines()):
        return set()
    store = redis.Redis.from_url(redis_url, decode_responses=True)
    owners = set()
    for index in range(shards):
        token = store.get(f"spyre-ci:run:{run_dir.name}:lease:{index}")
        pid = str(token or "").split("/")[1:2]
        if pid and pid[0].isdigit() and int(pid[0]) > 1:
            owners.add(int(pid[0]))
    return owners


@pytest.mark.long
def test_worker_killed_mid_shard_is_redelivered_without_duplicates(
    services: dict[str, Any], slow_inventory: Path
) -> None:
    from contracts.event import TriggerEvent
    from workflows.drivers import distributed
    from workflows.run import run_model

    # Tests of a second each: a shard forked from a warm zygote is still running when the
    # pool child that owns it is killed (tiny variants could all end between two looks).
    services["env"]["TORCH_ROOT"] = str(SLOW_STEPS)
    services["start"]("worker", *worker_args(services)[:3])
    event = TriggerEvent(
        kind="nightly",
        delivery_id="f" * 40,
        repo="pytorch/pytorch",
        head_sha="f" * 40,
        files_complete=False,
        source="cli",
    )
    request = run_model.RunRequest(
        run_id="kill-test",
        event=event,
        out_dir=str(services["runs"] / "kill-test"),
        inventory=str(slow_inventory),
        specs=(str(SLOW_SPEC),),
        shards=2,
        full=True,
        holdout=0.0,
    )
    distributed.submit(request, services["redis"])
    victims = wait_for(
        lambda: _shard_owners(services["runs"] / "kill-test", services["redis"], 2),
        240,
        "a shard's pytest to start",
    )
    victim = sorted(victims)[0]
    os.kill(victim, signal.SIGKILL)  # the pool child running the shard task

    runs = wait_for(lambda: completed_runs(services["redis"]), 420, "the run to complete")
    record = json.loads((Path(runs[0].summary.out_dir) / "run.json").read_text())
    ids = [r["id"] for r in record["results"]]
    assert len(ids) == len(set(ids)) == 12  # every slow-steps variant, each exactly once
    log = (services["logs"] / "worker.log").read_text(errors="replace")
    assert "WorkerLostError" in log or "exited prematurely" in log or "signal 9" in log, log[-3000:]


@pytest.mark.long
def test_the_service_sends_the_verdict_before_the_holdout_runs(services: dict[str, Any]) -> None:
    """The default path through the relay and one worker: the selected variants' shards run
    and the run finishes on them (callback, run.json, History) before any holdout shard
    starts; the holdout's finish then writes holdout.json, completes History's metrics and
    closes the run, and the verdict that went out is unchanged."""
    from workflows.drivers.distributed import phases
    from workflows.drivers.distributed.keys import OPEN_RUNS
    from workflows.run import finishing
    from workflows.run.run_folder import STARTED_FILE

    port = free_port()
    services["start"](
        "serve", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"
    )
    services["start"]("worker", *worker_args(services))
    wait_for(lambda: listening(port), 60, "the relay to listen")
    event = json.loads((REPO_ROOT / "examples/events/push_softmax_kernel.json").read_text())
    status, body = post_delivery(port, "e2e-verdict-first", event["payload"])
    assert status == 202, body

    runs = wait_for(lambda: completed_runs(services["redis"]), 420, "the verdict")
    out = Path(runs[0].summary.out_dir)
    holdout_file = out / finishing.HOLDOUT_FILE
    wait_for(holdout_file.exists, 300, "the holdout's finish")
    store = redis.Redis.from_url(services["redis"], decode_responses=True)
    planned, verdict = phases.loads(store.get(f"spyre-ci:run:{out.name}:planned") or "")
    assert 0 < verdict < len(planned.shards) and planned.holdout, "a default run has a holdout"

    held = set(planned.holdout)
    record = json.loads((out / "run.json").read_text())
    assert {r["id"] for r in record["results"]}.isdisjoint(held)  # the verdict's alone
    callback_at = (out / "callback.json").stat().st_mtime
    work = out / "work" / out.name
    holdout_starts = [
        float((work / f"shard-{i}" / STARTED_FILE).read_text())
        for i in range(verdict, len(planned.shards))
    ]
    assert callback_at <= min(holdout_starts), "a holdout shard started before the callback"

    found = json.loads(holdout_file.read_text())
    assert found["after_verdict"] is True and found["ran"] == len(held) == found["holdout"]
    assert found["learned"] is True
    run = RedisHistory(services["redis"]).get_run(out.name)
    assert run is not None and run.summary.results is not None
    assert run.summary.results.metrics["holdout"] == len(held)
    assert run.summary.results.metrics["holdout_after_verdict"] == len(held)
    assert json.loads((out / "run.json").read_text()) == record  # the verdict stands
    wait_for(lambda: not store.hexists(OPEN_RUNS, out.name), 60, "the run to close")
