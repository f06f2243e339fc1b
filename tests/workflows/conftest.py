from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SOFTMAX_PATCH = REPO_ROOT / "examples" / "events" / "push_softmax_kernel.patch"


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
