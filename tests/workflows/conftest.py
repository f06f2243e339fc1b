from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

TINY_SPEC = Path(__file__).parent / "data" / "tiny.yaml"
SOFTMAX_PATCH = REPO_ROOT / "examples" / "events" / "push_softmax_kernel.patch"


def spyre_ci(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
             cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "workflows", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=timeout,
    )


@pytest.fixture(scope="session")
def tiny_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of the tiny suite (16 variants) for the installed torch."""
    path = tmp_path_factory.mktemp("inventory") / "tiny.json.gz"
    result = spyre_ci("inventory", "--specs", str(TINY_SPEC), "--out", str(path))
    assert result.returncode == 0, result.stderr
    return path
