"""A progress line for long runs: tests done of total, failures so far, ETA."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from suites.model import Outcome

_WIDTH = 30


class Progress:
    """Thread-safe; redraws in place on a terminal, prints a line every few seconds otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, every_s: float = 5.0) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._every_s = every_s
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._lock = threading.Lock()

    def add_total(self, extra: int) -> None:
        with self._lock:
            self.total += extra

    def __call__(self, outcome: Outcome) -> None:
        with self._lock:
            self.done += 1
            self.failed += outcome.status.is_failure
            now = time.monotonic()
            if self._tty or now - self._last_draw >= self._every_s or self.done == self.total:
                self._last_draw = now
                self._draw(now)

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = now - self._started
        share = self.done / self.total if self.total else 1.0
        filled = int(_WIDTH * share)
        remaining = elapsed / self.done * (self.total - self.done) if self.done else None
        eta = "--:--" if remaining is None else _clock(remaining)
        return (
            f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {self.done}/{self.total} tests, "
            f"{self.failed} failed, {_clock(elapsed)} elapsed, ETA {eta}"
        )

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
