"""One Redis client per URL and settings in a process, shared by every caller.

A client owns a connection pool; making one per call opened a fresh connection each time
(a connect, a handshake and a package-metadata lookup in redis-py: about 1.5 ms), which was
most of what a docs-only run cost a worker. redis-py's pools are thread-safe and reset
themselves in a forked child, so one client serves a process's threads and its pool's
children alike. Outages are unaffected: a dead connection fails its call and the next call
connects again.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

_lock = threading.Lock()
_clients: dict[tuple[str, float | None], redis.Redis] = {}


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
                    url, decode_responses=True, socket_timeout=socket_timeout
                )
                _clients[key] = client
    return client
