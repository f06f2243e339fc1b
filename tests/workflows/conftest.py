from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, build_inventory

SOFTMAX_PATCH = REPO_ROOT / "examples" / "events" / "push_softmax_kernel.patch"
GLU_SPEC = REPO_ROOT / "tests" / "workflows" / "data" / "glu.yaml"
GLU_PATCH = REPO_ROOT / "examples" / "changes" / "glu_batch_check.patch"


def spyre_ci(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "workflows", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def glu_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of tests/workflows/data/glu.yaml (2 variants) for the installed torch."""
    return build_inventory(GLU_SPEC, tmp_path_factory.mktemp("inventory") / "glu.json.gz")
