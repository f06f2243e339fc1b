"""Shard leases on real Celery workers and a private Redis: a worker killed outright, one that
stalls past its lease, and one stopped with SIGTERM lose no shard and record nothing twice.

Two workers of one process each; a run of one shard of twelve one-second tests. The lease is
6 s here (SPYRE_CI_LEASE_TTL, default 30); benchmarks/worker_takeover.py runs the SIGKILL test
with the default lease and records the takeover time from its JUnit property `takeover_s`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.e2e.test_distributed import completed_runs, services
from tests.testing.paths import SLOW_SPEC, SLOW_STEPS
from tests.testing.waiting import wait_for
from workflows.drivers import distributed

__all__ = ["services"]  # the fixture, shared with test_distributed

DATA = SLOW_STEPS
SPEC = SLOW_SPEC
VARIANTS = 12
RUN = "takeover"


def _ttl() -> float:
    # The benchmark sets the production lease; the tests default to a short one.
    return float(os.environ.get("SPYRE_CI_LEASE_TTL") or 6)


def start_workers(
    services: dict[str, Any], *names: str, extra: tuple[str, ...] = ()
) -> dict[str, subprocess.Popen[bytes]]:
    services["env"].update({"SPYRE_CI_LEASE_TTL": f"{_ttl():g}", "TORCH_ROOT": str(DATA)})
    workers = {
        name: services["start"](
            name, "worker", "--concurrency", "1", "--name", f"{name}@test", *extra
        )
        for name in names
    }
    wait_for(
        lambda: len(distributed.status(services["redis"], _ttl())["workers"]) == len(names),
        120,
        "every worker's heartbeat",
    )
    return workers


def submit(services: dict[str, Any], inventory: Path) -> None:
    from contracts.event import TriggerEvent
    from workflows.run import run_model

    event = TriggerEvent(
        kind="nightly",
        delivery_id="e" * 40,
        repo="pytorch/pytorch",
        head_sha="e" * 40,
        files_complete=False,
        source="cli",
    )
    request = run_model.RunRequest(
        run_id=RUN,
        event=event,
        out_dir=str(services["runs"] / RUN),
        inventory=str(inventory),
        specs=(str(SPEC),),
        shards=1,
        full=True,
        holdout=0.0,
        rerun_failures=False,
        expand=False,
    )
    distributed.submit(request, services["redis"])


def client(services: dict[str, Any]) -> redis.Redis:
    return redis.Redis.from_url(services["redis"], decode_responses=True)


def holder(services: dict[str, Any]) -> str | None:
    value = client(services).get(f"spyre-ci:run:{RUN}:lease:0")
    return None if value is None else str(value)


def kept(services: dict[str, Any]) -> int:
    return int(client(services).hlen(f"spyre-ci:run:{RUN}:partial:0"))


def shard_pids(services: dict[str, Any]) -> dict[int, int]:
    """pid -> the shard's owner (the pool child holding its lease) of every test process of
    the run's shard. Its owner comes from the lease's token (`host/pid/...`): the test
    process itself was forked by a shared zygote, which any process may have started."""
    out = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True)
    owner = (holder(services) or "").split("/")
    owner_pid = int(owner[1]) if len(owner) > 2 and owner[1].isdigit() else 0
    pids = {}
    for line in out.stdout.splitlines():
        pid, args = line.strip().split(None, 1)
        if "suites.pytest_plugin" in args and f"/work/{RUN}/shard-0/" in args and owner_pid > 1:
            pids[int(pid)] = owner_pid
    return pids


def running_under(services: dict[str, Any], node: str) -> Callable[[], bool]:
    """True once the shard's lease is `node`'s and one of its tests has finished."""
    return lambda: (holder(services) or "").startswith(f"{node}@") and kept(services) >= 1


def finished_once(services: dict[str, Any]) -> dict[str, Any]:
    """The run completed with every variant exactly once; returns the stored shard body."""
    runs = wait_for(lambda: completed_runs(services["redis"]), 300, "the run to complete")
    record = json.loads((Path(runs[0].summary.out_dir) / "run.json").read_text())
    ids = [r["id"] for r in record["results"]]
    assert len(ids) == len(set(ids)) == VARIANTS
    body = json.loads(str(client(services).hget(f"spyre-ci:run:{RUN}:shards", "0")))
    assert len(body["outcomes"]) == VARIANTS
    return dict(body)


def other(names: tuple[str, str], owner: str) -> str:
    return names[1] if owner.startswith(f"{names[0]}@") else names[0]


@pytest.mark.long
def test_a_killed_worker_s_shard_is_taken_over_within_two_leases(
    services: dict[str, Any], slow_inventory: Path, record_property: Any
) -> None:
    names = ("a", "b")
    workers = start_workers(services, *names)
    submit(services, slow_inventory)
    owner = wait_for(lambda: holder(services) if kept(services) >= 1 else None, 240, "a test")
    victim = owner.split("@")[0]
    taker = other(names, owner)

    started = time.monotonic()
    os.kill(workers[victim].pid, signal.SIGKILL)  # the main process: an OOM kill, a reboot
    wait_for(lambda: (holder(services) or "").startswith(f"{taker}@"), 300, "the takeover")
    takeover_s = time.monotonic() - started
    record_property("takeover_s", round(takeover_s, 2))
    record_property("lease_ttl_s", _ttl())
    print(f"takeover after {takeover_s:.1f} s (lease {_ttl():g} s)")

    body = finished_once(services)
    assert body["owner"].startswith(f"{taker}@")
    # at most one lease for the lease to run out, half of one for a sweep, and pickup
    assert takeover_s < 2 * _ttl() + 20


# fast twin: test_shard_leases.py::test_one_owner_at_a_time_and_a_taken_over_owner_records_nothing
@pytest.mark.slow
def test_a_stalled_worker_that_lost_its_lease_records_nothing(
    services: dict[str, Any], slow_inventory: Path
) -> None:
    names = ("a", "b")
    start_workers(services, *names)
    submit(services, slow_inventory)
    owner = wait_for(lambda: holder(services) if kept(services) >= 1 else None, 240, "a test")
    victim, taker = owner.split("@")[0], other(names, owner)
    pool_child = wait_for(
        lambda: next(iter(shard_pids(services).values()), None), 60, "the shard's test process"
    )

    os.kill(pool_child, signal.SIGSTOP)  # no heartbeat: its lease runs out, the test goes on
    try:
        wait_for(lambda: (holder(services) or "").startswith(f"{taker}@"), 120, "the takeover")
    finally:
        os.kill(pool_child, signal.SIGCONT)

    body = finished_once(services)
    assert body["owner"].startswith(f"{taker}@")
    log = wait_for(
        lambda: (
            "records nothing" in (text := (services["logs"] / f"{victim}.log").read_text()) and text
        ),
        60,
        "the stalled worker to give the shard up",
    )
    assert "lease taken over" in log or "lease lost before recording" in log


@pytest.mark.long
def test_sigterm_stops_the_shard_and_hands_it_over_at_once(
    services: dict[str, Any], slow_inventory: Path
) -> None:
    names = ("a", "b")
    workers = start_workers(services, *names)
    submit(services, slow_inventory)
    owner = wait_for(lambda: holder(services) if kept(services) >= 1 else None, 240, "a test")
    victim, taker = owner.split("@")[0], other(names, owner)
    test_processes = set(shard_pids(services))
    assert test_processes

    started = time.monotonic()
    os.kill(workers[victim].pid, signal.SIGTERM)
    workers[victim].wait(timeout=60)
    stopped_s = time.monotonic() - started
    done_before = kept(services)
    wait_for(lambda: (holder(services) or "").startswith(f"{taker}@"), 60, "the takeover")
    takeover_s = time.monotonic() - started

    assert not test_processes & set(shard_pids(services)), "the stopped shard's tests still run"
    print(f"worker exited after {stopped_s:.1f} s, shard taken over after {takeover_s:.1f} s")
    assert stopped_s < 30 and takeover_s < _ttl() + 15, (stopped_s, takeover_s)
    body = finished_once(services)
    assert body["owner"].startswith(f"{taker}@")
    # The taker ran only what the stopped worker had not finished, and each variant ended
    # once. (Read from the shards' own files: with a warm zygote the taker may have kept its
    # first outcome in Redis before `done_before` was read.)
    folder = services["runs"] / RUN / "work" / RUN / "shard-0"
    ran = {p: p.read_text().split() for p in folder.glob("*.ids")}
    ended = {p: _ended(p.with_suffix(".jsonl")) for p in ran}
    (first,) = [p for p, ids in ran.items() if len(ids) == VARIANTS]
    (second,) = [p for p in ran if p != first]
    assert 1 <= len(ended[first]) <= done_before, (ended, done_before)
    assert sorted(ran[second]) == sorted(set(ran[first]) - set(ended[first]))
    assert sorted(ended[first] + ended[second]) == sorted(ran[first])  # each ended once
    log = (services["logs"] / f"{victim}.log").read_text()
    assert "handing the shard back" in log, log[-3000:]


@pytest.mark.long
def test_worker_status_reports_intake_workers_and_leases(
    services: dict[str, Any], slow_inventory: Path
) -> None:
    intake = ("--intake", "--no-github", "--inventory", str(slow_inventory), "--specs", str(SPEC))
    start_workers(services, "a", extra=intake)
    submit(services, slow_inventory)
    wait_for(lambda: holder(services), 240, "the shard's lease")
    status = subprocess.run(
        [sys.executable, "-m", "workflows", "worker", "status"],
        env=services["env"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    out = status.stdout
    assert "a@test  pid" in out and "concurrency 1, intake" in out, out
    assert f"run {RUN} shard 0: leased by a@test/" in out and "s left" in out, out
    assert "intake  " in out and "DOWN" not in out, out


def _ended(results: Path) -> list[str]:
    """The ids whose test ended, as a shard's results file says."""
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    return [row["id"] for row in rows if row.get("event") == "end"]
