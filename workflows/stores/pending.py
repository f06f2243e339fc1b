"""Changes deferred to a build: what of a change needs a build of torch (C++, CUDA, codegen)
cannot be tested on the build of its base; it is recorded here, in the state directory, until
a build that contains it is provisioned (`spyre-ci pending check`), then judged there.

    pending.record(state_dir, entry)      # the run that could not test it
    pending.open_entries(state_dir)       # oldest first
    pending.mark(state_dir, head, ran)    # the deferred run's id, exit code, window

One JSON file per change head (`pending/<head sha>.json`), written whole and atomically; a
file that cannot be read is named and skipped, never lost.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.codec import Record

FOLDER = "pending"


@dataclass(frozen=True)
class PendingChange(Record):
    """A change (base..head) whose `files` need a build; `selected` the variants its plan
    chose; `base_build` the build it was first run on (the last build without it)."""

    repo: str
    base: str
    head: str
    delivery_id: str
    message: str
    files: tuple[str, ...]
    selected: tuple[str, ...]
    base_build: str  # git sha
    base_build_version: str
    diff_text: str
    run_id: str
    recorded_at: str
    state: str = "pending"  # pending | ran
    ran: Mapping[str, Any] = field(default_factory=dict)  # run_id, exit_code, build, window
    # The delivery as it came (its kind and payload): the later result is reported for it.
    event_type: str = "push"
    payload: Mapping[str, Any] = field(default_factory=dict)


def folder(state_dir: Path) -> Path:
    return state_dir / FOLDER


def record(state_dir: Path, entry: PendingChange) -> Path:
    """Keep `entry` (a second run of the same head keeps the first's record)."""
    path = folder(state_dir) / f"{entry.head}.json"
    if path.exists():
        return path
    _write(path, entry)
    return path


def entries(state_dir: Path) -> list[PendingChange]:
    """Every recorded change, oldest first; unreadable files are said on stderr."""
    found = []
    for path in sorted(folder(state_dir).glob("*.json")):
        try:
            found.append(PendingChange.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(
                f"spyre-ci: {path}: not a readable pending change ({exc}); skipped", file=sys.stderr
            )
    return sorted(found, key=lambda e: e.recorded_at)


def open_entries(state_dir: Path) -> list[PendingChange]:
    return [e for e in entries(state_dir) if e.state == "pending"]


def mark(state_dir: Path, entry: PendingChange, ran: Mapping[str, Any]) -> PendingChange:
    """`entry` judged: its deferred run's facts kept with it."""
    done = replace(entry, state="ran", ran=dict(ran))
    _write(folder(state_dir) / f"{entry.head}.json", done)
    return done


def _write(path: Path, entry: PendingChange) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=".pending-", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(entry.to_json(), out, indent=1)
        out.write("\n")
    os.replace(temp, path)
