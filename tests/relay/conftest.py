"""Fixtures for the relay tests: a Redis that can be stopped and restarted, the relay served
over real HTTP (werkzeug's threaded server in-process, or `spyre-ci serve` as a subprocess),
and the local GitHub API server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.app import Relay
from relay.intake import connect
from tests.servers.github_api import github_api  # noqa: F401 - a fixture, used by name
from tests.testing.relay import RedisProcess, RelayHTTP, base_config


@pytest.fixture()
def redis_proc(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def relay_http(redis_proc: RedisProcess) -> Iterator[RelayHTTP]:
    """The relay with only a webhook secret and Redis configured."""
    config = base_config(redis_proc.url)
    # Short socket timeouts: a stopped Redis is noticed at once.
    service = RelayHTTP(Relay(config, client=connect(redis_proc.url, socket_timeout=2.0)))
    try:
        yield service
    finally:
        service.stop()
