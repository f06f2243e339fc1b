"""Fixtures: a real pytest run's JUnit, a RunRecord built from it, and a local HUD server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboard_export.model import (
    RunRecord,
)
from tests.servers.github_api import github_api  # noqa: F401 - a fixture, used by name
from tests.servers.hud import HudServer
from tests.testing.records import SAMPLE, make_record


@pytest.fixture(scope="session")
def junit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JUnit XML written by a real `pytest --junitxml` run of data/variants_sample.py."""
    work = tmp_path_factory.mktemp("sample_run")
    shutil.copy(SAMPLE, work / "test_variants.py")
    out = work / "junit"
    out.mkdir()
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "test_variants.py",
            "-p",
            "no:cacheprovider",
            f"--junitxml={out / 'shard-0.xml'}",
            "-o",
            "junit_logging=all",
            "-o",
            "junit_family=xunit1",  # as PyTorch CI writes it: file and line per testcase
            "-W",
            "ignore::pytest.PytestUnknownMarkWarning",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Exit 1: some sample tests fail on purpose. Anything else is a broken run.
    assert result.returncode == 1, result.stdout + result.stderr
    return out


@pytest.fixture()
def record(junit_dir: Path) -> RunRecord:
    return make_record(junit_dir)


@pytest.fixture()
def hud_server() -> Iterator[HudServer]:
    with HudServer("hud-test-key") as server:
        yield server
