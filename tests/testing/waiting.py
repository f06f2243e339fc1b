"""Waiting on a condition, never for a fixed time: poll until it holds or a deadline passes,
and name what was awaited when it never came."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, every: float = 0.5) -> T:
    """The first truthy value of `check()`, asked every `every` seconds for up to `timeout`
    seconds; an AssertionError naming `what` past that."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
