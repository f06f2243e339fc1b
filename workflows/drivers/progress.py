"""A progress line for long runs: tests done of total, failures so far, ETA.

The total is the plan's and stays what it is: what runs after the plan (reruns of failures,
the A/B's base side, the expansion) is a phase of its own, counted apart (`rerun 3/14`), so
a failure run again is never counted twice and the total never grows under the reader.

The ETA is the pace of the tests since the first one finished, times what is left: the time
before the first (starting processes, importing torch) is no test's, and counting it in made
an 18-second run say 48 minutes. Until the pace is measured the ETA says nothing ("--:--").
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from suites.model import Outcome

_WIDTH = 30
# The pace is measured over at least this many tests and seconds after the first test.
PACE_TESTS = 5
PACE_SECONDS = 2.0


@dataclass
class _Phase:
    name: str
    total: int
    done: int = 0
    failed: int = 0


class Progress:
    """Thread-safe; redraws in place on a terminal, prints a line every few seconds otherwise."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._every_s = every_s
        self._clock = clock
        self._started = clock()
        self._first: tuple[float, int] | None = None  # (when, done) at the first test
        self._last_draw = 0.0
        self._lock = threading.Lock()
        self._phase: _Phase | None = None  # what runs after the plan, counted apart

    def start_phase(self, name: str, count: int) -> None:
        """What runs next is `count` tests of a phase after the plan (`rerun`, `base`, ...):
        counted apart from the plan's tests and failures."""
        with self._lock:
            self._phase = _Phase(name, count)

    def __call__(self, outcome: Outcome) -> None:
        with self._lock:
            if self._phase is not None:
                self._phase.done += 1
                self._phase.failed += outcome.status.is_failure
                now = self._clock()
                if self._tty or now - self._last_draw >= self._every_s:
                    self._last_draw = now
                    self._draw(now)
                return
            self.done += 1
            self.failed += outcome.status.is_failure
            now = self._clock()
            if self._first is None:
                self._first = (now, self.done)
            if self._tty or now - self._last_draw >= self._every_s or self.done == self.total:
                self._last_draw = now
                self._draw(now)

    def line(self, now: float | None = None) -> str:
        now = self._clock() if now is None else now
        elapsed = now - self._started
        share = self.done / self.total if self.total else 1.0
        filled = int(_WIDTH * share)
        remaining = self.remaining_s(now)
        eta = "--:--" if remaining is None else _clock(remaining)
        text = (
            f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {self.done}/{self.total} tests, "
            f"{self.failed} failed, {_clock(elapsed)} elapsed, ETA {eta}"
        )
        phase = self._phase
        if phase is not None:
            text += f"; {phase.name} {phase.done}/{phase.total}"
            text += f", {phase.failed} failed" if phase.failed else ""
        return text

    def remaining_s(self, now: float) -> float | None:
        """Seconds left at the pace since the first test; None until that pace is known."""
        if self.done >= self.total:
            return 0.0
        if self._first is None:
            return None
        since, first_done = self._first
        tests, seconds = self.done - first_done, now - since
        if tests < PACE_TESTS or seconds < PACE_SECONDS:
            return None
        return seconds / tests * (self.total - self.done)

    def _draw(self, now: float) -> None:
        busy = self.done < self.total or (
            self._phase is not None and self._phase.done < self._phase.total
        )
        end = "\r" if self._tty and busy else "\n"
        self._stream.write(self.line(now) + end)
        self._stream.flush()

    def finish(self) -> None:
        with self._lock:
            if self._tty:
                self._stream.write(self.line() + "\n")
                self._stream.flush()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
