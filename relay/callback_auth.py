"""Who is calling back: bearer tokens on `POST /github/callback`.

Two kinds, tried in order: shared-secret tokens configured per downstream repository (for
self-hosted workers), and OIDC JWTs (GitHub Actions, Buildkite) verified against a JWKS,
whose `repository` claim names the caller. Either way the result is the `verified_repo`.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from pathlib import Path

import jwt

from relay.config import OidcConfig
from relay.events import RelayError


class Unauthorized(RelayError):
    """The bearer token is missing, unknown or invalid (answer 401)."""


class BearerAuth:
    """Maps an `Authorization` header to the downstream repository it speaks for."""

    def __init__(self, tokens: Mapping[str, str], oidc: OidcConfig | None = None) -> None:
        self._tokens = [(tok.encode(), repo) for tok, repo in tokens.items()]
        self._oidc = oidc
        self._jwks: jwt.PyJWKClient | jwt.PyJWKSet | None = None
        if oidc is not None:
            if oidc.jwks_file:
                try:
                    data = json.loads(Path(oidc.jwks_file).read_text(encoding="utf-8"))
                    self._jwks = jwt.PyJWKSet.from_dict(data)
                except (OSError, ValueError, jwt.PyJWTError) as exc:
                    raise RelayError(f"oidc.jwks_file {oidc.jwks_file}: {exc}") from None
            else:
                self._jwks = jwt.PyJWKClient(str(oidc.jwks_url), cache_keys=True, lifespan=3600)

    def verify(self, header: str | None) -> str:
        """The verified repository (`owner/repo`); raises Unauthorized."""
        if not header:
            raise Unauthorized("missing Authorization: Bearer <token>")
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Authorization must be 'Bearer <token>'")
        raw = token.encode("utf-8", "replace")
        found = None
        # Compare against every token, so the time taken does not tell which one came close.
        for candidate, repo in self._tokens:
            if hmac.compare_digest(candidate, raw):
                found = repo
        if found is not None:
            return found
        if self._oidc is not None and token.count(".") == 2:
            return self._verify_jwt(token)
        raise Unauthorized("unknown bearer token")

    def _verify_jwt(self, token: str) -> str:
        assert self._oidc is not None and self._jwks is not None
        try:
            if isinstance(self._jwks, jwt.PyJWKClient):
                key = self._jwks.get_signing_key_from_jwt(token).key
            else:
                kid = jwt.get_unverified_header(token).get("kid")
                matches = [k for k in self._jwks.keys if kid is None or k.key_id == kid]
                if not matches:
                    raise Unauthorized(f"no JWKS key with kid {kid!r}")
                key = matches[0].key
            claims = jwt.decode(
                token,
                key,
                algorithms=["RS256", "ES256"],
                audience=self._oidc.audience,
                issuer=list(self._oidc.issuers),
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"OIDC token rejected: {exc}") from None
        repo = claims.get("repository")
        if not isinstance(repo, str) or repo.count("/") != 1:
            raise Unauthorized("OIDC token has no 'repository' claim (owner/repo)")
        return repo
