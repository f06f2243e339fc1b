"""One Redis client per URL and settings in a process, shared by every caller; and the one
translation of Redis's errors into an outage (`answering`).

A client owns a connection pool; making one per call opened a fresh connection each time
(a connect, a handshake and a package-metadata lookup in redis-py: about 1.5 ms), which was
most of what a docs-only run cost a worker. redis-py's pools are thread-safe and reset
themselves in a forked child, so one client serves a process's threads and its pool's
children alike. Outages are unaffected: a dead connection fails its call and the next call
connects again; a connect that takes more than `CONNECT_TIMEOUT_S` is one (an address that
drops packets used to hang a command for the system's TCP timeout, minutes).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from workflows.errors import Unavailable

if TYPE_CHECKING:
    import redis

CONNECT_TIMEOUT_S = 10.0

_lock = threading.Lock()
_clients: dict[tuple[str, float | None], redis.Redis] = {}


class RedisUnavailable(Unavailable):
    """Redis could not be reached, or failed a command: an outage (exit 3); the message
    names the server (its password masked) and what was being done."""


def shared(url: str, *, socket_timeout: float | None = None) -> redis.Redis:
    """The process's client for `url` (answers decoded to str)."""
    key = (url, socket_timeout)
    client = _clients.get(key)
    if client is None:
        import redis

        with _lock:
            client = _clients.get(key)
            if client is None:
                client = redis.Redis.from_url(
                    url,
                    decode_responses=True,
                    socket_timeout=socket_timeout,
                    socket_connect_timeout=CONNECT_TIMEOUT_S,
                )
                _clients[key] = client
    return client


@contextmanager
def answering(
    url: str, what: str, error: type[Unavailable] = RedisUnavailable, store: str = "Redis"
) -> Iterator[None]:
    """Run Redis commands for `what`: any Redis error inside is an `error` (an outage)
    naming the `store` at the server and `what`, one line for the command line (never a
    traceback)."""
    import redis

    try:
        yield
    except redis.RedisError as exc:
        raise error(f"{store} at {masked(url)}: {what} failed: {exc}") from exc


def masked(url: str) -> str:
    """A service URL fit for a message or a log: its password (or token) replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
