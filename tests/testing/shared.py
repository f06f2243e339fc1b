"""Data built once per test run and shared by the xdist workers.

Each xdist worker has its own session, so a `scope="session"` fixture runs once per worker:
an Inventory or a seeded state directory would be built by every worker. `built_once`
builds it once for the whole run, in the run's base temporary folder, under a lock; the
other workers wait for it and reuse it. What it builds is read-only to the tests (those
that write copy it first).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def run_folder(factory: pytest.TempPathFactory) -> Path:
    """The test run's base temporary folder, the same for every xdist worker."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's base folder, above each worker's own
    return root


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """`build(path)` once per test run (for all xdist workers); returns the built `path`."""
    path = run_folder(factory) / "built-once" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not path.exists():
            partial = path.parent / f"partial-{name}"  # its suffix kept: it says the format
            if partial.is_dir():
                shutil.rmtree(partial)
            else:
                partial.unlink(missing_ok=True)
            build(partial)  # a build that fails leaves no `path` for the next worker
            partial.rename(path)
    return path
