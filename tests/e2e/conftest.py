"""Fixtures of the whole-system tests: a state directory seeded with the bundled Inventory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing.cli import state_env
from tests.testing.paths import REPO_ROOT
from tests.testing.shared import built_once


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
