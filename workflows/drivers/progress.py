"""A progress line for long runs: tests done of total, failures so far, ETA.

The ETA is the pace of the tests since the first one finished, times what is left: the time
before the first (starting processes, importing torch) is no test's, and counting it in made
an 18-second run say 48 minutes. Until the pace is measured the ETA says nothing ("--:--").
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from suites.model import Outcome

_WIDTH = 30
# The pace is measured over at least this many tests and seconds after the first test.
PACE_TESTS = 5
PACE_SECONDS = 2.0


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

    def add_total(self, extra: int) -> None:
        with self._lock:
            self.total += extra

    def __call__(self, outcome: Outcome) -> None:
        with self._lock:
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
        return (
            f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {self.done}/{self.total} tests, "
            f"{self.failed} failed, {_clock(elapsed)} elapsed, ETA {eta}"
        )

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
        end = "\r" if self._tty and self.done < self.total else "\n"
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
