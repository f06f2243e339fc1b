"""The `spyre-ci` command line: argparse subcommands discovered in `workflows.cli.commands`.

The process's entry point: it reads the environment once (`Settings.from_env`, after the
path variables are made absolute) and hands the settings to the command it runs
(`func(args, settings)`); no command reads the environment itself.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import difflib
import errno
import gc
import importlib
import os
import pkgutil
import signal
import sqlite3
import sys
import threading
import traceback
from collections.abc import MutableMapping, Sequence
from typing import Any, NoReturn

from contracts.exit_codes import ExitCode
from workflows.cli import commands, warm_cli
from workflows.errors import BadInput, Unavailable
from workflows.runner import zygote
from workflows.settings import Settings

# Command modules written before workflows/errors.py import it from here.


class Parser(argparse.ArgumentParser):
    """Every parser of the command line, its subcommands' too (argparse makes them of the
    parent's class): no abbreviated options (`--job 2` is not `--jobs 2`), and a mistyped
    choice or subcommand gets the nearest one offered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices or not isinstance(value, str):
            return super()._check_value(action, value)
        names = [str(c) for c in choices]
        close = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise argparse.ArgumentError(
            action, f"invalid choice: {value!r} ({hint}choose from {', '.join(names)})"
        )

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """argparse's error, with the nearest option named for each one this command does
        not know, whatever error came first (`run --evnt F`: "--event is required")."""
        if "required" in message:
            known = [o for o in self._option_string_actions if o.startswith("--")]
            for given in getattr(self, "_given", ()):
                flag = str(given).split("=", 1)[0]
                if flag.startswith("--") and flag not in known:
                    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.7)
                    message += f"; {flag} is no option of this command" + (
                        f" (did you mean {close[0]}?)" if close else ""
                    )
        super().error(message)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse, but an option no parser knows is named with the nearest one the
        command has (`--evnt`: did you mean `--event`?)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            known = _option_strings(self, parsed)
            hints = []
            for extra in extras:
                flag = extra.split("=", 1)[0]
                close = difflib.get_close_matches(flag, known, n=1, cutoff=0.7)
                hints.append(f"{extra} (did you mean {close[0]}?)" if close else extra)
            self.error(f"unrecognized arguments: {' '.join(hints)}")
        return parsed


def _option_strings(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> list[str]:
    """The long options of the (sub)command `parsed` went to, and the parser's own."""
    found = [o for o in parser._option_string_actions if o.startswith("--")]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(parsed, str(action.dest), None)
            sub = action.choices.get(chosen) if chosen else None
            if isinstance(sub, argparse.ArgumentParser):
                found += _option_strings(sub, parsed)
    return found


def version_line() -> str:
    """`spyre-ci --version`: this package's version and the torch it runs tests on."""
    from importlib import metadata

    def of(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    return f"spyre-ci {of('spyre-ci')} (torch {of('torch')}, Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="spyre-ci",
        description="Keep an out-of-tree PyTorch backend green while upstream PyTorch moves.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, *, program: bool = False) -> int:
    """Run the command `argv` (default: this process's arguments); its exit code. `program`:
    this process is the `spyre-ci` program (`entry`, or a warm fork), which keeps the warm
    `spyre-ci` process going for the next run; a library call (a test's) does not."""
    parser = build_parser()
    args = parser.parse_args(argv)  # a usage error exits 2 (argparse), as bad input does
    if getattr(args, "func", None) is None:
        parser.print_help()
        return ExitCode.BAD_INPUT
    _absolute_path_variables(os.environ)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None  # as Ctrl-C
    # The one place errors become exit codes (contracts/exit_codes.py says what each means;
    # workflows/errors.py lists each error type's category).
    settings: Settings | None = None
    try:
        settings = Settings.from_env()  # a variable that cannot mean anything: exit 2
        zygote.share(settings)  # the warm runner of this state directory, for every run
        if program and args.command in warm_cli.COMMANDS:
            warm_cli.ensure(settings)  # the next one forks from a warm spyre-ci process
        from workflows.stores import kept  # selector: not for every command

        kept.keep_in(settings.cache_dir)  # loaded forms (trace, Inventory, definitions)
        return int(args.func(args, settings))
    except BadInput as exc:
        print(f"spyre-ci: error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except Unavailable as exc:  # the tests, or a service they need, could not run
        print(f"spyre-ci: infrastructure error (not a test result): {exc}", file=sys.stderr)
        return ExitCode.INFRASTRUCTURE
    except KeyboardInterrupt:
        print("spyre-ci: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): stop writing, no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the flush at exit must not raise again
        return ExitCode.BROKEN_PIPE  # what a shell reports for a writer stopped by SIGPIPE
    except OSError as exc:
        # The machine's fault, not the tests': a full disk, a folder that cannot be written
        # (checked paths are refused before with exit 2; this is what changed under a run).
        # History learns last, so nothing of the run was learned; it can be resumed.
        where = f" ({exc.filename})" if exc.filename else _full_disk_hint(exc, settings)
        print(
            f"spyre-ci: infrastructure error (not a test result): {exc.strerror or exc}{where}",
            file=sys.stderr,
        )
        return ExitCode.INFRASTRUCTURE
    except sqlite3.Error as exc:
        # A database in the state directory that failed while in use (a full disk, an I/O
        # error) and that its store did not name: an outage, one line, never a traceback.
        state = f" under the state directory {settings.state_dir}" if settings else ""
        print(
            f"spyre-ci: infrastructure error (not a test result): a database{state} failed: {exc}",
            file=sys.stderr,
        )
        return ExitCode.INFRASTRUCTURE
    except Exception:
        # spyre-ci's own bug: the traceback is for its maintainers. Never Python's exit 1 for
        # a traceback, which a CI job would read as new test failures.
        traceback.print_exc()
        print(
            "spyre-ci: internal error (not a test result): the traceback above is a bug in "
            "spyre-ci; please report it",
            file=sys.stderr,
        )
        return ExitCode.INFRASTRUCTURE
    finally:
        if program and settings is not None and args.command in warm_cli.COMMANDS:
            # What the warm process imports ahead: a hint, whose failure is never the run's.
            with contextlib.suppress(Exception):
                warm_cli.record_imports(settings)
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


# Variables that specs expand into paths (`${TORCH_ROOT}/test/...`): made absolute here, at
# the edge, because shard processes and workers read them from other directories.
PATH_VARIABLES = ("TORCH_ROOT", "TORCH_DEVICE_ROOT")


def _absolute_path_variables(environ: MutableMapping[str, str]) -> None:
    for name in PATH_VARIABLES:
        value = environ.get(name)
        if value and not os.path.isabs(value):
            environ[name] = os.path.abspath(os.path.expanduser(value))


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _full_disk_hint(exc: OSError, settings: Settings | None) -> str:
    """Where to look when a write that named no file found its disk full."""
    if exc.errno not in _FULL:
        return ""
    state = f"the state directory {settings.state_dir}, " if settings else ""
    return f" (a disk spyre-ci writes to is full: {state}the run's --out, or the temporary folder)"


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def entry() -> NoReturn:
    """The `spyre-ci` program (the console script, `python -m workflows`): `main()`, then an
    exit that skips the interpreter's teardown.

    At exit CPython frees every object and module one by one. After a run (the Inventory,
    the shipped trace and the plan in memory) that took about a quarter of a second of a
    second run's two, for memory the kernel takes back at once anyway. What an exit must do
    is still done, in CPython's order (`exit_with`): another thread that is not a daemon
    is waited for, as the normal exit does; then the exit handlers run (zygotes stopped and
    their folders removed, logging flushed), then the standard streams are flushed (a
    reader that went away is no error). Tests call `main()`, which returns.

    The cyclic garbage collector runs less often in it (`gc.set_threshold`): a run holds the
    Inventory and the shipped trace, millions of objects that live as long as the process,
    and each collection of the older generations walks them all again. With Python's
    defaults, collections took 0.2-0.3 s of a second run's CPU here; with a first
    generation of 200,000 objects (as mypy sets for its own process) they take none, and
    cycles are still collected."""
    gc.set_threshold(*GC_THRESHOLDS)
    exit_with(main(program=True))


GC_THRESHOLDS = (200_000, 30, 30)  # the `spyre-ci` program's (`entry`; a warm fork's too)


def exit_with(code: int) -> NoReturn:
    """CPython's exit steps without its teardown (`entry`; a warm fork's end too): the
    threads that are not daemons are waited for, the exit handlers run, the standard
    streams are flushed, and the process ends with `code`."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # CPython's own exit step, run here in its order
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):  # no reader, a closed stream
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
