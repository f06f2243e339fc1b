"""Shared fixtures: real services started privately for the tests that need them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# Upstream-style device-generic test files that suites run through the plugin (one of them
# hangs on purpose): data for those tests, never collected on their own.
collect_ignore = ["suites/upstream_like", "suites/upstream_renamed"]
TINY_SPEC = REPO_ROOT / "tests" / "workflows" / "data" / "tiny.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[str]:
    """A private `redis-server` on a free loopback port; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not on the PATH; the tests need a real Redis")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"redis-server did not listen on port {port} within 10 s")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def build_inventory(spec: Path, path: Path, env: dict[str, str] | None = None) -> Path:
    """`spyre-ci inventory --specs SPEC --out PATH`, as a user runs it; returns PATH."""
    built = subprocess.run(
        [sys.executable, "-m", "workflows", "inventory", "--specs", str(spec), "--out", str(path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    return path


@pytest.fixture(scope="session")
def tiny_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of the tiny suite (16 variants) for the installed torch."""
    return build_inventory(TINY_SPEC, tmp_path_factory.mktemp("inventory") / "tiny.json.gz")


SLOW_STEPS = REPO_ROOT / "tests" / "e2e" / "data" / "slow_steps"
SLOW_SPEC = SLOW_STEPS / "slow_steps.yaml"  # twelve one-second tests; TORCH_ROOT=SLOW_STEPS


@pytest.fixture(scope="session")
def slow_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of the slow-steps suite: shards long enough to signal or kill midway."""
    path = tmp_path_factory.mktemp("inventory") / "slow.json.gz"
    built = subprocess.run(
        [sys.executable, "-m", "workflows", "inventory", "--specs", str(SLOW_SPEC)]
        + ["--out", str(path)],
        env={**os.environ, "TORCH_ROOT": str(SLOW_STEPS)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    return path


def launcher(pid: int) -> int:
    """The process that started test process `pid`: its parent, or, for a test process the
    warm runner forked, the parent of the zygote it was forked from (the shard's owner)."""
    table: dict[int, tuple[int, str]] = {}
    out = subprocess.run(["ps", "-eww", "-o", "pid=,ppid=,args="], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        parts = line.strip().split(None, 2)
        if len(parts) == 3:
            table[int(parts[0])] = (int(parts[1]), parts[2])
    parent = table.get(pid, (0, ""))[0]
    while parent in table and "workflows.runner.zygote_process" in table[parent][1]:
        parent = table[parent][0]
    return parent


@pytest.fixture(autouse=True)
def _private_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the user's History and inventory cache."""
    monkeypatch.setenv("SPYRE_CI_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    monkeypatch.delenv("SPYRE_CI_REDIS_URL", raising=False)
