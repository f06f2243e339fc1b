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
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from workflows.errors import BadInput


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
    # SPYRE_CI_CACHE_DIR: what is derived from files and can be made again (the shipped
    # trace, the cached Inventory and the definitions of changed files, each read once into
    # a form that loads faster: `workflows.stores.kept`).
    cache_dir: Path | None = None
    # SPYRE_CI_TORCH_BUILDS: prepared torch environments, one per upstream commit; a shard of
    # a run whose head sha has one runs there (`workflows.runner.torch_builds`, which also
    # looks in `env_cache_dir`).
    torch_builds: Path | None = None
    callback_token: str = ""  # SPYRE_CI_CALLBACK_TOKEN: bearer token of `export --callback-url`
    # SPYRE_CI_LEASE_TTL: seconds a distributed shard's lease outlives its last heartbeat
    # (heartbeats every third of it, sweeps every half): about how long a dead worker's
    # shard waits for another worker.
    lease_ttl_s: float = 30.0
    # SPYRE_CI_TRACE: shards trace the variants without a fresh trace, and the traces are
    # stored beside History (`workflows.tracing.trace_store`); `off` records none.
    record_traces: bool = True
    # SPYRE_CI_TRACE_SHARE: the share of the other variants a run traces again (rotating).
    trace_share: float = 0.05
    # SPYRE_CI_GITHUB_URL, SPYRE_CI_GITHUB_TOKEN: the GitHub a plan asks for the old side of
    # a changed file this machine lacks (`workflows.stores.sources`); no token, no GitHub.
    github_url: str | None = None
    github_token: str = ""
    # SPYRE_CI_ZYGOTE: fork shard test processes from a warm zygote (`workflows/runner/zygote.py`);
    # `0` starts every one cold.
    zygote: bool = True
    # SPYRE_CI_WARM_IDLE_S: a zygote is shared by every process of this state directory and
    # ends once idle this long (`workflows.runner.warm_share`); `0`: each process's zygotes
    # end with it. SPYRE_CI_WARM_DIR: where the shared zygotes live (default: a private
    # folder per state directory under $XDG_RUNTIME_DIR or the temporary folder).
    warm_idle_s: float = 600.0
    warm_dir: Path | None = None
    # SPYRE_CI_WARM_MAX: shared zygotes alive at once per place (0.4-1 GB each); beyond it the
    # least recently used one not in use is stopped.
    warm_max: int = 4
    # SPYRE_CI_WARM_CLI: `spyre-ci run` forks from a warm `spyre-ci` process kept in the
    # same place (`workflows.cli.warm_cli`: its imports done, the trace and the Inventory
    # loaded); `0` runs every one in its own process. Off with sharing off too.
    warm_cli: bool = True
    # XDG_RUNTIME_DIR, else the temporary folder: where a folder of this user's holds the
    # shared zygotes of each state directory when SPYRE_CI_WARM_DIR does not say.
    runtime_dir: Path = Path(tempfile.gettempdir())
    # SPYRE_CI_BUILD_INDEX: where torch builds come from (a PEP 503 index URL, PyTorch's
    # nightly CPU index in production, or a folder of wheels): a run whose event has a base
    # sha is tested on the newest build at or before that base (`workflows.run.base_build`);
    # unset, the installed torch (and the prepared environments above) are used.
    build_index: str | None = None
    # SPYRE_CI_ENV_CACHE_MAX_GB: the environment cache's bound; least recently used
    # environments are removed before a new one would pass it.
    env_cache_max_bytes: int = 60 * 10**9

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
            cache_dir=absolute(env.get("SPYRE_CI_CACHE_DIR") or default_cache / "spyre-ci"),
            torch_builds=_path(env, "SPYRE_CI_TORCH_BUILDS"),
            callback_token=env.get("SPYRE_CI_CALLBACK_TOKEN", ""),
            lease_ttl_s=_seconds(env, "SPYRE_CI_LEASE_TTL", 30.0, 3.0, 3600.0),
            record_traces=_switch(env, "SPYRE_CI_TRACE"),
            trace_share=_number(
                env, "SPYRE_CI_TRACE_SHARE", 0.05, lambda v: 0.0 <= v <= 1.0, "a share in [0, 1]"
            ),
            github_url=env.get("SPYRE_CI_GITHUB_URL") or None,
            github_token=env.get("SPYRE_CI_GITHUB_TOKEN", ""),
            zygote=_switch(env, "SPYRE_CI_ZYGOTE"),
            warm_idle_s=_number(
                env, "SPYRE_CI_WARM_IDLE_S", 600.0, lambda v: 0 <= v <= 86400, "seconds, 0-86400"
            ),
            warm_dir=_path(env, "SPYRE_CI_WARM_DIR"),
            warm_max=int(
                _number(
                    env,
                    "SPYRE_CI_WARM_MAX",
                    4,
                    lambda v: v.is_integer() and 1 <= v <= 64,
                    "a whole number, 1-64",
                )  # fmt: skip
            ),
            warm_cli=_switch(env, "SPYRE_CI_WARM_CLI"),
            runtime_dir=absolute(env.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()),
            build_index=_build_index(env.get("SPYRE_CI_BUILD_INDEX", "")),
            env_cache_max_bytes=int(
                _number(env, "SPYRE_CI_ENV_CACHE_MAX_GB", 60.0, lambda v: v > 0, "GB, e.g. 60")
                * 10**9
            ),
        )


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process spyre-ci starts (a shard's pytest, the zygote, an
    expansion of specs against another torch tree): this process's own, inherited as it is,
    with `extra` over it. The one place below the entry points that copies `os.environ`: a
    module that asks what such a child will see (its PYTHONPATH, the pytest plugins it
    loads, whether it already says how many threads to use) asks it here."""
    return {**os.environ, **(extra or {})}


class SettingsError(BadInput, ValueError):
    """An environment variable holds a value it cannot mean; the message names it."""


def _switch(env: Mapping[str, str], name: str, default: bool = True) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"${name}={raw!r}: want on or off")


def _build_index(raw: str) -> str | None:
    """An index URL as given; a folder made absolute (a relative one means the directory
    the command was started in)."""
    raw = raw.strip()
    if not raw:
        return None
    return raw if "://" in raw else str(absolute(raw))


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    return absolute(raw) if raw else None


def _share(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, lambda v: 0.0 < v <= 1.0, "a share in (0, 1], e.g. 0.5")


def _seconds(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    want = f"seconds in [{low:g}, {high:g}], e.g. {default:g}"
    return _number(env, name, default, lambda v: low <= v <= high, want)


def _number(
    env: Mapping[str, str], name: str, default: float, fits: Callable[[float], bool], want: str
) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not fits(value):
        raise SettingsError(f"${name}={raw!r}: want {want}")
    return value
