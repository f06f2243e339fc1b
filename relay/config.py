"""Relay configuration: a YAML file, overridden field by field by `SPYRE_CI_*` variables.

Every error names the file (or variable) and the field, and says what a valid value is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from relay.events import SPYRE_LABEL, RelayError, TriggerRules

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB


@dataclass(frozen=True)
class GitHubConfig:
    """How the adapter reaches GitHub: a token for statuses/compare/dispatch, an App for checks."""

    base_url: str | None = None  # None: api.github.com; else a GitHub Enterprise base URL
    token: str | None = None
    app_id: str | None = None
    installation_id: int | None = None
    private_key_path: str | None = None


@dataclass(frozen=True)
class OidcConfig:
    """Callback bearer tokens as OIDC JWTs checked against a JWKS."""

    jwks_url: str | None = None
    jwks_file: str | None = None
    issuers: tuple[str, ...] = (
        "https://token.actions.githubusercontent.com",
        "https://agent.buildkite.com",
    )
    audience: str = "pytorch-cross-repo-ci-relay"


@dataclass(frozen=True)
class RelayConfig:
    """Everything `spyre-ci serve` needs; see docs/relay.md for each field."""

    webhook_secret: str = ""
    redis_url: str = "redis://127.0.0.1:6379/0"
    upstream_repo: str = "pytorch/pytorch"
    branches: tuple[str, ...] = ("main",)
    label: str = SPYRE_LABEL
    allowlist: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    # Shared-secret callback tokens: token -> the downstream repo it speaks for.
    callback_tokens: Mapping[str, str] = field(default_factory=dict)
    oidc: OidcConfig | None = None
    # Buildkite pipeline -> repository for OIDC callbacks, in the reference's ci_providers.yml.
    ci_providers: str | None = None
    # Run directories (`<runs_dir>/<run id>/`) whose pages GET /runs/<run id> serves.
    runs_dir: str | None = None
    callback_rate_per_minute: int = 100
    github: GitHubConfig = field(default_factory=GitHubConfig)
    hud_url: str | None = None
    hud_bot_key: str | None = None
    # Fan upstream events out to allowlisted repositories as repository_dispatch (CRCR mode).
    fanout: bool = True

    @property
    def rules(self) -> TriggerRules:
        return TriggerRules(repo=self.upstream_repo, branches=self.branches, label=self.label)


_ENV = {
    "SPYRE_CI_WEBHOOK_SECRET": "webhook_secret",
    "SPYRE_CI_REDIS_URL": "redis_url",
    "SPYRE_CI_UPSTREAM_REPO": "upstream_repo",
    "SPYRE_CI_BRANCHES": "branches",
    "SPYRE_CI_ALLOWLIST": "allowlist",
    "SPYRE_CI_CALLBACK_TOKENS": "callback_tokens",
    "SPYRE_CI_HUD_URL": "hud_url",
    "SPYRE_CI_HUD_BOT_KEY": "hud_bot_key",
    "SPYRE_CI_CI_PROVIDERS": "ci_providers",
    "SPYRE_CI_RUNS_DIR": "runs_dir",
    "SPYRE_CI_MAX_BODY_BYTES": "max_body_bytes",
}
_GITHUB_ENV = {
    "SPYRE_CI_GITHUB_URL": "base_url",
    "SPYRE_CI_GITHUB_TOKEN": "token",
    "SPYRE_CI_GITHUB_APP_ID": "app_id",
    "SPYRE_CI_GITHUB_INSTALLATION_ID": "installation_id",
    "SPYRE_CI_GITHUB_PRIVATE_KEY": "private_key_path",
}


def load_config(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> RelayConfig:
    """Read the YAML file (if any), then apply `SPYRE_CI_*` overrides from `env`."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    where = "config"
    if path is not None:
        where = str(path)
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RelayError(f"{path}: no such config file") from None
        except yaml.YAMLError as exc:
            raise RelayError(f"{path}: invalid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise RelayError(f"{path}: a relay config is a mapping of field: value")
        raw = dict(loaded)
    known = {f for f in RelayConfig.__dataclass_fields__}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise RelayError(
            f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    github_raw = raw.pop("github", None) or {}
    oidc_raw = raw.pop("oidc", None)
    for var, name in _ENV.items():
        if env.get(var):
            raw[name] = env[var]
    config = RelayConfig()
    values: dict[str, Any] = {}
    for name, value in raw.items():
        values[name] = _coerce(name, value, _source(name, env, where))
    config = replace(config, **values)
    if not isinstance(github_raw, dict):
        raise RelayError(f"{where}: field 'github' must be a mapping")
    github_values = dict(github_raw)
    for var, name in _GITHUB_ENV.items():
        if env.get(var):
            github_values[name] = env[var]
    try:
        github = GitHubConfig(**github_values)
    except TypeError:
        known_gh = ", ".join(GitHubConfig.__dataclass_fields__)
        raise RelayError(f"{where}: field 'github' accepts only {known_gh}") from None
    if github.installation_id is not None:
        try:
            github = replace(github, installation_id=int(github.installation_id))
        except (TypeError, ValueError):
            raise RelayError(
                f"{where}: field 'github.installation_id' must be an integer"
            ) from None
    if github.app_id is not None:
        # github3.py 4.0.1 puts the app id in the JWT `iss` claim, which PyJWT wants as a string.
        github = replace(github, app_id=str(github.app_id))
    oidc = None
    if oidc_raw is not None:
        if not isinstance(oidc_raw, dict):
            raise RelayError(f"{where}: field 'oidc' must be a mapping")
        try:
            oidc_fields: dict[str, Any] = {
                k: tuple(v) if k == "issuers" else v for k, v in oidc_raw.items()
            }
            oidc = OidcConfig(**oidc_fields)
        except TypeError:
            known_o = ", ".join(OidcConfig.__dataclass_fields__)
            raise RelayError(f"{where}: field 'oidc' accepts only {known_o}") from None
        if not (oidc.jwks_url or oidc.jwks_file):
            raise RelayError(f"{where}: field 'oidc' needs jwks_url or jwks_file")
    return replace(config, github=github, oidc=oidc)


def _source(name: str, env: Mapping[str, str], where: str) -> str:
    for var, field_name in _ENV.items():
        if field_name == name and env.get(var):
            return f"environment variable {var}"
    return f"{where}: field {name!r}"


def _coerce(name: str, value: Any, where: str) -> Any:
    if name == "branches":
        if isinstance(value, str):
            value = [b.strip() for b in value.split(",") if b.strip()]
        if not isinstance(value, list) or not value or not all(isinstance(b, str) for b in value):
            raise RelayError(f"{where} must be a non-empty list of branch names")
        return tuple(value)
    if name == "callback_tokens":
        if isinstance(value, str):  # "owner/repo=token,owner/repo2=token2"
            pairs = [p.split("=", 1) for p in value.split(",") if p.strip()]
            if not all(len(p) == 2 and p[0].strip() and p[1].strip() for p in pairs):
                raise RelayError(f"{where} must look like owner/repo=token[,owner/repo=token]")
            return {tok.strip(): repo.strip() for repo, tok in pairs}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise RelayError(f"{where} must map owner/repo to its callback token")
        return {tok: repo for repo, tok in value.items()}
    if name in ("max_body_bytes", "callback_rate_per_minute"):
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise RelayError(f"{where} must be a positive integer, not {value!r}") from None
        if number <= 0:
            raise RelayError(f"{where} must be a positive integer, not {value!r}")
        return number
    if name == "fanout":
        if not isinstance(value, bool):
            raise RelayError(f"{where} must be true or false")
        return value
    if name == "upstream_repo" and (not isinstance(value, str) or value.count("/") != 1):
        raise RelayError(f"{where} must be owner/repo, not {value!r}")
    if value is not None and not isinstance(value, str):
        raise RelayError(f"{where} must be a string, not {type(value).__name__}")
    return value
