"""The GitHub adapter's two errors, apart from the adapter so that code which only catches
them does not import github3.py (and PyJWT, cryptography, requests) with them."""

from __future__ import annotations

from contracts.errors import Refused
from relay.events import RelayError, RelayUnavailable


class GitHubUnavailable(RelayUnavailable):
    """GitHub answered 408, 429 or 5xx, or could not be reached; the call may succeed if
    retried (`retry_after`: the seconds GitHub's Retry-After asked for, when it sent one)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class GitHubRefused(RelayError, Refused):
    """GitHub refused the call (a 4xx), or the adapter cannot make it as asked (no
    credential for it, an argument outside GitHub's limits); retrying will not help."""
