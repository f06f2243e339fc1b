"""Warm shutdown in a pool process: the shard it runs stops, keeps what finished, is handed back."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

# A pool process runs one shard at a time; SIGTERM (sent by its worker's warm shutdown) stops
# it: its test process group is killed, what finished is kept, and the shard is handed back.
# The handler is installed for the task's span only: billiard sets its own after the pool
# process's initializer, and an idle pool process ends on SIGTERM as it always did.
DRAINING = threading.Event()
ACTIVE: set[threading.Event] = set()


@contextlib.contextmanager
def in_task() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # a threads or solo pool
        yield
        return
    previous = signal.signal(signal.SIGTERM, drain)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def drain(_signum: int, _frame: Any) -> None:
    DRAINING.set()
    for stop in list(ACTIVE):
        stop.set()
