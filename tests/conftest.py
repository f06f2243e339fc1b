"""Shared fixtures: real services started privately for the tests that need them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from suites.model import Inventory
from tests.testing.cli import build_inventory, state_env
from tests.testing.paths import REPO_ROOT, SLOW_SPEC, SLOW_STEPS, TINY_SPEC
from tests.testing.relay import RedisProcess
from tests.testing.shared import built_once, run_folder
from workflows.runner import warm_share, zygote
from workflows.settings import Settings
from workflows.stores import kept

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


@pytest.fixture(scope="session")
def seeded_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory holding only the cached Inventory of the bundled specs, built the
    way `spyre-ci run` builds it (workflows.stores.inventory_cache), once per test run."""
    return built_once(tmp_path_factory, "seeded-state", _seed)


def _seed(state: Path) -> None:
    state.mkdir()
    probe = (
        "from workflows.stores.inventory_cache import default_inventory\n"
        "from workflows.settings import Settings\n"
        "print(default_inventory(Settings.from_env().state_dir))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        env=state_env(state),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="session")
def bundled_inventory(seeded_state: Path) -> Inventory:
    """The Inventory of the bundled specs for the installed torch, as `spyre-ci run` caches
    it: built once per test run (`seeded_state`), read by each worker that asks."""
    (path,) = (seeded_state / "inventories").glob("inventory-*.json.gz")
    return Inventory.load(path)


@pytest.fixture(scope="session", autouse=True)
def _shared_warm_runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One place of shared zygotes for the whole test run (every xdist worker, and the
    `spyre-ci` processes the tests start): a run of the same change, or of the same torch,
    in another test forks from the zygote an earlier test warmed up, as successive runs of
    one state directory do. They end at the end of the run (`pytest_sessionfinish`), or
    idle."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPYRE_CI_WARM_DIR", str(_warm_dir(tmp_path_factory)))
        # The kept forms (workflows.stores.kept: the trace, the Inventory), made by the first
        # run that plans and read by the others (in this process too), never in the user's
        # cache.
        patch.setenv("SPYRE_CI_CACHE_DIR", str(run_folder(tmp_path_factory) / "cache"))
        # `SPYRE_CI_WARM_IDLE_S=0 pytest ...`: the suite without sharing. Else the default
        # (600 s): a zygote warmed by an early test serves a late one (they all end with the
        # run).
        patch.setenv("SPYRE_CI_WARM_IDLE_S", os.environ.get("SPYRE_CI_WARM_IDLE_S", "600"))
        # The run warms more environments than a user's state directory (a change, a spec,
        # a plugin of its own in many tests): room for eight at once (0.4-1 GB each), so
        # that one is not stopped and warmed again while the run still uses it.
        patch.setenv("SPYRE_CI_WARM_MAX", os.environ.get("SPYRE_CI_WARM_MAX", "8"))
        _SESSION[:] = [Settings.from_env()]
        zygote.share(_SESSION[0])  # the tests that run shards in this process too
        kept.keep_in(_SESSION[0].cache_dir)
        yield


_SESSION: list[Settings] = []


@pytest.fixture(autouse=True)
def _the_run_s_warm_runner() -> Iterator[None]:
    """After a test that ran `spyre-ci` in this process (its `main` hands its own settings
    to the warm runner), the run's shared place again: a later module's fixture that runs
    shards here must not start zygotes elsewhere, outliving the test run."""
    yield
    if _SESSION:
        zygote.share(_SESSION[0])


def _warm_dir(factory: pytest.TempPathFactory) -> Path:
    return run_folder(factory) / "warm"


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller ends them, once every worker is done
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        warm_share.stop_every(_warm_dir(factory))


@pytest.fixture(autouse=True)
def _private_state_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the user's History, inventory cache or environment cache (a
    venv there whose torch sha is a test event's head would be found as that head's prepared
    environment, and the run would go there). One folder per session: a test that provisions
    torch venvs shares them with the session's others; one that reuses the user's on purpose
    (the live upgrade run) says so."""
    monkeypatch.setenv("SPYRE_CI_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    monkeypatch.setenv("SPYRE_CI_ENV_CACHE", str(tmp_path_factory.getbasetemp() / "env-cache"))
    monkeypatch.delenv("SPYRE_CI_REDIS_URL", raising=False)
