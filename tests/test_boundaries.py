"""The control plane (relay, selector, dashboard_export) must never import torch."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

CONTROL_PLANE = ("relay", "selector", "dashboard_export")

_PROBE = """
import importlib, pkgutil, sys
for top in {packages!r}:
    package = importlib.import_module(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        importlib.import_module(info.name)
heavy = sorted(m for m in ("torch", "numpy") if m in sys.modules)
print(",".join(heavy))
"""


def test_control_plane_never_imports_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(packages=CONTROL_PLANE)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"control plane imported: {result.stdout.strip()}"


def test_cli_help_does_not_import_torch() -> None:
    probe = (
        "import sys\nfrom workflows.cli import build_parser\nbuild_parser()\n"
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
