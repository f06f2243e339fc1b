"""The run's folder: its id, where it lives, who holds it, its shards' work folders, when they
started, the plan it keeps and the outcomes a resumed run keeps.

    where each file is: `workflows.run.layout.RunLayout`

Who holds it: one run at a time writes into an out directory (`holding`, for the run's
whole life: plan, shards, finish and exports). The hold is an `flock` on `LOCK_FILE` in the
folder, which names the run holding it; the kernel lets go of it when that process ends,
however it ends, so the lock of a run that was killed is taken over by the next one (and
said).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from contracts.event import TriggerEvent
from selector import SelectorError
from suites.model import Outcome
from suites.results_file import read_outcomes
from workflows.run.layout import RunLayout
from workflows.run.run_model import PipelineError, PlannedRun, RunRequest
from workflows.runner.shard_runner import short_message
from workflows.stores.history import HistoryStore


def run_id_for(event: TriggerEvent, attempt: int = 1, *, started: str | None = None) -> str:
    """Stable per delivery: a redelivered or retried task lands on the same run.

    A run started by hand (`started`, a timestamp) is a new run each time, even for the
    same recorded event. The id names folders and Redis keys, so it is built only from a
    safe alphabet whatever the payload said: the kind and the sha are kept only when they
    are a known word and hex, the rest is a digest.
    """
    key = f"{event.delivery_id}:{attempt}:{started or ''}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    kind = event.kind if _WORD.fullmatch(event.kind) else "event"
    sha = event.head_sha[:8] if _HEX.fullmatch(event.head_sha[:8]) else "nosha"
    return f"{kind}-{sha}-{digest}"


_WORD = re.compile(r"[a-z_]{1,20}")
_HEX = re.compile(r"[0-9a-f]{8}")


def run_dir(out_root: str | Path, run_id: str) -> Path:
    """`out_root/run_id`, proved to stay under `out_root` (PipelineError otherwise)."""
    root = Path(out_root).resolve()
    path = (root / run_id).resolve()
    if path.parent != root or not _SAFE_ID.fullmatch(run_id):
        raise PipelineError(f"run id {run_id!r} does not name a folder under {root}")
    return path


_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def claim_out_dir(out: Path, run_id: str, history: HistoryStore) -> None:
    """Make `out` this run's: refuse it while it holds another unfinished run, else clear
    what an earlier, finished run left in it (its work files and JUnit)."""
    path = RunLayout(out, run_id).planned_file
    if out.exists() and not out.is_dir():
        raise PipelineError(f"{out}: not a directory; pass another --out")
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))["request"]["run_id"]
    except (OSError, ValueError, KeyError, TypeError):
        previous = None
    if previous is not None and previous != run_id:
        run = history.get_run(previous)
        if run is not None and not run.state.final:
            raise PipelineError(
                f"{out} holds run {previous}, which has not finished ({run.state}): resume it "
                f"with `spyre-ci runs resume {previous}`, or pass another --out (or remove "
                f"{out} to give that run up)"
            )
    if previous is not None and previous != run_id:
        # Only a folder an earlier run of ours planned in (it has our planned.json) is
        # cleared: a user's own `work/` elsewhere is never touched.
        for stale in RunLayout(out, run_id).stale:
            shutil.rmtree(stale, ignore_errors=True)


LOCK_FILE = ".spyre-ci-run.lock"  # in the out directory while a run holds it


@contextlib.contextmanager
def holding(out: Path, run_id: str) -> Iterator[None]:
    """Hold the out directory `out` for run `run_id` while the block runs: another run (or a
    `runs resume`) that wants it meanwhile is refused (PipelineError, exit 2) naming this
    one. Folders made only for the lock are removed again when the run leaves nothing in
    them (a run refused as bad input leaves no `--out` behind)."""
    if out.exists() and not out.is_dir():
        raise PipelineError(f"{out}: not a directory; pass another --out")
    made = [p for p in (out, *out.parents) if not p.exists()]
    fd = _lock(out, run_id)
    try:
        yield
    finally:
        # Unlinked while still held: a run waiting on this file finds it gone and locks the
        # next one (`_lock` checks that the file it holds is the one on disk).
        with contextlib.suppress(OSError):
            os.unlink(out / LOCK_FILE)
        os.close(fd)  # lets go of the flock
        for folder in made:  # the deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


# The pid a run names as its own in its out directory's lock: this process's, or, for a run
# forked from the warm `spyre-ci` process (`workflows.cli.warm_cli`), that of the `spyre-ci`
# process that asked for it: the one its user started, waits on and signals.
_PROGRAM_PID: list[int] = []


def run_for(pid: int) -> None:
    """Name process `pid` as this process's runs' own (a warm fork, for its asker)."""
    _PROGRAM_PID[:] = [pid]


def _lock(out: Path, run_id: str) -> int:
    path = out / LOCK_FILE
    while True:
        out.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # the folder went with the run that made it: again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise PipelineError(
                f"{out} is in use by {_described(holder)}: one run writes into an out "
                "directory at a time; wait for it to end, or pass another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released and removed between our open and our lock
            os.close(fd)
            continue
        previous = _holder(fd)
        if previous:  # its process ended holding it: killed, or its machine went down
            print(
                f"spyre-ci: {out}: {_described(previous)} ended without letting go of it; "
                "taking it over",
                file=sys.stderr,
            )
        me = {
            "run_id": run_id,
            "pid": _PROGRAM_PID[0] if _PROGRAM_PID else os.getpid(),
            "host": socket.gethostname(),
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        return fd


def _holder(fd: int) -> dict[str, object]:
    """Who the lock file says holds it ({} when it names no one yet)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _described(holder: dict[str, object]) -> str:
    if not holder.get("run_id"):
        return "another run (starting)"
    since = holder.get("since")
    when = (
        dt.datetime.fromtimestamp(since, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if isinstance(since, int | float)
        else "an unknown time"
    )
    return (
        f"run {holder['run_id']} (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
        f"since {when})"
    )


STARTED_FILE = "started_at"  # in a shard's work dir: when it first started (epoch seconds)


def mark_started(work: Path) -> None:
    """Note when a shard first started (a resumed shard keeps its first start): `finish`
    records the run's earliest as its start of execution, the end of its queue time."""
    path = work / STARTED_FILE
    if not path.exists():
        work.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{time.time():.3f}\n", encoding="utf-8")


def first_start(request: RunRequest) -> float | None:
    """The earliest start a shard of this run noted here; None when none did (a run planned
    before starts were noted, or shards that ran on other machines only)."""
    starts = []
    for path in RunLayout.of(request).started_files(STARTED_FILE):
        try:
            starts.append(float(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return min(starts, default=None)


def load_planned(out_dir: str | Path, run_id: str | None = None) -> PlannedRun:
    """The planned run an out directory holds; with `run_id`, it must be that run's."""
    path = RunLayout(Path(out_dir), run_id or "").planned_file
    try:
        planned = PlannedRun.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise PipelineError(f"{path}: the run left no plan there; start it again") from None
    except (
        json.JSONDecodeError,
        KeyError,
        TypeError,
        ValueError,
        UnicodeDecodeError,
        SelectorError,
    ) as exc:
        raise PipelineError(f"{path}: not a readable plan: {exc}; start the run again") from exc
    if run_id is not None and planned.request.run_id != run_id:
        raise PipelineError(
            f"{path} now holds run {planned.request.run_id}, not {run_id}: the out directory "
            f"was reused, so run {run_id} cannot be resumed; start it again"
        )
    return planned


def recorded_outcomes(request: RunRequest, shard: str) -> dict[str, Outcome]:
    """Outcomes a shard's test processes already reported (what a resumed run keeps)."""
    done = read_outcomes(sorted(RunLayout.of(request).shard(shard).glob("*.jsonl")))
    return {vid: replace(o, message=short_message(o.message)) for vid, o in done.items()}
