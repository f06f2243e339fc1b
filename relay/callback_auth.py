"""Who is calling back: bearer tokens on `POST /github/callback`.

Two kinds, tried in order: shared-secret tokens configured per downstream repository (for
self-hosted workers), and OIDC JWTs (GitHub Actions, Buildkite) verified against a JWKS.
A GitHub token's `repository` claim names the caller; a Buildkite token has none, so its
`organization_id/pipeline_id` is mapped to a repository by a `ci_providers.yml` in the
reference relay's format (`providers.buildkite.repo_map`), each mapping optionally held to
`required_claims` (a pipeline that builds fork PRs may report only from `main`, say).
Either way the result is the `verified_repo`.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import jwt
import yaml

from relay.config import OidcConfig
from relay.events import RelayError

BUILDKITE_ISSUER = "https://agent.buildkite.com"


@dataclass(frozen=True)
class PipelineMapping:
    """One Buildkite pipeline's identity: the repo it reports as, and the claims it needs."""

    repo: str
    required_claims: Mapping[str, tuple[str, ...]]


def load_ci_providers(path: str | Path) -> dict[str, PipelineMapping]:
    """`providers.buildkite.repo_map` of a ci_providers.yml: `org_id/pipeline_id` -> mapping.
    Errors name the file and the key."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise RelayError(f"{path}: no such ci_providers file") from None
    except yaml.YAMLError as exc:
        raise RelayError(f"{path}: invalid YAML: {exc}") from None
    repo_map = ((data.get("providers") or {}).get("buildkite") or {}).get("repo_map") or {}
    if not isinstance(repo_map, Mapping):
        raise RelayError(f"{path}: providers.buildkite.repo_map must map org_id/pipeline_id")
    mappings = {}
    for key, value in repo_map.items():
        where = f"{path}: providers.buildkite.repo_map.{key}"
        if str(key).count("/") != 1:
            raise RelayError(f"{where}: a key is organization_id/pipeline_id")
        if isinstance(value, str):
            value = {"repo": value}
        if (
            not isinstance(value, Mapping)
            or not isinstance(value.get("repo"), str)
            or (value["repo"].count("/") != 1)
        ):
            raise RelayError(f"{where}: want owner/repo, or {{repo: owner/repo, required_claims}}")
        claims = value.get("required_claims") or {}
        if not isinstance(claims, Mapping):
            raise RelayError(f"{where}.required_claims: map a claim to its allowed values")
        mappings[str(key)] = PipelineMapping(
            value["repo"],
            {
                str(c): tuple(str(v) for v in (allowed if isinstance(allowed, list) else [allowed]))
                for c, allowed in claims.items()
            },
        )
    return mappings


class Unauthorized(RelayError):
    """The bearer token is missing, unknown or invalid (answer 401)."""


class BearerAuth:
    """Maps an `Authorization` header to the downstream repository it speaks for."""

    def __init__(
        self,
        tokens: Mapping[str, str],
        oidc: OidcConfig | None = None,
        ci_providers: str | None = None,
    ) -> None:
        self._tokens = [(tok.encode(), repo) for tok, repo in tokens.items()]
        self._oidc = oidc
        self._pipelines = load_ci_providers(ci_providers) if ci_providers else {}
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
        if claims.get("iss") == BUILDKITE_ISSUER:
            return self._buildkite_repo(claims)
        repo = claims.get("repository")
        if not isinstance(repo, str) or repo.count("/") != 1:
            raise Unauthorized("OIDC token has no 'repository' claim (owner/repo)")
        return repo

    def _buildkite_repo(self, claims: Mapping[str, object]) -> str:
        pipeline = f"{claims.get('organization_id')}/{claims.get('pipeline_id')}"
        mapping = self._pipelines.get(pipeline)
        if mapping is None:
            raise Unauthorized(
                f"Buildkite pipeline {pipeline} ({claims.get('organization_slug')}/"
                f"{claims.get('pipeline_slug')}) is not in ci_providers.yml"
            )
        for claim, allowed in mapping.required_claims.items():
            if str(claims.get(claim)) not in allowed:
                raise Unauthorized(
                    f"Buildkite pipeline {pipeline}: claim {claim}={claims.get(claim)!r} is not "
                    f"one of {', '.join(allowed)} (required_claims for {mapping.repo})"
                )
        return mapping.repo
