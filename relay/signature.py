"""GitHub webhook signatures: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, raw body)>`."""

from __future__ import annotations

import hashlib
import hmac
import re

_HEADER = re.compile(r"sha256=([0-9a-f]{64})")


def sign(secret: str | bytes, body: bytes) -> str:
    """The header value GitHub would send for `body`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(secret: str | bytes, body: bytes, header: str | None) -> bool:
    """True only for a well-formed SHA-256 signature of the raw body, compared in constant time.

    A missing header, a malformed one, or the legacy SHA-1 `X-Hub-Signature` alone all fail:
    the caller answers 401.
    """
    if not secret or not header:
        return False
    match = _HEADER.fullmatch(header.strip().lower())
    if match is None:
        return False
    return hmac.compare_digest(sign(secret, body), "sha256=" + match.group(1))
