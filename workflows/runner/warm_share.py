"""Where shared zygotes live, and the bookkeeping of their folders (`workflows.runner.zygote`
starts, attaches to and stops them).

A shared zygote outlives the `spyre-ci` process that started it: every process of the same
state directory (successive `spyre-ci run`s, a worker, a test suite) forks its test processes
from it, so a second run of the same change, or of the same torch, starts its first test at
once instead of after the zygote's warm-up. Its folder is `ROOT/KEY/` (KEY: a digest of the
zygote's key), holding its socket, its log, `starting` (its keeper's pid while it warms up),
`ready.json` (written by the zygote when it is ready: its pid, its keeper's pid, the files it
loaded) and `used` (touched by each process that uses it: the least recently used goes first
when more than `$SPYRE_CI_WARM_MAX`, default `MAX_SHARED`, would be alive). ROOT is
`$SPYRE_CI_WARM_DIR`, else a folder per state directory in a private folder of this user
(`$XDG_RUNTIME_DIR`, else the temporary folder): a Unix socket's path holds 107 bytes, a
state directory's path may not. ROOT and its parent are this user's alone (mode 0700, not a
symlink), else nothing is shared.

A zygote ends on its own once it has had nothing to do for `$SPYRE_CI_WARM_IDLE_S` seconds
(`0`: no sharing, each process's zygotes end with it, as before).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflows.runner.fork_server import USED_FILE
from workflows.runner.zygote_process import READY_FILE, file_digest, file_stamp
from workflows.settings import Settings

READY = READY_FILE
STARTING = "starting"
USED = USED_FILE
MAX_SHARED = 4  # alive at once per ROOT by default ($SPYRE_CI_WARM_MAX); the LRU goes first
IN_USE_S = 30.0  # a zygote used this recently is never stopped to make room
SOCKET_PATH_MAX = 100  # a Unix socket's path holds 107 bytes (Linux)
# The processes that live in a place: zygotes, and warm `spyre-ci` processes
# (`workflows.cli.warm_cli`), each recognised by its command line.
_PROCESS_MARKS = (b"workflows.runner.zygote_process", b"workflows.cli.warm_process")


@dataclass(frozen=True)
class Place:
    """Where this state directory's shared zygotes live, and how long one stays idle."""

    root: Path
    idle_s: float
    max_shared: int = MAX_SHARED  # $SPYRE_CI_WARM_MAX

    def folder(self, key: object) -> Path:
        """The folder of the zygote of `key` (a frozen record: its repr is its content)."""
        return self.root / hashlib.sha256(repr(key).encode()).hexdigest()[:16]


class NotShared(Exception):
    """Nothing is shared here; the message says why (logged once, then private zygotes)."""


def place(settings: Settings) -> Place | None:
    """The place of the shared zygotes of a process with these settings; None when they say
    not to share (`SPYRE_CI_WARM_IDLE_S=0`). `NotShared` when the place cannot be private
    or is too long a path."""
    if settings.warm_idle_s <= 0:
        return None
    if settings.warm_dir is not None:
        root = settings.warm_dir
        _private_folder(root)
    else:
        mine = settings.runtime_dir / f"spyre-ci-{os.getuid()}"
        _private_folder(mine)
        root = mine / hashlib.sha256(str(settings.state_dir).encode()).hexdigest()[:12]
        _private_folder(root)
    if len(str(root)) + len("/0123456789abcdef/socket") > SOCKET_PATH_MAX:
        raise NotShared(f"{root} is too long a path for the shared zygotes' sockets")
    return Place(root, settings.warm_idle_s, settings.warm_max)


def _private_folder(path: Path) -> None:
    """Make `path` (mode 0700) or check that it is this user's alone."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    try:
        info = path.lstat()
    except OSError as exc:
        raise NotShared(f"cannot use {path}: {exc}") from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise NotShared(f"{path} is not a folder of this user's")
    if info.st_mode & 0o077:
        raise NotShared(f"{path} can be read or written by others (mode {info.st_mode & 0o777:o})")


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the lock of the zygote in `folder` (one process decides whether to start it)."""
    with open(folder.with_name(folder.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ready(folder: Path) -> dict[str, Any] | None:
    """The zygote's `ready.json` when it is there and its zygote alive, else None."""
    try:
        found = json.loads((folder / READY).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or not alive(int(found.get("pid") or 0)):
        return None
    return found


def starting(folder: Path) -> int | None:
    """The keeper pid of a zygote still warming up in `folder`, when it is alive."""
    try:
        pid = int((folder / STARTING).read_text() or 0)
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def mark_starting(folder: Path, keeper: int) -> None:
    (folder / STARTING).write_text(str(keeper))


ABOUT = "about.json"  # what the zygote was started for (`spyre-ci warm list` shows it)


def describe(folder: Path, about: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        (folder / ABOUT).write_text(json.dumps(about))


@dataclass(frozen=True)
class Alive:
    """A shared zygote as `spyre-ci warm list` shows it."""

    folder: Path
    pid: int  # 0 while it warms up
    ready: bool
    rss_mb: int | None
    idle_s: float  # since a process last used it
    about: dict[str, Any]


def _about(folder: Path) -> dict[str, Any]:
    try:
        about = json.loads((folder / ABOUT).read_text())
    except (OSError, ValueError):
        return {}
    return about if isinstance(about, dict) else {}


def alive_zygotes(root: Path) -> list[Alive]:
    """The zygotes under `root` that are ready or warming up, most recently used first."""
    found = []
    now = time.time()
    for folder in _folders(root):
        done = ready(folder)
        pid = int(done.get("pid") or 0) if done else 0
        if done is None and starting(folder) is None:
            continue  # what an ended zygote left: the next start clears it
        about = _about(folder)
        found.append(
            Alive(
                folder,
                pid,
                done is not None,
                status_mb(pid, "VmRSS"),
                now - _last_used(folder),
                about,
            )
        )
    return sorted(found, key=lambda z: z.idle_s)


def status_mb(pid: int, field: str) -> int | None:
    """A size of process `pid` in MB from /proc/PID/status (`VmRSS`: resident, `VmSize`:
    mapped), or None when unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def touch(folder: Path) -> None:
    """Say the zygote in `folder` was just used (`make_room` spares the most recent)."""
    with contextlib.suppress(OSError):
        (folder / USED).touch()


def alive(pid: int) -> bool:
    """Whether `pid` is a zygote process (or its keeper), or a warm `spyre-ci` process, that
    has not ended (a zombie has)."""
    if pid <= 0:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and any(mark in command for mark in _PROCESS_MARKS)


def stop(folder: Path) -> None:
    """End the zygote in `folder` (its keeper's group: the keeper and the zygote; its test
    processes die with it) and remove the folder."""
    for pid in _pids(folder):
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def stop_every(root: Path) -> int:
    """End every shared zygote under `root` (a test session's end, `spyre-ci` never does
    it for the user); how many there were."""
    count = 0
    for folder in _folders(root):
        stop(folder)
        count += 1
    return count


def make_room(root: Path, max_shared: int = MAX_SHARED) -> None:
    """Stop the zygotes whose loaded code changed on disk (their key is not the current
    one, so nobody would use them again), then the least recently used ones, so that one
    more leaves at most `max_shared`; never one warming up or in use (used in the last
    IN_USE_S seconds: a zygote with a test process running says so every few seconds), so
    more may be alive for a while when more are in use at once. A warm `spyre-ci` process
    (`workflows.cli.warm_cli`) is neither counted nor stopped: it is a fifth of a zygote's
    size, one whose code changed steps aside by itself, and its forks are runs that must
    not die with it."""
    folders = []
    for folder in _folders(root):
        if _about(folder).get("kind") == "cli":
            continue
        if stale(folder) is not None:
            stop(folder)
        else:
            folders.append(folder)
    folders.sort(key=_last_used)
    now = time.time()
    for folder in folders[: max(0, len(folders) - max_shared + 1)]:
        warming = ready(folder) is None and starting(folder) is not None
        if not warming and now - _last_used(folder) > IN_USE_S:
            stop(folder)


MAX_CLI = 2  # warm `spyre-ci` processes alive at once per place (each interpreter, cwd, ...)


def make_room_for_cli(root: Path) -> None:
    """Stop the least recently used warm `spyre-ci` processes so that one more leaves at
    most MAX_CLI; never one used in the last IN_USE_S seconds (a fork running says so every
    few seconds): its forks are runs, which end with it."""
    folders = sorted((f for f in _folders(root) if _about(f).get("kind") == "cli"), key=_last_used)
    now = time.time()
    for folder in folders[: max(0, len(folders) - MAX_CLI + 1)]:
        if now - _last_used(folder) > IN_USE_S:
            stop(folder)


def stale(folder: Path) -> str | None:
    """A file the ready zygote in `folder` loaded whose content changed since (None: none
    did, or it is not ready): its forks would run the old code."""
    try:
        files = json.loads((folder / READY).read_text()).get("files") or []
    except (OSError, ValueError, AttributeError):
        return None
    return changed_file(files)


def changed_file(files: list[list[str]]) -> str | None:
    """The first of a zygote's loaded files, `[path, stat stamp, digest]`, whose content
    changed on disk (or is gone). The digest decides; it is computed again only for a file
    whose stamp moved, and a stamp that moved over the same content is remembered in
    `files`, so a `touch` costs one digest and an edit with its mtime set back is still
    seen."""
    for entry in files:
        path, stamp, digest = entry
        now = file_stamp(path)
        if now == stamp:
            continue
        if not now or file_digest(path) != digest:
            return str(path)
        entry[1] = now
    return None


def _folders(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _last_used(folder: Path) -> float:
    for name in (USED, READY, STARTING):
        with contextlib.suppress(OSError):
            return (folder / name).stat().st_mtime
    return 0.0


def _pids(folder: Path) -> list[int]:
    """The keeper pids (process groups) the folder names."""
    pids = []
    with contextlib.suppress(OSError, ValueError):
        pids.append(int((folder / STARTING).read_text() or 0))
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        pids.append(int(json.loads((folder / READY).read_text()).get("keeper") or 0))
    return sorted({p for p in pids if p > 0})
