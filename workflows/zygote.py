"""The warm runner: a zygote process that has torch, the test databases and the suites loaded,
and forks a fresh test process per shard attempt.

A cold shard process pays about 11 s here (torch, the OpInfo and ModuleInfo databases, the
suites' expansion) before its first test. The zygote pays that once per worker; each test
process is then a `fork()` of it that runs `pytest.main([...])` with the very arguments,
files and environment of the cold `python -m pytest ...` command, in its own session, under
the memory limit and with a death signal tied to the zygote. The shard runner waits on it and
kills its process group by pid as it does a cold one, so crash, hang and memory isolation
are unchanged (`workflows/shard_runner.py`).

When it is used (`key_for`): `SPYRE_CI_ZYGOTE` is not `0`, the shard runs on this
interpreter, and the shard's environment adds nothing that can change imports (a mutation
overlay, another `PYTHONPATH`: those shards start cold, never in an unmutated zygote). A
zygote is keyed by the interpreter, the plugin, the specs and their Inventory cache key
(torch version, spec and expectations files, `suites/` code), a stamp of the backend's code
and the environment: when any of them changes, a new zygote is built. A zygote that cannot
start, died, or refuses to fork (a thread runs in it: a fork would copy its locks, not the
thread) is dropped; its shards start cold, and that is logged once.

The zygote speaks one JSON line each way per connection on a Unix socket in a private
folder: `{"argv", "cwd", "env", "stdout", "stderr", "memory_mb"}` -> `{"pid"}` (or
`{"error"}`), then `{"exit": returncode}` when the child ends (the zygote is its parent and
reaps it). It ends when its stdin closes (the runner exited), killing its children's groups.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import importlib.util
import json
import logging
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Variables a test process reads at run time, if at all, never while the zygote imports:
# the child gets their values (its whole environment is the shard's), the key ignores them.
# The thread counts are applied in the child (`torch.set_num_threads`).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
RUNTIME_VARS = (
    *THREAD_VARS,
    "PYTEST_CURRENT_TEST",
    "PWD",
    "OLDPWD",
    "_",
    # workflows.settings: read by the workflows layer, not by anything a test imports.
    "SPYRE_CI_STATE_DIR",
    "SPYRE_CI_REDIS_URL",
    "SPYRE_CI_IMPACT_MAP",
    "SPYRE_CI_INVENTORY",
    "SPYRE_CI_MASS_FAILURE_SHARE",
    "SPYRE_CI_ENV_CACHE",
    "SPYRE_CI_CALLBACK_TOKEN",
    "SPYRE_CI_LEASE_TTL",
    "SPYRE_CI_TRACE",
    "SPYRE_CI_TRACE_SHARE",
    "SPYRE_CI_ZYGOTE",
)
TRACER = "workflows.impact_tracer"
# Room in the zygote's argv for a child's command line (`_show_as`).
_PAD = "--pad=" + "." * 8192
MAX_ZYGOTES = 2  # alive at once per process (distinct specs, say); the least recent goes
READY_TIMEOUT_S = 300.0
_PR_SET_PDEATHSIG = 1
_REFUSED = "refused to fork"


class ZygoteUnavailable(Exception):
    """The zygote cannot fork this test process: start it cold (the message says why)."""


@dataclass(frozen=True)
class ZygoteKey:
    """What a zygote loaded: a test process may fork from it only when all of it is the same."""

    python: str
    plugin: str
    specs: tuple[str, ...]
    inventory: str  # workflows.inventory_cache.cache_key: torch version, specs, suites/ code
    code: str  # the backend's and the plugin's code (sizes and mtimes)
    env: tuple[tuple[str, str], ...]  # the environment, less RUNTIME_VARS


def import_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of an environment that can change what a process imports.

    A run's trace of chosen ids (`workflows.trace_store.tracing_env`: the tracer on
    `PYTEST_PLUGINS`, its files) is loaded by `pytest.main` in the child and records test
    calls only, so it is run time too. A trace with the session (`spyre-ci impact-map`,
    no ids file) records imports and collection, which a zygote did before the fork: it is
    not, and starts cold.
    """
    from workflows.impact_tracer import IDS_VAR, MODE_VAR, OUT_VAR

    runtime = set(RUNTIME_VARS)
    if env.get(IDS_VAR):
        runtime |= {IDS_VAR, MODE_VAR, OUT_VAR}
    kept = {k: v for k, v in env.items() if k not in runtime}
    if env.get(IDS_VAR) and "PYTEST_PLUGINS" in kept:
        plugins = [p for p in kept["PYTEST_PLUGINS"].split(",") if p.strip() and p != TRACER]
        kept["PYTEST_PLUGINS"] = ",".join(plugins)
        if not plugins:
            del kept["PYTEST_PLUGINS"]
    return tuple(sorted(kept.items()))


def key_for(
    python: str, plugin: str, specs: Sequence[str], env: Mapping[str, str]
) -> ZygoteKey | None:
    """The zygote a test process with this interpreter, plugin, specs and full environment
    may fork from; None when it must start cold (another interpreter, an environment that
    differs from this process's in what it imports, no `fork` here)."""
    if sys.platform != "linux" or not _same_file(python, sys.executable):
        return None
    wanted = import_env(env)
    if wanted != import_env(os.environ):
        return None  # a mutation overlay, another PYTHONPATH, ...: never the plain zygote
    from workflows.inventory_cache import cache_key

    return ZygoteKey(
        sys.executable,
        plugin,
        tuple(specs),
        cache_key(specs),
        _code_stamp(plugin),
        wanted,
    )


def fork(
    key: ZygoteKey,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdout: Path,
    stderr: Path,
    memory_mb: int | None,
) -> WarmChild:
    """A test process forked from the zygote of `key` (started now when there is none):
    `pytest.main(argv)` in `cwd` with exactly `env`, stdout and stderr appended to the files."""
    return _POOL.get(key).fork(argv, cwd, env, stdout, stderr, memory_mb)


def prestart(plugin: str, specs: Sequence[str]) -> None:
    """Start warming the zygote the shards of this process will use (returns at once)."""
    key = key_for(sys.executable, plugin, specs, os.environ)
    if key is not None:
        with contextlib.suppress(ZygoteUnavailable):
            _POOL.get(key)


def stop_all() -> None:
    """Stop every zygote of this process (they also end on their own when it exits)."""
    _POOL.stop_all()


def log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        log.warning("%s", message)


_LOGGED: set[str] = set()


class WarmChild:
    """A forked test process as the shard runner sees it (the `subprocess.Popen` subset it
    uses): its exit code comes from the zygote, which is its parent."""

    def __init__(self, conn: socket.socket, pid: int, zygote: Zygote) -> None:
        self._conn = conn
        self._buffer = b""
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self) -> int:
        """Its exit code; called after its group was killed, so it comes at once."""
        deadline = time.monotonic() + 30.0
        while self.returncode is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self._gone("no exit status from the zygote after 30 s")
                break
            self._read(left)
        assert self.returncode is not None
        return self.returncode

    def _read(self, timeout: float) -> None:
        try:
            readable, _, _ = select.select([self._conn], [], [], timeout)
            chunk = self._conn.recv(4096) if readable else None
        except OSError:
            chunk = b""
        if chunk is None:
            return
        if not chunk:
            self._gone("the zygote died")
            return
        self._buffer += chunk
        if b"\n" in self._buffer:
            message = json.loads(self._buffer.split(b"\n", 1)[0])
            self.returncode = int(message["exit"])
            self._conn.close()

    def _gone(self, why: str) -> None:
        # Its children die with it (their death signal): this one was killed.
        self.returncode = -int(signal.SIGKILL)
        self._conn.close()
        self._zygote.broken = why


class Zygote:
    """One zygote process (runner side): started at once, ready when its first line says so."""

    def __init__(self, key: ZygoteKey) -> None:
        self.key = key
        self.folder = Path(tempfile.mkdtemp(prefix="spyre-zygote-"))
        self.socket_path = self.folder / "socket"
        self.broken: str | None = None
        self._ready = False
        self._lock = threading.Lock()
        self._log = open(self.folder / "zygote.log", "wb")  # noqa: SIM115 - closed in stop()
        command = [key.python, "-m", "workflows.zygote", str(self.socket_path), key.plugin]
        self.proc = subprocess.Popen(
            [*command, *key.specs, _PAD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=dict(os.environ),
            start_new_session=True,
        )

    def fork(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        memory_mb: int | None,
    ) -> WarmChild:
        self._wait_ready()
        request = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "stdout": str(stdout),
            "stderr": str(stderr),
            "memory_mb": memory_mb,
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(30.0)
            conn.connect(str(self.socket_path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = json.loads(_read_line(conn))
            conn.settimeout(None)
        except (OSError, ValueError) as exc:
            conn.close()
            self.broken = f"the zygote does not answer: {exc}"
            raise ZygoteUnavailable(self.broken) from exc
        if "pid" not in reply:
            conn.close()
            self.broken = str(reply.get("error", reply))
            raise ZygoteUnavailable(self.broken)
        return WarmChild(conn, int(reply["pid"]), self)

    def _wait_ready(self) -> None:
        with self._lock:
            if self.broken is not None:
                raise ZygoteUnavailable(self.broken)
            if self._ready:
                return
            assert self.proc.stdout is not None
            readable, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT_S)
            line = self.proc.stdout.readline() if readable else b""
            try:
                message = json.loads(line) if line else {}
            except ValueError:
                message = {}
            if message.get("ready"):
                self._ready = True
                return
            self.broken = f"the zygote did not start (see {self.folder / 'zygote.log'}): " + str(
                message.get("error") or _log_tail(self.folder / "zygote.log")
            )
            raise ZygoteUnavailable(self.broken)

    def stop(self) -> None:
        """Close its stdin (it kills its children and exits), then make sure it is gone."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class _Pool:
    """This process's zygotes by key; a forked copy of this process (a Celery pool child)
    starts its own, never sharing its parent's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zygotes: OrderedDict[ZygoteKey, Zygote] = OrderedDict()
        self._pid = os.getpid()

    def get(self, key: ZygoteKey) -> Zygote:
        with self._lock:
            if self._pid != os.getpid():
                self._zygotes = OrderedDict()
                self._pid = os.getpid()
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.broken is None:
                self._zygotes.move_to_end(key)
                return zygote
            if zygote is not None:  # a broken one is never retried: cold from now on
                raise ZygoteUnavailable(zygote.broken or "")
            while len(self._zygotes) >= MAX_ZYGOTES:
                _, old = self._zygotes.popitem(last=False)
                old.stop()
            try:
                zygote = Zygote(key)
            except OSError as exc:
                raise ZygoteUnavailable(f"cannot start the zygote: {exc}") from exc
            self._zygotes[key] = zygote
            return zygote

    def stop_all(self) -> None:
        with self._lock:
            zygotes = list(self._zygotes.values()) if self._pid == os.getpid() else []
            self._zygotes = OrderedDict()
        for zygote in zygotes:
            zygote.stop()


_POOL = _Pool()


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _code_stamp(plugin: str) -> str:
    """Sizes and mtimes of the code a zygote imports that `cache_key` does not hash."""
    import backend_under_test

    files = sorted(Path(backend_under_test.__file__).resolve().parent.rglob("*.py"))
    files.append(Path(__file__).resolve())
    with contextlib.suppress(ImportError, ValueError, AttributeError):
        spec = importlib.util.find_spec(plugin)
        if spec is not None and spec.origin:
            files.append(Path(spec.origin))
    parts = []
    for path in files:
        with contextlib.suppress(OSError):
            st = path.stat()
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    return str(hash("\n".join(parts)))


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise OSError("the zygote closed the connection")
        data += chunk
    return data.split(b"\n", 1)[0]


def _log_tail(path: Path, limit: int = 1500) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "(no log)"
    return text[-limit:] or "it exited without a word"


# --- the zygote process itself (`python -m workflows.zygote SOCKET PLUGIN [SPECS...]`) -------


def serve(socket_path: str, plugin: str, specs: Sequence[str]) -> int:
    """Warm up, say so on stdout, then fork a test process per request until stdin closes."""
    try:
        _warm_up(plugin, specs)
    except BaseException as exc:  # noqa: BLE001 - said on stdout; the runner goes cold
        traceback.print_exc()
        _say({"ready": False, "error": f"warm-up failed: {exc!r}"})
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    _say({"ready": True, "pid": os.getpid()})
    server = _Server(listener)
    try:
        server.loop()
    finally:
        server.kill_children()
    return 0


def _warm_up(plugin: str, specs: Sequence[str]) -> None:
    import pytest  # noqa: F401 - loaded once here, not in every test process
    import torch  # noqa: F401 - loads the spyre device (entry point)

    importlib.import_module("torch.testing._internal.common_methods_invocations")
    importlib.import_module("torch.testing._internal.common_modules")
    module = importlib.import_module(plugin)
    preload = getattr(module, "preload", None)
    if callable(preload):
        preload(list(specs) or None)
    # What is loaded now stays as it is: the collector never walks it again, so a child's
    # collections neither take seconds over torch's objects nor copy every page they touch.
    gc.collect()
    gc.freeze()


# `python -m` puts the directory it started in first on sys.path; a child replaces it.
_START_DIR = os.getcwd()


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class _Server:
    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.buffers: dict[socket.socket, bytes] = {}
        self.children: dict[int, socket.socket] = {}  # pid -> the connection that asked
        self.parent = os.getppid()

    def loop(self) -> None:
        stdin = sys.stdin.fileno()
        while True:
            waiting: list[Any] = [self.listener, stdin, *self.buffers]
            readable, _, _ = select.select(waiting, [], [], 0.02)
            if stdin in readable and not os.read(stdin, 4096):
                return  # the runner is gone or stopped us
            if os.getppid() != self.parent:
                return
            if self.listener in readable:
                conn, _ = self.listener.accept()
                self.buffers[conn] = b""
            for conn in [c for c in readable if isinstance(c, socket.socket)]:
                if conn is not self.listener:
                    self._receive(conn)
            self._reap()

    def _receive(self, conn: socket.socket) -> None:
        chunk = conn.recv(65536)
        if not chunk:  # the runner's side closed: a child it asked for must not run on
            self.buffers.pop(conn, None)
            for pid, owner in list(self.children.items()):
                if owner is conn:
                    _kill(pid)
            conn.close()
            return
        self.buffers[conn] += chunk
        if b"\n" not in self.buffers[conn]:
            return
        line = self.buffers.pop(conn).split(b"\n", 1)[0]
        try:
            pid = self._fork(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - the runner starts this one cold
            _send(conn, {"error": str(exc)})
            conn.close()
            return
        self.children[pid] = conn
        _send(conn, {"pid": pid})

    def _fork(self, request: dict[str, Any]) -> int:
        threads = threading.active_count()
        if threads != 1:
            # A fork copies the threads' locks, not the threads: the child could hang.
            raise RuntimeError(f"{_REFUSED}: {threads} threads run in the zygote")
        sys.stdout.flush()
        sys.stderr.flush()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            _child(request, ready_w, [self.listener, *self.buffers, *self.children.values()])
        os.close(ready_w)
        os.read(ready_r, 1)  # its own session first: the runner may killpg(pid) at once
        os.close(ready_r)
        return pid

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                conn.close()

    def kill_children(self) -> None:
        for pid in list(self.children):
            _kill(pid)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _child(request: dict[str, Any], ready: int, inherited: Sequence[socket.socket]) -> None:
    """The forked test process: become what `python -m pytest ARGV` in `cwd` would be."""
    code = 70
    try:
        os.setsid()
        os.write(ready, b"x")
        os.close(ready)
        if sys.platform == "linux":
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        for sock in inherited:
            sock.close()
        _redirect(request)
        _show_as([sys.executable, "-m", "pytest", *request["argv"]])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if sys.path and sys.path[0] == _START_DIR:
            sys.path[0] = request["cwd"]  # as `python -m pytest` in cwd has it
        memory_mb = request.get("memory_mb")
        if memory_mb is not None:
            limit = int(memory_mb) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        _fresh_state(request["env"])
        import pytest

        # The plugin was imported before pytest could mark it for rewriting: say nothing.
        code = int(
            pytest.main(["-W", "ignore::pytest.PytestAssertRewriteWarning"] + request["argv"])
        )
    except BaseException:  # noqa: BLE001 - the runner reads the reason from stderr
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _show_as(command: Sequence[str]) -> None:
    """Make `ps` show this child as the cold command it stands for: its argv memory (the
    zygote's, padded for it) gets that command line. Best effort, Linux only."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49: arg_start, arg_end
        if start <= 0 or end <= start:
            return
        text = "\0".join(command).encode()[: end - start - 1]
        ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)


def _redirect(request: dict[str, Any]) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[name], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(out, fd)
        os.close(out)


def _fresh_state(env: Mapping[str, str]) -> None:
    """What a fresh interpreter would have: thread counts, random seeds, signal handlers."""
    import random

    import torch

    for name in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(name, signal.SIG_DFL)
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    torch.default_generator.manual_seed(torch.initial_seed())  # the default, whatever was drawn
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        sys.stderr.write("usage: python -m workflows.zygote SOCKET PLUGIN [SPECS...]\n")
        return 2
    args = [a for a in args if not a.startswith("--pad=")]
    return serve(args[0], args[1], args[2:])


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # no interpreter teardown of torch and its databases: seconds here
