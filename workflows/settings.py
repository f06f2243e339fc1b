"""Every `SPYRE_CI_*` variable the workflows layer reads, read here and only here.

The variables, their fields and defaults are the table in docs/workflows.md ("Settings").
The relay's variables (`SPYRE_CI_WEBHOOK_SECRET`, `SPYRE_CI_HUD_URL`, ...) belong to its own
config loader (`relay.config`); `SPYRE_CI_TRACE_OUT` and `SPYRE_CI_MUTATION` are set by the
tool for its own test subprocesses. Every path is made absolute here, against the directory
the command was started in, so a relative SPYRE_CI_STATE_DIR means the same directory to the
shards, workers and a later `spyre-ci runs resume` that run elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


def absolute(path: str | Path) -> Path:
    """`path` with `~` expanded, absolute against the current directory (no symlinks resolved)."""
    return Path(os.path.abspath(os.path.expanduser(str(path))))


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    redis_url: str | None
    impact_map: Path | None = None  # SPYRE_CI_IMPACT_MAP: read by `run` and `worker --intake`
    # SPYRE_CI_MASS_FAILURE_SHARE: a run failing more than this share (new failures) is held
    # back from History until `spyre-ci history confirm`.
    mass_failure_share: float = 0.5
    inventory: Path | None = None  # SPYRE_CI_INVENTORY: what `select` selects from
    env_cache_dir: Path | None = None  # SPYRE_CI_ENV_CACHE: upgrade-diff's torch environments
    callback_token: str = ""  # SPYRE_CI_CALLBACK_TOKEN: bearer token of `export --callback-url`

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        default_state = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        default_cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cls(
            state_dir=absolute(env.get("SPYRE_CI_STATE_DIR") or default_state / "spyre-ci"),
            redis_url=env.get("SPYRE_CI_REDIS_URL") or None,
            impact_map=_path(env, "SPYRE_CI_IMPACT_MAP"),
            mass_failure_share=_share(env, "SPYRE_CI_MASS_FAILURE_SHARE", 0.5),
            inventory=_path(env, "SPYRE_CI_INVENTORY"),
            env_cache_dir=absolute(
                env.get("SPYRE_CI_ENV_CACHE") or default_cache / "spyre-ci" / "envs"
            ),
            callback_token=env.get("SPYRE_CI_CALLBACK_TOKEN", ""),
        )


class SettingsError(ValueError):
    """An environment variable holds a value it cannot mean; the message names it."""


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    return absolute(raw) if raw else None


def _share(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise SettingsError(f"${name}={raw!r}: want a share in (0, 1], e.g. 0.5")
    return value
