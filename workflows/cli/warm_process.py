"""The warm `spyre-ci` process (`workflows.cli.warm_cli` is the asking side and starts it).

    python -m workflows.cli.warm_process FOLDER

It takes its `sys.path` from FOLDER/start.json (the starting process's, part of its key),
imports the command line and the pipeline a run uses, loads the kept trace and Inventory
ahead (`workflows.stores.kept.load_ahead`), freezes its heap, writes `ready.json` (its pid
and the files it loaded, as a shared zygote's) and forks one `spyre-ci` process per request
on FOLDER/socket (`workflows.runner.fork_server.Server`: exit statuses reported on the
connection that asked, a fork killed when its connection closes first).

Before each fork, and twice a second while idle, it looks again: a module file it loaded
that changed on disk makes it step aside (no `ready.json`, no socket: the next run runs in
its own process and starts a new warm process) and end once its running forks have; a kept
file made since is loaded; the modules the last runs imported (`FOLDER.imports` beside it,
written by each `run` at its end: `warm_cli.record_imports`) are imported, so the next fork
does not. It imports nothing of torch (the command line never does), and ends, removing
FOLDER, once idle for `$SPYRE_CI_WARM_IDLE_S` seconds.

A fork becomes the process that asked: its stdin, stdout and stderr (passed with the
request), directory, environment (with what the warm-up set on top, as the same imports
would have set it), umask and argv; Python's standard streams made again over them as the
interpreter makes them at start, the default signal handlers, then `main()` and the exit
steps of `workflows.cli.main.entry`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import os
import shutil
import signal
import socket
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli import warm_cli
from workflows.run import run_folder
from workflows.runner import warm_share
from workflows.runner.fork_server import Server, leave_parent, show_as
from workflows.runner.zygote_process import loaded_files, publish

# What every run imports beyond the command line (the rest is learned from the forks).
_RUN_MODULES = ("workflows.drivers.embedded", "workflows.run.finishing")


class _Warm:
    """The warm process's state: its folder, what it loaded, what its forks taught it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.imports = warm_cli.imports_file(folder)
        self.failed: set[str] = set()  # learned names that did not import here
        self.imports_seen: tuple[int, int] | None = None
        self.files: list[list[str]] = []
        self.cache_dir: Path | None = None
        self.imported_env: tuple[dict[str, str], tuple[str, ...]] = ({}, ())
        self.modules: frozenset[str] = frozenset()

    def warm_up(self) -> None:
        from dashboard_export import pages
        from workflows.cli import main as cli
        from workflows.settings import Settings

        before = dict(os.environ)
        # Every command's module. Not the parser itself: its defaults are read from the
        # environment as it is built, and a fork's is the asker's.
        cli.build_parser()
        for name in _RUN_MODULES:
            importlib.import_module(name)
        pages.load_templates()  # the report's templates, compiled
        self.cache_dir = Settings.from_env().cache_dir
        self.prepare()
        after = dict(os.environ)
        self.imported_env = (
            {k: v for k, v in after.items() if before.get(k) != v},
            tuple(k for k in before if k not in after),
        )

    def prepare(self) -> str | None:
        """Before a fork: a reason to refuse it (a file loaded changed on disk), else load
        what is new (modules forks imported, kept files) so that the fork has it."""
        if self.files:
            changed = warm_share.changed_file(self.files)
            if changed is not None:
                self.withdraw()
                return f"a file the warm spyre-ci process loaded changed ({changed})"
        from workflows.stores import kept

        fresh = [*self._learned_imports(), *map(str, kept.load_ahead(self.cache_dir))]
        if fresh:
            _index_ahead(kept.ahead())
        if fresh or not self.modules:
            self.modules = frozenset(sys.modules)
            # A file known before keeps the stamp and digest it was loaded with: one that
            # changed since is still seen, however close to this look it changed.
            known = {entry[0]: entry for entry in self.files}
            self.files = [known.get(entry[0]) or list(entry) for entry in loaded_files()]
            gc.collect()
            gc.freeze()  # a fork's collections never walk (nor copy) what is here
            if fresh and (self.folder / warm_share.READY).exists():
                self.publish(os.getpid())  # what it loaded, for `spyre-ci warm list` and tests
        return None

    def _learned_imports(self) -> list[str]:
        """Import the modules forks imported on their own since the last look; their names."""
        try:
            st = self.imports.stat()
            seen = (st.st_mtime_ns, st.st_size)
            names = json.loads(self.imports.read_text()) if seen != self.imports_seen else []
        except (OSError, ValueError):
            names = []
        else:
            self.imports_seen = seen
        imported = []
        for name in names if isinstance(names, list) else []:
            if not isinstance(name, str) or name in sys.modules or name in self.failed:
                continue
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - a fork imports it itself, as before
                self.failed.add(name)
                print(f"warm process: cannot import {name}: {exc!r}", file=sys.stderr)
            else:
                imported.append(name)
        return imported

    def publish(self, pid: int) -> None:
        publish(self.folder, {"ready": True, "pid": pid, "keeper": pid, "files": self.files})

    def withdraw(self) -> None:
        """Leave the place to a new warm process (its forks run on): no `ready.json`, no
        socket, nothing starting in this one's name."""
        with warm_share.locked(self.folder):
            if self._mine():
                for name in (warm_share.READY, warm_share.STARTING, "socket"):
                    with contextlib.suppress(OSError):
                        (self.folder / name).unlink()

    def end(self) -> None:
        """Remove the folder, unless a new warm process has started in it."""
        with warm_share.locked(self.folder):
            if self._mine() or not (
                (self.folder / warm_share.READY).exists()
                or warm_share.starting(self.folder) is not None
            ):
                shutil.rmtree(self.folder, ignore_errors=True)

    def _mine(self) -> bool:
        try:
            ready = json.loads((self.folder / warm_share.READY).read_text())
        except (OSError, ValueError):
            return warm_share.starting(self.folder) in (None, os.getpid())
        return isinstance(ready, dict) and ready.get("pid") == os.getpid()


_WARM: list[_Warm] = []


def _index_ahead(values: list[object]) -> None:
    """The selector's index of each Inventory loaded ahead, built once here: a plan asks
    `InventoryIndex.build` for the index of the very Inventory object its fork took from
    `kept`, and finds it built (with no extra families: a run's default). The shipped trace
    loaded ahead gets its lazily built names and hashes (`ImpactMap.prepare`) here too."""
    from selector.impact import ImpactMap
    from selector.index import InventoryIndex
    from suites.model import Inventory

    for value in values:
        if isinstance(value, Inventory):
            InventoryIndex.build(value)
        elif isinstance(value, ImpactMap):
            value.prepare()


def serve(folder: Path) -> int:
    from workflows.settings import Settings

    warm = _Warm(folder)
    _WARM.append(warm)
    start = json.loads((folder / "start.json").read_text())
    sys.path[:] = [str(p) for p in start["path"]]
    idle_s = Settings.from_env().warm_idle_s
    try:
        warm.warm_up()
    except BaseException:  # noqa: BLE001 - said in its log; runs go on in their own processes
        traceback.print_exc()
        warm.withdraw()
        warm.end()
        return ExitCode.INFRASTRUCTURE
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(OSError):
        (folder / "socket").unlink()
    listener.bind(str(folder / "socket"))
    listener.listen(64)
    warm.publish(os.getpid())
    server = Server(listener, _child, idle_s, prepare=warm.prepare, outlives_parent=True)
    print(f"warm process {os.getpid()} ready: {len(warm.modules)} modules", file=sys.stderr)
    try:
        server.loop()
    finally:
        server.kill_children()
        listener.close()
        warm.end()
    return ExitCode.OK


def _child(
    request: dict[str, Any], ready: int, inherited: Sequence[socket.socket], fds: list[int]
) -> None:
    """The fork: become the process that asked, run the command, exit as it would."""
    code: int = ExitCode.INFRASTRUCTURE  # an error before the command ran, or spyre-ci's bug
    try:
        leave_parent(ready, inherited)
        # In the warm process's log (its stderr until the asker's is in place): which fork.
        print(f"fork {os.getpid()}: {' '.join(request['argv'][1:2])}", file=sys.stderr, flush=True)
        if len(fds) != 3:
            raise ValueError(f"the request passed {len(fds)} descriptors, not stdin, out, err")
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.umask(int(request["umask"]))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        warm = _WARM[0]
        changed, removed = warm.imported_env
        os.environ.update(changed)
        for name in removed:
            os.environ.pop(name, None)
        sys.argv = list(request["argv"])
        run_folder.run_for(int(request["pid"]))  # what a run's lock names: the asker
        _standard_streams(request["streams"])
        show_as(sys.argv)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from workflows.cli import main as cli

        gc.set_threshold(*cli.GC_THRESHOLDS)  # as `entry` sets it for its own process
        try:
            code = cli.main(sys.argv[1:], program=True)
        except SystemExit as exc:  # argparse's --help and usage errors: as the interpreter
            code = _exit_status(exc)
        except KeyboardInterrupt:  # before main() could say so (its parser being built)
            print("spyre-ci: interrupted", file=sys.stderr)
            code = ExitCode.INTERRUPTED
        cli.exit_with(code)
    except BaseException:  # noqa: BLE001 - on the asking process's stderr
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            print("spyre-ci: internal error (not a test result) in the warm fork", file=sys.stderr)
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _exit_status(exc: SystemExit) -> int:
    """The status for `exc` (argparse's): None is 0, a number is itself, anything else is
    printed on stderr and is an infrastructure fault (spyre-ci's own bug)."""
    if exc.code is None:
        return ExitCode.OK
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)  # Python's exit 1 would read as new test failures
    return ExitCode.INFRASTRUCTURE


def _standard_streams(streams: dict[str, list[Any]]) -> None:
    """sys.stdin, stdout and stderr over descriptors 0-2 as the interpreter makes them at
    start (newline "\\n"), with the asking process's encodings, errors and buffering (a
    terminal's stdout is line-buffered, stderr always is, `-u` writes through)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        encoding, errors, line_buffering, write_through = (streams.get(name) or [None] * 4)[:4]
        writing = fd > 0
        raw = io.FileIO(fd, "wb" if writing else "rb", closefd=False)
        buffered: Any = io.BufferedWriter(raw) if writing else io.BufferedReader(raw)
        stream = io.TextIOWrapper(
            buffered,
            encoding=encoding or "utf-8",
            errors=errors or "strict",
            newline="\n",
            line_buffering=bool(line_buffering),
            write_through=bool(write_through),
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m workflows.cli.warm_process FOLDER\n")
        return ExitCode.BAD_INPUT
    return serve(Path(args[0]))


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
