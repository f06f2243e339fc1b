"""Shared fixtures: real services started privately for the tests that need them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testing.cli import build_inventory
from tests.testing.paths import SLOW_SPEC, SLOW_STEPS, TINY_SPEC
from tests.testing.relay import RedisProcess
from tests.testing.shared import built_once

# Upstream-style device-generic test files that suites run through the plugin (one of them
# hangs on purpose), and two versions of one upstream tree whose tests were renamed: data
# for those tests, never collected on their own.
collect_ignore = ["suites/upstream_like", "suites/upstream_renamed"]


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[str]:
    """A private `redis-server` on a free loopback port; yields its URL."""
    server = RedisProcess(tmp_path)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tiny_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of the tiny suite (16 variants) for the installed torch."""
    return built_once(tmp_path_factory, "tiny.json.gz", lambda p: build_inventory(TINY_SPEC, p))


@pytest.fixture(scope="session")
def slow_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of the slow-steps suite: shards long enough to signal or kill midway."""
    env = {**os.environ, "TORCH_ROOT": str(SLOW_STEPS)}
    return built_once(
        tmp_path_factory, "slow.json.gz", lambda p: build_inventory(SLOW_SPEC, p, env=env)
    )


@pytest.fixture(autouse=True)
def _private_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the user's History and inventory cache."""
    monkeypatch.setenv("SPYRE_CI_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    monkeypatch.delenv("SPYRE_CI_REDIS_URL", raising=False)
