"""The zygote process of the warm runner (`workflows/runner/zygote.py` is the runner's side).

    python -m workflows.runner.zygote_process SOCKET PLUGIN [SPECS...] [--idle=SECONDS]

It loads the plugin, torch and the test databases (the plugin first, as a cold `pytest -p
PLUGIN` does, then its `preload(specs)` expands the suites), freezes its heap, says
`{"ready": true}` on stdout, then forks one test process per request on the Unix socket until
its stdin closes. Each child becomes what the cold command `python -m pytest ARGV` in the
request's folder would be, and the zygote, its parent, reports its exit status on the
connection that asked for it.

`--idle=SECONDS` makes it a shared zygote (`workflows.runner.zygote`: one per environment,
kept for every `spyre-ci` process of a state directory): no lifeline on stdin, a `ready.json`
beside its socket for the processes that attach to it (its pid, its keeper's, its loaded
files), and it ends, removing its folder, once it has had no connection and no child for that
long.

What it imports may be a run's changed torch, untrusted code, which gets what it would get in
a cold test process: a keeper for a parent (`workflows.runner.keeper`: the process started
is the keeper, the zygote its child), stdin at /dev/null and stdout into the log (the
protocol's two pipes are moved to private descriptors first, so a `print()` or a read at
import never touches them), its imports watched (`workflows.runner.change_imports`), and
what it does to the environment kept for every child (`_IMPORTED_ENV`: a cold process
imports the same code in its own environment).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import json
import os
import resource
import shutil
import signal
import socket
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workflows.runner import keeper, warm_imports
from workflows.runner.fork_server import Server, close_all, leave_parent, show_as

# What the warm-up did to the environment (set, removed): each child's environment is its
# request's with this on top, as a cold process's is after it imported the same code.
_IMPORTED_ENV: tuple[dict[str, str], tuple[str, ...]] = ({}, ())
# The protocol's pipes, moved off stdin and stdout before anything is imported (`_private`).
_CHANNEL = {"say": 1, "lifeline": 0}


def serve(socket_path: str, plugin: str, specs: Sequence[str], idle_s: float | None = None) -> int:
    """Warm up, say so on stdout, then fork a test process per request until stdin closes
    (or, shared, `idle_s` seconds pass with no connection and no child)."""
    global _IMPORTED_ENV
    _private()
    before = dict(os.environ)
    try:
        _warm_up(plugin, specs)
    except BaseException as exc:  # noqa: BLE001 - said on stdout; the runner goes cold
        traceback.print_exc()
        _say({"ready": False, "error": f"warm-up failed: {exc!r}"})
        return 1
    after = dict(os.environ)
    _IMPORTED_ENV = (
        {k: v for k, v in after.items() if before.get(k) != v},
        tuple(k for k in before if k not in after),
    )
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    lifeline = _CHANNEL["lifeline"] if idle_s is None else None
    server = Server(listener, _child, idle_s, lifeline=lifeline)
    try:
        ready = {"ready": True, "pid": os.getpid(), "files": loaded_files()}
        if idle_s is not None:
            publish(Path(socket_path).parent, {**ready, "keeper": os.getppid()})
            # The process that started it may never read this line (a worker's plan task
            # warms the zygotes other processes fork from): the files, hundreds of KB, would
            # fill the pipe and block the zygote before it serves anyone. They are in
            # ready.json; the line says only that it is ready, and fits in the pipe.
            ready = {"ready": True, "pid": ready["pid"]}
        try:
            _say(ready)
        except OSError:  # the runner is gone, its end of the pipe with it
            if idle_s is None:
                return 1
        server.loop()
    finally:
        server.kill_children()
        # The runner removes the folder when it stops us; when it died, nobody else will.
        shutil.rmtree(Path(socket_path).parent, ignore_errors=True)
    return 0


READY_FILE = "ready.json"  # a shared zygote's: what a process attaching to it reads


def publish(folder: Path, ready: dict[str, Any]) -> None:
    """Write `ready.json` whole (a reader never sees half of it)."""
    part = folder / (READY_FILE + ".part")
    part.write_text(json.dumps(ready))
    os.replace(part, folder / READY_FILE)


def _private() -> None:
    """Move the protocol's pipes to descriptors nothing else writes to or reads from: stdout
    goes to stderr (the zygote's log), stdin to /dev/null, as a cold test process's."""
    _CHANNEL["say"] = os.dup(1)
    _CHANNEL["lifeline"] = os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _warm_up(plugin: str, specs: Sequence[str]) -> None:
    import pytest  # noqa: F401 - loaded once here, not in every test process

    # The plugin before torch, as `pytest -p PLUGIN` loads it in a cold process: what it
    # reads when imported is read before a changed torch module runs, as there.
    module = importlib.import_module(plugin)
    # A child has the zygote's environment (it is in the zygote's key).
    warm_imports.pytest_plugins(autoload=not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"))
    import torch  # noqa: F401 - loads the spyre device (entry point)

    importlib.import_module("torch.testing._internal.common_methods_invocations")
    importlib.import_module("torch.testing._internal.common_modules")
    preload = getattr(module, "preload", None)
    if callable(preload):
        preload(list(specs) or None)
    # torch.compile's own modules only for suites that may compile (a plugin that cannot
    # say: they may): 0.8 s of CPU of each warm-up here, unused by the forks of eager suites.
    compiles = getattr(module, "compiles", None)
    if not callable(compiles) or compiles(list(specs) or None):
        warm_imports.compile_stack()
    # What is loaded now stays as it is: the collector never walks it again, so a child's
    # collections neither take seconds over torch's objects nor copy every page they touch.
    gc.collect()
    gc.freeze()


def loaded_files() -> list[tuple[str, str, str]]:
    """(path, stat stamp, content digest) of every module file loaded at warm-up outside the
    standard library: the runner restarts the zygote when one of them changes on disk (an
    upstream helper, a test file, the project's own code), so a fork never runs stale code.
    The digest decides (`file_stamp`: the stamp only says when to compute it again)."""
    import sysconfig

    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
    paths = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and not os.path.realpath(path).startswith(stdlib):
            paths.add(path)
    found = []
    for path in sorted(paths):
        stamp = file_stamp(path)
        digest = file_digest(path)
        if stamp and digest:
            found.append((path, stamp, digest))
    return found


def file_stamp(path: str) -> str:
    """What changes whenever a file's content may have: its inode, size, mtime and ctime (a
    write, or an mtime set back by hand, moves the ctime); "" when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def file_digest(path: str) -> str:
    """The SHA-256 of a file's content ("" when it cannot be read)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return ""
    return digest.hexdigest()


# `python -m` puts the directory it started in first on sys.path; a child replaces it.
_START_DIR = os.getcwd()


def _say(message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(_CHANNEL["say"], data) :]


def _child(
    request: dict[str, Any], ready: int, inherited: Sequence[socket.socket], fds: list[int]
) -> None:
    """The forked test process: become what `python -m pytest ARGV` in `cwd` would be."""
    code = 70
    try:
        leave_parent(ready, inherited)
        close_all(fds)  # a test process's request passes none
        for fd in _CHANNEL.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        _redirect(request)
        show_as([sys.executable, "-m", "pytest", *request["argv"]])
        # A keeper between the zygote and the test process: a test that kills its parent
        # kills the keeper (the runner records that test crashed), never the zygote and the
        # tests of every other shard with it. It caps what the test writes, as a cold one's.
        keeper.fork_kept(int(request.get("output_bytes") or keeper.DEFAULT_OUTPUT_BYTES))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        changed, removed = _IMPORTED_ENV
        os.environ.update(changed)
        for name in removed:
            os.environ.pop(name, None)
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
        sys.stderr.write(
            "usage: python -m workflows.runner.zygote_process SOCKET PLUGIN [SPECS...] "
            "[--idle=SECONDS]\n"
        )
        return 2
    idle = [float(a.split("=", 1)[1]) for a in args if a.startswith("--idle=")]
    args = [a for a in args if not a.startswith(("--pad=", "--idle="))]
    # The process the runner started stays as the zygote's keeper: what the zygote imports
    # may kill its parent, and that must not be the runner.
    keeper_pid = os.getpid()
    zygote = os.fork()
    if zygote:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)  # the runner sees the zygote's stdout end when the zygote ends
        os.close(null)
        keeper.end_as(os.waitpid(zygote, 0)[1])
    keeper.die_with_parent()
    if os.getppid() != keeper_pid:
        return 70
    return serve(args[0], args[1], args[2:], idle[-1] if idle else None)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # no interpreter teardown of torch and its databases: seconds here
