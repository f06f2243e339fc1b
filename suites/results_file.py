"""The results file of the pytest plugin (`--spyre-results OUT.jsonl`): the one codec.

One JSON line when a variant starts, one when it ends:

    {"event": "start", "id": "<variant id>"}
    {"event": "end", "id": "<variant id>", "status": "passed", "duration_s": 0.01, "message": ""}

An `end` with no `start` before it, status `removed`, is an id of the ids file the loaded
specs no longer have: it did not run (written before the first test).

The writer is `suites.pytest_plugin`; the readers are the shard runner (incrementally, while
the process runs: a start without an end is the test that crashed or hangs), a resumed run,
the upgrade diff run, `suites record` and the benchmarks. A line torn by a crash mid-write,
or one of another shape, carries nothing and is skipped. Torch-free, no I/O but the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from suites.model import Outcome, Status

START = "start"
END = "end"
FAULT = "device_fault"


@dataclass(frozen=True)
class Started:
    """A variant began running (its `end` line, if it comes, is an Outcome)."""

    id: str


@dataclass(frozen=True)
class DeviceFault:
    """The device's health probe failed after a burst of failures: the outcomes of `ids`
    (ended since the last good probe, not reported) say nothing about their tests."""

    reason: str
    ids: tuple[str, ...]


Event = Started | Outcome | DeviceFault


def start_line(variant_id: str) -> str:
    return json.dumps({"event": START, "id": variant_id}) + "\n"


def end_line(outcome: Outcome) -> str:
    return json.dumps({"event": END, **outcome.to_json()}) + "\n"


def fault_line(reason: str, ids: list[str]) -> str:
    return json.dumps({"event": FAULT, "reason": reason, "ids": ids}) + "\n"


def parse_line(line: str) -> Event | None:
    """The event of one line, or None for a torn or foreign line."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
        kind = record.get("event")
        if kind == START:
            return Started(str(record["id"]))
        if kind == FAULT:
            return DeviceFault(str(record["reason"]), tuple(str(i) for i in record["ids"]))
        if kind == END:
            return Outcome(
                str(record["id"]),
                Status(record["status"]),
                float(record.get("duration_s", 0.0)),
                str(record.get("message", "")),
            )
    except (json.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError):
        pass
    return None


def read_events(path: str | Path) -> Iterator[Event]:
    """Every event of a (possibly torn) results file, in order."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    for line in text.splitlines():
        event = parse_line(line)
        if event is not None:
            yield event


def read_outcomes(paths: Iterable[str | Path]) -> dict[str, Outcome]:
    """The last outcome per variant over `paths` (ended tests only)."""
    done: dict[str, Outcome] = {}
    for path in paths:
        for event in read_events(path):
            if isinstance(event, Outcome):
                done[event.id] = event
    return done


class ResultsReader:
    """Incremental reader of a results file another process appends to."""

    def __init__(self, path: Path) -> None:
        self._fh: IO[str] = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
        self._partial = ""

    def close(self) -> None:
        self._fh.close()

    def read(self) -> list[Event]:
        """The events of the lines completed since the last call."""
        self._partial += self._fh.read()
        *lines, self._partial = self._partial.split("\n")
        return [e for e in map(parse_line, lines) if e is not None]


MESSAGE_LIMIT = 4000


def clip_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """A failure message cut to about `limit` characters, keeping its head, its tail and its
    exception line: a dispatcher error's exception line is followed by kilobytes of backend
    lists, so a tail alone loses the line that says what failed."""
    text = text.strip()
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    # The exception line: the first unindented line after the last traceback frame.
    last_frame = max((i for i, line in enumerate(lines) if line.startswith('  File "')), default=-1)
    exception = next(
        (line for line in lines[last_frame + 1 :] if line and not line[0].isspace()), ""
    )[: limit // 4]
    part = (limit - len(exception)) // 2
    head, tail = text[:part], text[-part:]
    middle = f"\n[... {len(text) - 2 * part} characters cut ...]\n"
    if exception and exception not in head and exception not in tail:
        middle = f"{middle}{exception}{middle}"
    return head + middle + tail
