"""Deferred changes judged when a build arrives: after a nightly or periodic run.

A change that needs a build waits in `STATE_DIR/pending/` for the first build that holds it
(`spyre-ci pending check`). A scheduled run is the moment such a build may have arrived: a
worker that finishes one checks the waiting changes at once (`after_scheduled`), so the
later result reaches HUD and the relay without a cron line; `spyre-ci run` of a nightly says
how many wait and the command that judges them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from workflows.run.on_build import SCHEDULED
from workflows.run.run_model import RunRequest
from workflows.settings import Settings, child_environment
from workflows.stores import pending

Log = Callable[[str], None]


def waiting_after(request: RunRequest, settings: Settings) -> int:
    """How many deferred changes a check should look at after `request` ran: 0 unless it is
    a scheduled run and a source of builds is configured."""
    if request.event.kind not in SCHEDULED or not settings.build_index:
        return 0
    return len(pending.open_entries(settings.state_dir))


def after_scheduled(request: RunRequest, settings: Settings, log: Log) -> int | None:
    """Run `spyre-ci pending check` when `request` was a scheduled run and changes wait;
    its exit code (None when there was nothing to check). A check that fails is said and
    leaves every change pending: the next scheduled run checks again."""
    waiting = waiting_after(request, settings)
    if not waiting:
        return None
    log(f"{waiting} deferred change(s) wait for a build: checking them after {request.run_id}")
    done = subprocess.run(
        [sys.executable, "-m", "workflows", "pending", "check"],
        env=child_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    for line in (done.stdout + done.stderr).strip().splitlines()[-20:]:
        log(f"  pending check: {line}")
    log(f"pending check after {request.run_id} exited {done.returncode}")
    return done.returncode
