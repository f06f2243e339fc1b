"""The warm runner: a zygote process that has torch, the test databases and the suites loaded,
and forks a fresh test process per shard attempt.

Long on purpose: it is the runner's side of one protocol (when a zygote may serve a shard,
its key, its pool of live zygotes, starting, forking through it, noticing it died or went
stale) whose parts share the zygote's state; the zygote's own side is `zygote_process`.

A cold shard process pays about 11 s here (torch, the OpInfo and ModuleInfo databases, the
suites' expansion) before its first test. The zygote pays that once per worker; each test
process is then a `fork()` of it that runs `pytest.main([...])` with the very arguments,
files and environment of the cold `python -m pytest ...` command, in its own session, under
the memory limit and with a death signal tied to the zygote. The shard runner waits on it and
kills its process group by pid as it does a cold one, so crash, hang and memory isolation
are unchanged (`workflows/runner/shard_runner.py`).

When it is used (`key_for`): `SPYRE_CI_ZYGOTE` is not `0`, the shard runs on this
interpreter or another venv's (a build's, an upgrade run's version: a zygote of its own), and
the shard's environment adds nothing that can change imports but the run's applied change (a
benchmark's mutation, another `PYTHONPATH`: those shards start cold, never in
an unmutated zygote). A run's change gets a zygote of its own, started with the change
applied (`workflows.runner.change_overlay`): one zygote per change, never shared across changes. A
zygote is keyed by the interpreter, the plugin, the specs and their Inventory cache key
(torch version, spec and expectations files, `suites/` code), a stamp of the backend's code
and the environment: when any of them changes, a new zygote is built. A zygote that cannot
start, died, or refuses to fork (a thread runs in it: a fork would copy its locks, not the
thread) is dropped; its shards start cold, and that is logged once.

A run's changed torch is untrusted code, and the zygote imports it as a cold test process
would: under a keeper (`workflows.runner.keeper`: a module that kills its parent kills the
keeper, never the runner), with its imports watched (`workflows.runner.change_imports`) and
bounded by the per-test timeout. When that import hangs, kills its process or raises, the
zygote's failure is the change's (`ChangeFailed`, for every fork it was asked for): the shard
runner reports it as a cold process would, never going cold to wait for the same thing again.

The zygote (`workflows/runner/zygote_process.py`) speaks one JSON line each way per connection on
a Unix socket in a private folder: `{"argv", "cwd", "env", "stdout", "stderr", "memory_mb"}`
-> `{"pid"}` (or `{"error"}`), then `{"exit": returncode}` when the child ends (the zygote
is its parent's keeper, which reaps it). It ends when its stdin closes (the runner exited),
killing its children's groups.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from workflows.runner import change_imports, warm_share
from workflows.runner.keeper import DEFAULT_OUTPUT_BYTES, status_text
from workflows.settings import Settings, child_environment

log = logging.getLogger(__name__)

# Variables a test process reads at run time, if at all, never while the zygote imports:
# the child gets their values (its whole environment is the shard's), the key ignores them.
# The thread counts are applied in the child (`torch.set_num_threads`).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
RUNTIME_VARS = (
    *THREAD_VARS,
    "PYTEST_CURRENT_TEST",
    # pytest-xdist's name for the worker process that started `spyre-ci` (a test suite's):
    # read by xdist in its workers only, never at import.
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_XDIST_TESTRUNUID",
    change_imports.IMPORTS_VAR,  # each process's own log of the change's imports
    "PWD",
    "OLDPWD",
    # Set by torch's inductor when it is first imported (in a `spyre-ci` process that
    # expanded suites, say): where it caches, read when it compiles.
    "TORCHINDUCTOR_CACHE_DIR",
    "_",
    # workflows.settings: read by the workflows layer, not by anything a test imports.
    "SPYRE_CI_STATE_DIR",
    "SPYRE_CI_REDIS_URL",
    "SPYRE_CI_IMPACT_MAP",
    "SPYRE_CI_INVENTORY",
    "SPYRE_CI_MASS_FAILURE_SHARE",
    "SPYRE_CI_ENV_CACHE",
    "SPYRE_CI_CACHE_DIR",
    "SPYRE_CI_CALLBACK_TOKEN",
    "SPYRE_CI_LEASE_TTL",
    "SPYRE_CI_TRACE",
    "SPYRE_CI_TRACE_SHARE",
    "SPYRE_CI_ZYGOTE",
    "SPYRE_CI_WARM_IDLE_S",
    "SPYRE_CI_WARM_MAX",
    "SPYRE_CI_WARM_DIR",
    "SPYRE_CI_WARM_CLI",
    "SPYRE_CI_TORCH_BUILDS",
    "SPYRE_CI_GITHUB_URL",
    "SPYRE_CI_GITHUB_TOKEN",
    "SPYRE_CI_BUILD_INDEX",
    "SPYRE_CI_ENV_CACHE_MAX_GB",
)
TRACER = "workflows.runner.impact_tracer"
PROCESS = "workflows.runner.zygote_process"  # the zygote's own side
# Room in the zygote's argv for a child's command line (`fork_server.show_as`).
_PAD = "--pad=" + "." * 8192
MEMORY_HEADROOM_MB = 256  # what a test needs beyond the zygote's own mapping, at least
MAX_ZYGOTES = 2  # alive at once per process (distinct specs, say); the least recent goes
READY_TIMEOUT_S = 300.0


class ZygoteUnavailable(Exception):
    """The zygote cannot fork this test process: start it cold (the message says why)."""


class ChangeFailed(ZygoteUnavailable):
    """The run's change failed in the zygote's import of it (`change_imports.blame`): every
    test process of that change would fail the same way, cold or warm. `why` says how."""

    def __init__(self, why: str, log: Path) -> None:
        super().__init__(why)
        self.why = why
        self.log = log  # the zygote's log (what the import wrote), for the cause


@dataclass(frozen=True)
class ZygoteKey:
    """What a zygote loaded: a test process may fork from it only when all of it is the same."""

    python: str
    plugin: str
    specs: tuple[str, ...]
    inventory: str  # workflows.stores.inventory_cache.cache_key: torch version, specs, suites/ code
    code: str  # the backend's and the plugin's code (content digest)
    env: tuple[tuple[str, str], ...]  # the environment, less RUNTIME_VARS


def import_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of an environment that can change what a process imports.

    A run's trace of chosen ids (`workflows.tracing.trace_store.tracing_env`: the tracer on
    `PYTEST_PLUGINS`, its files) is loaded by `pytest.main` in the child and records test
    calls only, so it is run time too. A trace with the session (`spyre-ci impact-map`,
    no ids file) records imports and collection, which a zygote did before the fork: it is
    not, and starts cold.
    """
    from workflows.runner.trace_vars import IDS_VAR, MODE_VAR, OUT_VAR

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


def without_change(
    env: tuple[tuple[str, str], ...], tests_edited: bool | None = None
) -> tuple[tuple[str, str], ...]:
    """`env` less what applies a run's change (`workflows.runner.change_overlay`): the change's
    activation file, the overlay's entry on PYTHONPATH and, when the change edits upstream
    tests (`tests_edited`, default: `env` names edited tests), TORCH_ROOT (the change's mirror
    of the checkout) and the edited files' names. Two environments that differ only there
    may each have a zygote, one per change (the key keeps the whole environment)."""
    from suites.loader import EDITED_TESTS_VAR
    from workflows.runner.change_overlay.prepare import CHANGE_VAR, SITE_DIR, TREE_VAR

    if tests_edited is None:
        tests_edited = any(name == EDITED_TESTS_VAR for name, _ in env)
    dropped = {CHANGE_VAR, EDITED_TESTS_VAR} | ({TREE_VAR} if tests_edited else set())
    kept = []
    for name, value in env:
        if name in dropped:
            continue
        if name == "PYTHONPATH":
            value = os.pathsep.join(p for p in value.split(os.pathsep) if p != str(SITE_DIR))
            if not value:
                continue
        kept.append((name, value))
    return tuple(kept)


def key_for(
    python: str, plugin: str, specs: Sequence[str], env: Mapping[str, str]
) -> ZygoteKey | None:
    """The zygote a test process with this interpreter, plugin, specs and full environment
    may fork from; None when it must start cold (an interpreter outside any venv, an
    environment that differs from this process's in what it imports, no `fork` here).

    Another venv's interpreter (a build of the source, `workflows.runner.build_envs`; an
    upgrade run's version) has the project installed beside its own torch: it gets a
    zygote of its own, started with that interpreter and keyed by its path, never this
    environment's."""
    if sys.platform != "linux":
        return None
    if _same_file(python, sys.executable):
        python = sys.executable
    elif _environment(python):
        python = os.path.abspath(python)
    else:
        return None
    python = _one_name(python)
    wanted = import_env(env)
    # A change's edited upstream tests come with its mirror of TORCH_ROOT for TORCH_ROOT.
    from suites.loader import EDITED_TESTS_VAR

    edits = EDITED_TESTS_VAR in env
    if without_change(wanted, edits) != without_change(import_env(child_environment()), edits):
        return None  # a mutation overlay, another PYTHONPATH, ...: never the plain zygote
    from workflows.stores.inventory_cache import cache_key

    return ZygoteKey(
        python,
        plugin,
        tuple(specs),
        cache_key(specs, env),
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
    import_limit_s: float | None = None,
    output_bytes: int = DEFAULT_OUTPUT_BYTES,
) -> WarmChild:
    """A test process forked from the zygote of `key` (started now when there is none):
    `pytest.main(argv)` in `cwd` with exactly `env`, stdout and stderr appended to the files
    (at most `output_bytes` of each, `workflows.runner.keeper.Capped`). `import_limit_s`:
    how long an import of a run's changed module may take in the zygote (a test's timeout);
    `ChangeFailed` when it takes longer, or fails."""
    if not fits_warm(memory_mb):
        raise ZygoteUnavailable(
            f"the memory limit ({memory_mb} MB) leaves no room for a warm test process "
            f"({MEMORY_HEADROOM_MB} MB to spare beyond what the zygote maps)"
        )
    zygote = _POOL.get(key, _place())
    return zygote.fork(argv, cwd, env, stdout, stderr, memory_mb, import_limit_s, output_bytes)


def fits_warm(memory_mb: int | None) -> bool:
    """Whether a test process under this memory limit can be forked warm at all: a fork
    starts with everything its zygote maps, and needs MEMORY_HEADROOM_MB beyond it. Below
    that no zygote is worth warming (`fork` says so for the zygote it has, by its mapping)."""
    return memory_mb is None or memory_mb > MEMORY_HEADROOM_MB


def prestart(
    plugin: str,
    specs: Sequence[str],
    env: Mapping[str, str] | None = None,
    python: str | None = None,
    memory_mb: int | None = None,
) -> None:
    """Start warming the zygote the shards of this process will use (returns at once);
    `env`: what the shards add to this process's environment (a run's change); `python`:
    their interpreter (default: this one); nothing when `memory_mb` leaves no room for a warm
    test process (`fits_warm`)."""
    if not fits_warm(memory_mb):
        return
    environment = child_environment(env)
    key = key_for(python or sys.executable, plugin, specs, environment)
    if key is not None:
        with contextlib.suppress(ZygoteUnavailable):
            _POOL.get(key, _place())


def share(settings: Settings) -> None:
    """Share this process's zygotes as `settings` say (`warm_share`: per state directory,
    `SPYRE_CI_WARM_IDLE_S`, `SPYRE_CI_WARM_DIR`); called by the entry points that read the
    settings (`spyre-ci`, a Celery worker). A process that never calls it keeps zygotes of
    its own, which end with it."""
    _SHARING[:] = [settings]


_SHARING: list[Settings] = []


def _place() -> warm_share.Place | None:
    """Where this process's shared zygotes live; None: it keeps its own."""
    if not _SHARING:
        return None
    try:
        return warm_share.place(_SHARING[0])
    except warm_share.NotShared as exc:
        log_once(f"the warm zygote is not shared: {exc}")
        return None


def stop_all() -> None:
    """Stop every zygote of this process (they also end on their own when it exits); a
    shared one is left to the other processes that use it, and ends when idle."""
    _POOL.stop_all()


def stop_changed() -> None:
    """Stop the zygotes of runs' changes, keeping those of the installed torch: a change's
    zygote serves no other run of this process, the unchanged one serves the next run of
    this process (a worker, an in-process caller) without its half-minute start. A shared
    one stays for another process's run of the same change, and ends when idle."""
    _POOL.stop_where(lambda key: without_change(key.env) != key.env)


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
        self.zygote_died = False

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def exited_within(self, seconds: float) -> bool:
        """Whether it exited within `seconds` (back as soon as the zygote says it did)."""
        deadline = time.monotonic() + seconds
        while self.returncode is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._read(left)
        return True

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
        # Its children die with it (their death signal): this one was killed, by no fault of
        # its test (`zygote_died`: the shard runner runs that test again).
        self.zygote_died = True
        self.returncode = -int(signal.SIGKILL)
        self._conn.close()
        self._zygote.broken = why


class Zygote:
    """One zygote process (runner side): started at once, ready when its first line says so."""

    _log: BinaryIO | None  # its log, opened by the process that started it

    def __init__(
        self, key: ZygoteKey, shared: Path | None = None, idle_s: float | None = None
    ) -> None:
        """Start one: this process's own, or (`shared`, its folder, made and locked by the
        caller) one for every process of the state directory, that ends after `idle_s`
        seconds with nothing to do (`workflows.runner.warm_share`)."""
        self.key = key
        self.shared = shared is not None
        if shared is not None:
            self.folder = shared
        else:
            self.folder = Path(tempfile.mkdtemp(prefix="spyre-zygote-"))
            if len(str(self.folder / "socket")) > warm_share.SOCKET_PATH_MAX:  # a long $TMPDIR
                self.folder.rmdir()
                self.folder = Path(tempfile.mkdtemp(prefix="spyre-zygote-", dir="/tmp"))
        self._state(self.folder)
        self._log = open(self.folder / "zygote.log", "wb")  # noqa: SIM115 - closed in stop()
        command = [key.python, "-m", PROCESS, str(self.socket_path), key.plugin]
        if idle_s is not None:
            command.append(f"--idle={idle_s:g}")
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [*command, *key.specs, _PAD],
            # Shared: no lifeline, it outlives this process (it ends when idle).
            stdin=subprocess.DEVNULL if self.shared else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            # The key's environment: a run's change is applied at the zygote's start, so the
            # torch it loads, and every test process it forks, is the changed one.
            env=child_environment({**dict(key.env), change_imports.IMPORTS_VAR: str(self.imports)}),
            # Started in its private folder: `python -m` puts the folder it starts in first on
            # sys.path, and the runner's own folder (a checkout, say) must not shadow the
            # installed code a cold test process imports.
            cwd=self.folder,
            start_new_session=True,
        )
        self.keeper = self.proc.pid
        if shared is not None:
            warm_share.mark_starting(shared, self.proc.pid)

    @classmethod
    def attach(cls, key: ZygoteKey, folder: Path, ready: Mapping[str, object] | None) -> Zygote:
        """The shared zygote in `folder` that another process started: ready (`ready`, its
        `ready.json`), or still warming up (None: the first fork waits for it)."""
        zygote = cls.__new__(cls)
        zygote.key = key
        zygote.shared = True
        zygote._state(folder)
        zygote.proc = None
        zygote.keeper = warm_share.starting(folder) or 0
        if ready is not None:
            zygote._attached(ready)
        warm_share.touch(folder)
        return zygote

    def _state(self, folder: Path) -> None:
        """What a zygote's runner side knows before it is ready, started here or attached."""
        self.folder = folder
        self.socket_path = folder / "socket"
        self.imports = folder / "imports"  # its log of the change's imports
        self.broken: str | None = None
        self.change: str | None = None  # set when the change failed in its import
        self.pid: int | None = None  # the zygote's own (`proc` is its keeper), once ready
        self._ready = False
        self._files: list[list[str]] = []  # [path, stat stamp, digest]
        self._lock = threading.Lock()
        self._log = None
        self.started = time.monotonic()

    def _attached(self, ready: Mapping[str, object]) -> None:
        self._ready = True
        self.pid = int(str(ready.get("pid") or 0))
        self.keeper = int(str(ready.get("keeper") or 0)) or self.keeper
        files = ready.get("files")
        if isinstance(files, list):
            self._files = [[str(f) for f in entry] for entry in files]

    def alive(self) -> bool:
        """Whether it can still fork (a shared one may have ended idle, or been stopped)."""
        if self.proc is not None and self.proc.poll() is not None:
            return False
        if self.shared and self._ready:
            return self.pid is not None and warm_share.alive(self.pid)
        return True

    def fork(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        memory_mb: int | None,
        import_limit_s: float | None = None,
        output_bytes: int = DEFAULT_OUTPUT_BYTES,
    ) -> WarmChild:
        self._wait_ready(import_limit_s)
        if self.shared:
            warm_share.touch(self.folder)
        mapped = _mapped_mb(self.pid or self.keeper)
        if memory_mb is not None and mapped is not None and mapped + MEMORY_HEADROOM_MB > memory_mb:
            # The limit holds for the whole test process, and a fork starts with everything
            # the zygote maps: below that, tests would fail wherever an allocation lands.
            raise ZygoteUnavailable(
                f"the memory limit ({memory_mb} MB) is below what a warm test process starts "
                f"with ({mapped} MB mapped by the zygote, {MEMORY_HEADROOM_MB} MB to spare)"
            )
        request = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "stdout": str(stdout),
            "stderr": str(stderr),
            "memory_mb": memory_mb,
            "output_bytes": output_bytes,
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

    def unavailable(self) -> ZygoteUnavailable:
        """What a fork of a broken zygote raises: the change's failure, or why it is gone."""
        if self.change is not None:
            return ChangeFailed(self.change, self.folder / "zygote.log")
        return ZygoteUnavailable(self.broken or "")

    def _wait_ready(self, import_limit_s: float | None = None) -> None:
        with self._lock:
            if self.broken is not None:
                raise self.unavailable()
            if self._ready:
                return
            if self.proc is None:  # another process is starting this shared zygote
                self._await_other()
                return
            line = self._ready_line(import_limit_s)
            try:
                message = json.loads(line) if line else {}
            except ValueError:
                message = {}
            if message.get("ready"):
                self._ready = True
                self.pid = int(message.get("pid") or self.proc.pid)
                files = message.get("files")
                if files is None and self.shared:  # said in its ready.json only
                    files = (warm_share.ready(self.folder) or {}).get("files")
                self._files = [[str(f) for f in entry] for entry in files or ()]
                return
            imports = change_imports.read(self.imports)
            log = self.folder / "zygote.log"
            if import_limit_s is not None and change_imports.overdue(imports, import_limit_s):
                self._kill()
                self.change = change_imports.hung(imports, import_limit_s)
            else:
                try:
                    self.proc.wait(timeout=10)  # it ended: how (its keeper may take a moment)
                except subprocess.TimeoutExpired:
                    self._kill()  # it did not: killed before it is reaped (`stop`)
                self.change = change_imports.blame(
                    imports, self.proc.returncode, _log_tail(log, ended=self.proc.returncode)
                )
            self.broken = self.change or (
                f"the zygote did not start (see {log}): "
                + str(message.get("error") or _log_tail(log, ended=self.proc.returncode))
            )
            if self.shared:  # nobody else may attach to what did not start
                warm_share.stop(self.folder)
            raise self.unavailable()

    def _await_other(self) -> None:
        """Wait for the shared zygote another process is starting: ready, or gone (its
        starter failed or stopped: this process's shards start cold, as that one's would)."""
        while True:
            ready = warm_share.ready(self.folder)
            if ready is not None:
                self._attached(ready)
                return
            if warm_share.starting(self.folder) is None:
                self.broken = "the shared zygote another process started did not come up"
                raise self.unavailable()
            if time.monotonic() - self.started > READY_TIMEOUT_S:
                self.broken = f"the shared zygote was not ready within {READY_TIMEOUT_S:g} s"
                raise self.unavailable()
            time.sleep(0.1)

    def _ready_line(self, import_limit_s: float | None) -> bytes:
        """Its first line; b"" when it ended first, an import of the change took longer than
        `import_limit_s` (a hang, as a cold process would be killed for), or its warm-up
        took longer than READY_TIMEOUT_S outside such an import."""
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            readable, _, _ = select.select([self.proc.stdout], [], [], 0.25)
            if readable:
                return self.proc.stdout.readline()
            if import_limit_s is None:
                if time.monotonic() - self.started > READY_TIMEOUT_S:
                    return b""
                continue
            imports = change_imports.read(self.imports)
            if change_imports.overdue(imports, import_limit_s):
                return b""
            if time.monotonic() - self.started > READY_TIMEOUT_S and not imports.open:
                return b""

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.keeper > 0:
                os.killpg(self.keeper, signal.SIGKILL)

    def stale(self) -> str | None:
        """A module file it loaded at warm-up whose content changed on disk since (None: none
        did, or it is not ready yet): its forks would run the old code
        (`warm_share.changed_file`)."""
        return warm_share.changed_file(getattr(self, "_files", []))

    def stop(self) -> None:
        """Close its stdin (it kills its children and exits), then make sure it is gone. A
        shared one is only let go: other processes use it, and it ends when idle."""
        if self.shared:
            if self.proc is not None and self.proc.stdout is not None:
                self.proc.stdout.close()
            if self._log is not None:
                self._log.close()
            return
        assert self.proc is not None
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._log is not None:
            self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def end(self) -> None:
        """Stop it for good, shared or not (its loaded code changed on disk)."""
        if self.shared:
            self.stop()
            warm_share.stop(self.folder)
        else:
            self.stop()


class _Pool:
    """This process's zygotes by key; a forked copy of this process (a Celery pool child)
    starts its own, never sharing its parent's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zygotes: OrderedDict[ZygoteKey, Zygote] = OrderedDict()
        self._pid = os.getpid()
        self._exit_hook = False

    def get(self, key: ZygoteKey, place: warm_share.Place | None = None) -> Zygote:
        """The zygote of `key`: this process's, else (`place`) the shared one, attached to
        or started; else a new one of this process's own."""
        with self._lock:
            if self._pid != os.getpid():
                self._zygotes = OrderedDict()
                self._pid = os.getpid()
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.broken is None and not zygote.alive():
                del self._zygotes[key]  # a shared one that ended idle, or was stopped
                zygote.stop()
                zygote = None
            changed = zygote.stale() if zygote is not None and zygote.broken is None else None
            if changed is not None and zygote is not None:
                log_once(f"a file the warm zygote loaded changed ({changed}): it is restarted")
                del self._zygotes[key]
                zygote.end()
                zygote = None
            if zygote is not None and zygote.broken is None:
                self._zygotes.move_to_end(key)
                return zygote
            if zygote is not None:  # a broken one is never retried: cold from now on
                raise zygote.unavailable()
            while len(self._zygotes) >= MAX_ZYGOTES:
                _, old = self._zygotes.popitem(last=False)
                old.stop()
            try:
                zygote = _shared(key, place) if place is not None else Zygote(key)
            except OSError as exc:
                raise ZygoteUnavailable(f"cannot start the zygote: {exc}") from exc
            if not self._zygotes and not self._exit_hook:
                atexit.register(self.stop_all)  # its folder too, not only the process
                self._exit_hook = True
            self._zygotes[key] = zygote
            return zygote

    def stop_all(self) -> None:
        self.stop_where(lambda key: True)

    def stop_where(self, which: Callable[[ZygoteKey], bool]) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._zygotes = OrderedDict()
                return
            going = [key for key in self._zygotes if which(key)]
            zygotes = [self._zygotes.pop(key) for key in going]
        for zygote in zygotes:
            zygote.stop()


_POOL = _Pool()


def _shared(key: ZygoteKey, place: warm_share.Place) -> Zygote:
    """The shared zygote of `key`: attached to when one is ready or warming up (restarted
    when code it loaded changed on disk), else started here for every process of the place."""
    folder = place.folder(key)
    with warm_share.locked(folder):
        ready = warm_share.ready(folder)
        if ready is not None:
            zygote = Zygote.attach(key, folder, ready)
            changed = zygote.stale()
            if changed is None:
                return zygote
            log_once(f"a file the warm zygote loaded changed ({changed}): it is restarted")
            warm_share.stop(folder)
        elif warm_share.starting(folder) is not None:
            return Zygote.attach(key, folder, None)
        warm_share.stop(folder)  # what a zygote that ended left, if anything
        warm_share.make_room(place.root, place.max_shared)
        folder.mkdir(mode=0o700)
        from workflows.runner.change_overlay.prepare import CHANGE_VAR

        change = dict(key.env).get(CHANGE_VAR, "")
        warm_share.describe(
            folder, {"python": key.python, "specs": list(key.specs), "change": change}
        )
        return Zygote(key, shared=folder, idle_s=place.idle_s)


def _same_file(a: str, b: str) -> bool:
    """Whether `a` and `b` are the same Python *environment*, not only the same binary: a
    venv's `bin/python` is a symlink to its base interpreter, and what it imports comes from
    the `pyvenv.cfg` beside it (an upgrade run's torch 2.14.1 venv and this 2.13.0 one share
    the binary, not their packages)."""
    try:
        if not os.path.samefile(a, b):
            return False
    except OSError:
        return False
    return _environment(a) == _environment(b)


def _one_name(python: str) -> str:
    """One name for one venv's interpreter: its `bin/python`, `bin/python3` and
    `bin/python3.11` are one file in one environment, and `spyre-ci` (its script runs
    `python3`), `python -m workflows` and a worker must fork from one zygote, not start one
    each (a zygote's warm-up took about 11 s of CPU on a slow 2-core machine: 25 starts, 276 s
    of one test run's CPU)."""
    folder = os.path.dirname(python)
    for name in ("python", "python3"):
        candidate = os.path.join(folder, name)
        if candidate == python or _same_file(candidate, python):
            return candidate
    return python


def _environment(python: str) -> str:
    """The venv folder an interpreter path belongs to (by the path, symlinks kept), or ""
    for an interpreter outside any venv."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    return root if os.path.isfile(os.path.join(root, "pyvenv.cfg")) else ""


def _code_stamp(plugin: str) -> str:
    """A digest of the content of the code a zygote imports that `cache_key` does not hash
    (an edit that keeps a file's size and mtime is still an edit)."""
    # Found, not imported: importing the backend would import torch into this process.
    spec = importlib.util.find_spec("backend_under_test")
    origin = spec.origin if spec is not None and spec.origin else None
    files = sorted(Path(origin).resolve().parent.rglob("*.py")) if origin else []
    files.append(Path(__file__).resolve())
    files.append(Path(__file__).resolve().with_name("zygote_process.py"))
    files.append(Path(__file__).resolve().with_name("fork_server.py"))  # its server loop
    with contextlib.suppress(ImportError, ValueError, AttributeError):
        spec = importlib.util.find_spec(plugin)
        if spec is not None and spec.origin:
            files.append(Path(spec.origin))
    digest = hashlib.sha256()
    for path in files:
        with contextlib.suppress(OSError):
            digest.update(f"{path}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _mapped_mb(pid: int) -> int | None:
    """The address space process `pid` maps, in MB (VmSize), or None when unknown."""
    return warm_share.status_mb(pid, "VmSize")


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise OSError("the zygote closed the connection")
        data += chunk
    return data.split(b"\n", 1)[0]


def _log_tail(path: Path, limit: int = 1500, ended: int | None = None) -> str:
    """The end of the zygote's log; when it is empty, how the zygote ended (`ended`: its
    keeper's exit status, None while it runs)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    if text:
        return text[-limit:]
    return f"it {status_text(ended)} with nothing in its log" if ended is not None else "no log"
