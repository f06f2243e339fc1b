"""The warm command line: `spyre-ci run` forked from a `spyre-ci` process kept warm.

A `spyre-ci run` process spends most of a second run that is not its tests on work every
run repeats: importing the pipeline (0.2-0.3 s), unpickling the shipped trace and the
Inventory (0.1 s). A warm process (`workflows.cli.warm_process`) does that once and stays in
the place of the shared zygotes (`workflows.runner.warm_share`, one per key below); each
`spyre-ci run` then asks it for a fork, hands it its stdin, stdout and stderr, its
arguments, directory, environment and umask, and waits: the fork runs `main()` as the
process itself would, with the asking process's descriptors (a terminal stays a terminal),
and its exit status becomes the asking process's. A signal the asking process gets (Ctrl-C,
a CI job's SIGTERM, a hang-up) is passed to the fork, which stops as the process would have;
if the asking process dies, the fork is killed with it. A fork killed by a signal kills
the asking process with the same signal, after one line on stderr saying so.

Everything else runs in its own process, as before: another command, no warm process yet
(the first `run` starts one, in the background, and runs in its own process), sharing off
(`SPYRE_CI_WARM_IDLE_S=0`), `SPYRE_CI_WARM_CLI=0`, a closed standard stream, a file named
through this process's own descriptors (`--diff <(git diff)`), or a warm
process that refuses (a file it loaded changed since: it ends, and the next run starts a
new one) or is gone. Nothing of a run is lost on that path: the fork is asked for before any
of the run's work, and the asking process runs the command itself when there is no fork.

The key is what a fork inherits from the warm process instead of from the asking process:
the interpreter, its `sys.path`, flags and `PYTHON*` variables, the locale's variables, the
resource limits, CPU affinity, priority and groups, the namespaces, cgroups and root
directory it runs in. A process that differs in any of them
gets a warm process of its own (each ends once idle; at most `warm_share.MAX_CLI` live in a
place, the least recently used stopped first; `warm_share.make_room` counts only zygotes).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.runner import warm_share
from workflows.settings import Settings, child_environment

COMMANDS = ("run",)  # the commands forked from the warm process
SOCKET = "socket"
START = "start.json"  # what the warm process is started with (its sys.path)
LOG = "log"  # the warm process's stdout and stderr
_LIMITS = ("AS", "DATA", "NOFILE", "STACK", "CORE", "CPU", "FSIZE", "NPROC", "MEMLOCK")
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def key() -> tuple[Any, ...]:
    """What a fork of the warm process has from it rather than from the process asking."""
    variables = sorted(
        (name, value)
        for name, value in os.environ.items()
        if name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")
    )
    limits = tuple(resource.getrlimit(getattr(resource, f"RLIMIT_{n}")) for n in _LIMITS)
    return (
        "spyre-ci",
        sys.executable,
        sys.version,
        tuple(search_path()),
        tuple(sys.flags),
        tuple(sorted(sys._xoptions.items())),
        tuple(sys.warnoptions),
        tuple(variables),
        limits,
        tuple(sorted(os.sched_getaffinity(0))),
        os.getpriority(os.PRIO_PROCESS, 0),
        os.getgid(),
        tuple(sorted(os.getgroups())),
        _place_in_the_system(),
    )


def _place_in_the_system() -> tuple[str, ...]:
    """The namespaces (mounts, users, pids, network, ...), cgroups and root directory this
    process runs in: a fork lives in the warm process's, so an asker in a private mount
    namespace (a tmpfs over its state directory), a container or a CI job's cgroup gets a
    warm process of its own, started where it runs."""
    found = []
    for name in ("mnt", "user", "pid", "net", "ipc", "uts", "cgroup"):
        try:
            found.append(os.readlink(f"/proc/self/ns/{name}"))
        except OSError:
            found.append(f"{name}:?")
    try:
        found.append(Path("/proc/self/cgroup").read_text())
    except OSError:
        found.append("cgroup:?")
    root = os.stat("/")
    found.append(f"root:{root.st_dev}:{root.st_ino}")
    return tuple(found)


def search_path() -> list[str]:
    """`sys.path` with its directories made absolute ("" is the current one): a fork runs
    in the asker's directory, and must import what the asker would. An entry that names no
    directory stays as it is (an editable install's path hook, a zip file)."""
    return [
        os.path.abspath(entry) if not entry or os.path.isdir(entry) else entry for entry in sys.path
    ]


def folder(settings: Settings) -> Path | None:
    """The folder of this process's warm process; None when there is none to have (the
    settings say no, or the place of shared zygotes cannot be private)."""
    if not settings.warm_cli:
        return None
    try:
        place = warm_share.place(settings)
    except warm_share.NotShared:
        return None
    return place.folder(key()) if place is not None else None


def forked(argv: list[str]) -> int | None:
    """The exit status of `argv` run in a fork of the warm process; None when it was not
    (and nothing of it ran): the caller runs it itself."""
    if len(argv) < 2 or argv[1] not in COMMANDS:
        return None
    if any(_names_own_descriptor(text) for text in (*argv, *os.environ.values())):
        return None  # `--diff <(git diff)`: a descriptor only this process has
    try:
        settings = Settings.from_env()
        where = folder(settings)
        for fd in (0, 1, 2):
            os.fstat(fd)  # a closed standard stream: nothing to hand over
        cwd = os.getcwd()
    except Exception:  # noqa: BLE001 - the command, in this process, says what is wrong
        return None
    if where is None:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(where / SOCKET))
    except OSError:
        conn.close()
        return None
    umask = os.umask(0o022)
    os.umask(umask)
    request = {
        "argv": list(argv),
        "pid": os.getpid(),
        "cwd": cwd,
        "env": dict(os.environ),
        "umask": umask,
        "streams": {
            name: [
                getattr(stream, attribute, None)
                for attribute in ("encoding", "errors", "line_buffering", "write_through")
            ]
            for name in ("stdin", "stdout", "stderr")
            for stream in [getattr(sys, name)]
        },
    }
    try:
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    except OSError:
        conn.close()
        return None
    try:
        return _wait(conn, where)
    except Exception as exc:  # noqa: BLE001 - never a traceback, nor Python's exit 1
        print(
            f"spyre-ci: infrastructure error (not a test result): waiting for the warm "
            f"spyre-ci process failed: {exc!r}",
            file=sys.stderr,
        )
        return ExitCode.INFRASTRUCTURE


def _names_own_descriptor(text: str) -> bool:
    """Whether `text` names a file through this process's descriptors (`/dev/fd/63`, what a
    shell's `<(...)` passes; `/proc/self/...`), which a fork would read as its own. Its
    standard streams are the fork's too (`/dev/stdin`, `/dev/fd/0`)."""
    for prefix in ("/dev/fd/", "/proc/self/", f"/proc/{os.getpid()}/"):
        at = text.find(prefix)
        if at >= 0 and (at == 0 or text[at - 1] == "="):
            rest = text[at + len(prefix) :]
            return not (prefix == "/dev/fd/" and rest in ("0", "1", "2"))
    return False


# How long a warm process may take to fork (it may be loading what a run made): past it,
# the command runs in this process (the fork, if one comes, is killed as the connection
# closes).
FORK_TIMEOUT_S = 60.0


def _wait(conn: socket.socket, where: Path) -> int | None:
    """Wait for the fork's exit status, passing it the signals this process gets."""
    fork: list[int] = []
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if not fork:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(fork[0], signum)

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    conn.settimeout(FORK_TIMEOUT_S)
    with conn, conn.makefile("rb") as lines:
        for line in _lines(lines):
            try:
                message = json.loads(line)
            except ValueError:
                break
            if "error" in message:
                return None  # refused before it forked: nothing ran
            if "pid" in message:
                conn.settimeout(None)  # the command runs as long as it runs
                fork.append(int(message["pid"]))
                for received in pending:
                    forward(received, None)
            elif "exit" in message:
                return _status(int(message["exit"]), fork)
    if not fork:
        return None  # gone before it forked: nothing ran
    print(
        f"spyre-ci: infrastructure error (not a test result): the warm spyre-ci process "
        f"ended before its fork (pid {fork[0]}) running this command did; its log: "
        f"{where / LOG}",
        file=sys.stderr,
    )
    return ExitCode.INFRASTRUCTURE


def _lines(lines: Any) -> Any:
    """The answer's lines, until the connection ends or fails (or, before the fork, the
    warm process takes longer than FORK_TIMEOUT_S)."""
    while True:
        try:
            line = lines.readline()
        except OSError:  # no fork in time, or turned away (a warm process that steps aside)
            return
        if not line:
            return
        yield line


def _status(code: int, fork: list[int]) -> int:
    """The asking process's exit status for the fork's (`waitstatus_to_exitcode`: minus the
    signal that killed it)."""
    if code >= 0:
        return code
    name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
    print(
        f"spyre-ci: the process running this command (pid {fork[0]}) was killed by {name}",
        file=sys.stderr,
    )
    sys.stderr.flush()
    with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep theirs
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)  # as if this process had been: a shell sees the same
    return 128 - code


def ensure(settings: Settings) -> None:
    """Start this process's warm process in the background unless it runs or is starting
    (a `run` in its own process calls it: the next run forks from it)."""
    where = folder(settings)
    if where is None or warm_share.ready(where) is not None:
        return
    try:
        with warm_share.locked(where):
            if warm_share.ready(where) is not None or warm_share.starting(where) is not None:
                return
            warm_share.stop(where)  # what an ended one left, if anything
            warm_share.make_room(where.parent, settings.warm_max)
            warm_share.make_room_for_cli(where.parent)  # `python -m` from many folders
            where.mkdir(mode=0o700)
            (where / START).write_text(json.dumps({"path": search_path()}))
            warm_share.describe(where, {"kind": "cli", "python": sys.executable})
            with open(where / LOG, "ab") as log:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        *subprocess._args_from_interpreter_flags(),  # type: ignore[attr-defined]
                        "-m",
                        "workflows.cli.warm_process",
                        str(where),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_environment(),
                    start_new_session=True,  # its own group: `warm_share.stop` kills it
                )
            warm_share.mark_starting(where, proc.pid)
    except OSError as exc:
        print(f"spyre-ci: no warm process for the next run ({exc})", file=sys.stderr)


def imports_file(where: Path) -> Path:
    """Beside a warm process's folder (it outlives the process): the modules `run` imports."""
    return where.with_name(where.name + ".imports")


def record_imports(settings: Settings) -> None:
    """At the end of a `run` (in its own process or a fork): the names of the modules it
    imported, for the warm process to import ahead of the next fork. Nothing when it
    imported torch (the warm process never does) or when the names are those recorded."""
    where = folder(settings)
    if where is None or "torch" in sys.modules:
        return
    names = sorted(name for name in sys.modules if name != "__main__")
    path = imports_file(where)
    try:
        if json.loads(path.read_text()) == names:
            return
    except (OSError, ValueError):
        pass
    part = path.with_name(f"{path.name}.{os.getpid()}")
    with contextlib.suppress(OSError):
        part.write_text(json.dumps(names))
        os.replace(part, path)
