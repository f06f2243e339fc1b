"""Command-line options shared by several commands, each declared once.

An option has its flags, type (the absolute-path converters below), default, range, the
`SPYRE_CI_*` variable that stands in when it is not given (named here, so the help names it)
and its help. A command adds options by name, overriding only what its meaning changes
(`help`, `default`), and never declares one of these flags itself:

    add_options(parser, "specs", "jobs", "test_timeout", "memory_mb")
    add_options(parser, "impact_map", help={"impact_map": "with --intake: ..."})

`RANGES`, by dest, is what `change_input.checked` refuses out of range (exit 2) before a
command reads or writes anything.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def absolute_path(text: str) -> Path:
    """argparse `type=`: the path as given, absolute against the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: a path cannot hold a NUL byte")
    return Path(os.path.abspath(os.path.expanduser(text)))


def absolute_str(text: str) -> str:
    """argparse `type=` for options kept as strings (`--specs`): an absolute path."""
    return str(absolute_path(text))


@dataclass(frozen=True)
class Range:
    """The numbers an option accepts: from `low` (itself allowed when `low_ok`) up to `high`."""

    low: float
    low_ok: bool = True
    high: float | None = None


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    action: str | None = None
    env: str | None = None  # the variable used when the option is not given
    range: Range | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def add_to(
        self, parser: argparse.ArgumentParser | Any, *, help: str | None = None, default: Any = None
    ) -> argparse.Action:
        kwargs: dict[str, Any] = dict(self.extra)
        if self.type is not None:
            kwargs["type"] = self.type
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        if self.action is not None:
            kwargs["action"] = self.action
        chosen = self.default if default is None else default
        kwargs["default"] = chosen() if callable(chosen) else chosen
        text = self.help if help is None else help
        if self.env and f"${self.env}" not in text:
            text = f"{text} (default ${self.env})"
        action: argparse.Action = parser.add_argument(*self.flags, help=text, **kwargs)
        return action


def _cpus() -> int:
    return os.cpu_count() or 1


def _no_specs() -> list[str]:
    return []  # a fresh list per parser: argparse's append would share a default one


OPTIONS: dict[str, Option] = {
    "specs": Option(
        ("--specs",),
        "spec file or folder (repeatable; default: the bundled specs)",
        type=absolute_str,
        default=_no_specs,
        metavar="PATH",
        action="append",
    ),
    "inventory": Option(
        ("--inventory",),
        "the Inventory to select from (default: built from "
        "the bundled specs for the installed torch, cached in the state "
        "directory)",
        type=absolute_path,
        metavar="FILE.json.gz",
    ),
    "impact_map": Option(
        ("--impact-map",),
        "per-variant torch functions and aten ops from `spyre-ci impact-map` (default: "
        "$SPYRE_CI_IMPACT_MAP, else the shipped trace of the Inventory's torch)",
        type=absolute_path,
        metavar="FILE.json[.gz]",
        env="SPYRE_CI_IMPACT_MAP",
    ),
    "no_trace": Option(
        ("--no-trace",),
        "join no trace (not even the shipped one): select by names, globs and History only",
        action="store_true",
        default=False,
    ),
    "jobs": Option(
        ("--jobs", "-j"),
        "pytest subprocesses at a time, at least 1 (default: CPU count)",
        type=int,
        default=_cpus,
        metavar="N",
        range=Range(1),
    ),
    "test_timeout": Option(
        ("--test-timeout",),
        "per-test time limit (default 300)",
        type=float,
        default=300.0,
        metavar="SECONDS",
        range=Range(0, low_ok=False),
    ),
    "memory_mb": Option(
        ("--memory-mb",),
        "address-space limit per test subprocess (default 8192)",
        type=int,
        default=8192,
        metavar="MB",
        range=Range(1),
    ),
    "config": Option(("--config",), "relay config YAML", type=absolute_path, metavar="FILE"),
    "no_progress": Option(
        ("--no-progress",), "no progress line", action="store_true", default=False
    ),
    # selection (run, select, upgrade-diff)
    "full": Option(("--full",), "select every variant", action="store_true", default=False),
    "budget": Option(("--budget",), "", type=int, metavar="N", range=Range(0)),
    "budget_time": Option(
        ("--budget-time",),
        "fit the selection into this much test time",
        type=float,
        metavar="SECONDS",
        range=Range(0),
    ),
    # Not given (None): the selector's default holdout, 2 % of the unselected with its cost
    # bounded by the selection's (selector.PlanConfig.holdout_time_share); given: that share.
    "holdout": Option(
        ("--holdout",),
        "share of unselected variants sampled to run apart to measure misses, within [0, 1]; "
        "given, that share runs whatever it costs (at least 30 variants); default: 0.02, cut "
        "to at most a quarter of the selection's estimated time (at least 10 variants)",
        type=float,
        metavar="SHARE",
        range=Range(0, high=1),
    ),
    "seed": Option(("--seed",), "holdout seed"),
    "shards": Option(
        ("--shards",),
        "split the run into N shards by historical durations",
        type=int,
        default=1,
        metavar="N",
        range=Range(1),
    ),
    # History and the run browser
    "limit": Option(("--limit",), "how many runs", type=int, metavar="N", range=Range(1)),
    "max_share": Option(
        ("--max-share",),
        "a run failing more than this share is suspect (default 0.5)",
        type=float,
        default=0.5,
        metavar="SHARE",
        range=Range(0, low_ok=False, high=1),
    ),
    "runs_dir": Option(
        ("--out",),
        "folder the relay serves (default: $SPYRE_CI_RUNS_DIR)",
        default=lambda: os.environ.get("SPYRE_CI_RUNS_DIR") or None,
        metavar="DIR",
        env="SPYRE_CI_RUNS_DIR",
    ),
    "env_cache": Option(
        ("--cache-dir",),
        "where the per-version environments live (default "
        "$SPYRE_CI_ENV_CACHE or ~/.cache/spyre-ci/envs)",
        type=absolute_path,
        metavar="DIR",
        env="SPYRE_CI_ENV_CACHE",
    ),
    # services: the relay's server and the workers
    "workers": Option(
        ("--workers",), "gunicorn worker processes", type=int, default=2, range=Range(1)
    ),
    "threads": Option(
        ("--threads",),
        "application threads per worker (default 4)",
        type=int,
        default=4,
        range=Range(1),
    ),
    "concurrency": Option(
        ("--concurrency", "-c"),
        "task processes (default: CPU count)",
        type=int,
        default=_cpus,
        metavar="N",
        range=Range(1),
    ),
}

# Numbers refused out of range, by argparse dest: (option, lowest, lowest allowed itself,
# highest). Derived from OPTIONS, so `run`, `select`, `upgrade-diff` and the rest agree.
RANGES: dict[str, tuple[str, float, bool, float | None]] = {
    name: (option.flags[0], option.range.low, option.range.low_ok, option.range.high)
    for name, option in OPTIONS.items()
    if option.range is not None
}


def add_options(
    parser: argparse.ArgumentParser | Any,
    *names: str,
    help: Mapping[str, str] | None = None,
    default: Mapping[str, Any] | None = None,
) -> None:
    """Add the named options (keys of OPTIONS) to `parser`, with per-command overrides; each
    argparse action keeps its name in OPTIONS as `option_name` (the help test reads it)."""
    for name in names:
        action = OPTIONS[name].add_to(
            parser, help=(help or {}).get(name), default=(default or {}).get(name)
        )
        setattr(action, OPTION_NAME, name)


OPTION_NAME = "option_name"
