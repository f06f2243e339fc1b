"""The import log of a run's changed code: what each test process (or zygote) writes while it
imports code the change under test brought, so that a process that never reached its first
test can be told to have failed because of the change, never because of the tool.

A process whose environment names a file in `$SPYRE_CI_CHANGE_IMPORTS` appends one JSON line
there when such an import starts (`{"start": NAME, "file": PATH, "at": MONOTONIC}`) and one
when it ends (`{"end": NAME}`) or raises (`{"failed": NAME, "error": "Type: message"}`),
unbuffered, so that the lines outlive a kill. Two kinds of changed code write it: a changed
torch module (the overlay's finder, `workflows.runner.change_imports.watch`) and an edited
upstream test file a file suite imports (`suites.upstream.import_test_file`). The runner
reads it (`workflows.runner.change_imports.read`). Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

IMPORTS_VAR = "SPYRE_CI_CHANGE_IMPORTS"


@contextlib.contextmanager
def watched(name: str, origin: str, log: str | None = None) -> Iterator[None]:
    """Log the import of the changed code `name` (from the file `origin`) that runs inside
    the block into `log` (default: what `$SPYRE_CI_CHANGE_IMPORTS` says now; "": nowhere)."""
    log = os.environ.get(IMPORTS_VAR, "") if log is None else log
    note(log, {"start": name, "file": origin, "at": time.monotonic()})
    try:
        yield
    except BaseException as exc:
        note(log, {"failed": name, "error": f"{type(exc).__name__}: {exc}"[:500]})
        raise
    note(log, {"end": name})


def note(log: str, entry: dict[str, Any]) -> None:
    """Append one line to `log`, at once ("": nothing)."""
    if not log:
        return
    with contextlib.suppress(OSError):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
