"""What a run's changed modules did while they were imported: the evidence that a test
process (or the zygote) that never reached its first test failed because of the change.

A changed module is untrusted code, and its import runs where a test would: under a keeper,
the memory limit and the per-test timeout. The overlay's `sitecustomize` calls `watch` on the
change's finder: each changed module then appends a JSON line to the file named by
`$SPYRE_CI_CHANGE_IMPORTS` when its import starts and one when it ends or raises, written
unbuffered so that they outlive a kill (`suites.import_log`; an edited upstream test file a
file suite imports writes the same lines, `suites.upstream`). The runner reads them (`read`)
for a cold process (`workflows.runner.shard_runner`) and for the zygote, whose import of the
changed torch stands for every test process it forks (`workflows.runner.zygote`): an import
still open past the test timeout is a hang (`overdue`), and a process that ends before its
first test inside an import, after one raised, or with an error that names a changed module
is the change's failure (`blame`), never the tool's. The words are the same warm and cold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites import import_log

IMPORTS_VAR = import_log.IMPORTS_VAR


def watch(finder: Any, log: Callable[[], str]) -> None:
    """Make every module `finder` serves write when its import starts and ends, into the file
    `log()` names when the import starts ("": nothing; the test process's `sitecustomize`
    hands in what `$SPYRE_CI_CHANGE_IMPORTS` says then, since a warm child gets its own)."""
    find: Callable[..., Any] = finder.find_spec

    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        spec = find(fullname, path, target)
        loader = getattr(spec, "loader", None)
        if loader is not None:
            loader.exec_module = _watched(fullname, str(spec.origin), loader.exec_module, log)
        return spec

    finder.find_spec = find_spec


def _watched(
    name: str, origin: str, run: Callable[[Any], None], where: Callable[[], str]
) -> Callable[[Any], None]:
    def exec_module(module: Any) -> None:
        # The file is fixed when the import starts: the module may edit the environment.
        with import_log.watched(name, origin, where()):
            run(module)

    return exec_module


@dataclass(frozen=True)
class Imports:
    """What one process's changed modules did so far: `open` (module, file, monotonic start),
    outermost first; `failed` (module, the exception), innermost first; `files` of every
    changed module whose import started."""

    open: tuple[tuple[str, str, float], ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str], ...] = ()


def read(path: Path) -> Imports:
    """The import log of one process (no file: nothing was imported from the change)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return Imports()
    started: dict[str, tuple[str, str, float]] = {}
    failed: list[tuple[str, str]] = []
    files: dict[str, str] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if not isinstance(entry, dict):
            continue
        if "start" in entry:
            name = str(entry["start"])
            started[name] = (name, str(entry.get("file", "")), float(entry.get("at", 0.0)))
            files[name] = str(entry.get("file", ""))
        elif "end" in entry:
            started.pop(str(entry["end"]), None)
        elif "failed" in entry:
            started.pop(str(entry["failed"]), None)
            failed.append((str(entry["failed"]), str(entry.get("error", ""))))
    return Imports(tuple(started.values()), tuple(failed), tuple(files.items()))


def overdue(imports: Imports, limit_s: float, now: float | None = None) -> bool:
    """Whether an import of the change has been open for longer than `limit_s`."""
    now = time.monotonic() if now is None else now
    return any(now - began > limit_s for _, _, began in imports.open)


def hung(imports: Imports, limit_s: float) -> str:
    """The change's failure of a process killed because an import of it did not end."""
    name = imports.open[-1][0] if imports.open else "?"
    return (
        f"importing the change's {_what(name)} did not end within {limit_s:g} s (the test "
        "timeout and its grace): its process was killed"
    )


def _what(name: str) -> str:
    """A changed torch module (`torch.nn.functional`) or an edited upstream test file
    (`test/test_ops.py`, as `suites.upstream` names it)."""
    return f"{TEST_FILE} {name}" if name.endswith(".py") else f"module {name}"


TEST_FILE = "test file"


def names_test_file(why: str) -> bool:
    """Whether a change's failure (`hung`, `blame`) is an edited test file's, not torch's."""
    return f"the change's {TEST_FILE} " in why


def blame(imports: Imports, returncode: int | None, errors: str = "") -> str | None:
    """Why a process that ended before its first test (`returncode`, `errors`: the end of
    what it wrote on stderr) failed because of the change; None when nothing says so."""
    from workflows.runner.keeper import status_text  # not in every test process's start

    if imports.failed:
        name, error = imports.failed[0]
        return f"importing the change's {_what(name)} raised {error}"
    if imports.open:
        name = imports.open[-1][0]
        return f"importing the change's {_what(name)} ended its process: {status_text(returncode)}"
    for name, origin in imports.files:
        if origin and origin in errors:
            subject = "the change" if name.endswith(".py") else "the changed torch"
            return f"{subject} does not import: the error names the change's {_what(name)}"
    return None
