"""Where the workflows layer keeps its state, from the environment.

Every path is made absolute here, against the directory the command was started in, so a
relative SPYRE_CI_STATE_DIR means the same directory to the shards, workers and a later
`spyre-ci runs resume` that run elsewhere.
"""

from __future__ import annotations

import os
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

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        default_state = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        return cls(
            state_dir=absolute(env.get("SPYRE_CI_STATE_DIR") or default_state / "spyre-ci"),
            redis_url=env.get("SPYRE_CI_REDIS_URL") or None,
            impact_map=absolute(env["SPYRE_CI_IMPACT_MAP"]) if env.get("SPYRE_CI_IMPACT_MAP")
            else None,
        )
