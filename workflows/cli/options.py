"""Command-line options shared by several commands, each declared once.

An option has its flags, type (the absolute-path converters of `workflows.cli.change_input`),
default, the `SPYRE_CI_*` variable that stands in when it is not given (read by
`workflows.settings`, named here for the help) and its help. A command adds options by name,
overriding only what its meaning changes (`help`, `default`):

    add_options(parser, "specs", "jobs", "test_timeout", "memory_mb")
    add_options(parser, "impact_map", help={"impact_map": "with --intake: ..."})

Numbers are range-checked in one table too (`change_input.RANGES`, by dest).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workflows.cli.change_input import absolute_path, absolute_str


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    action: str | None = None
    env: str | None = None  # the variable used when the option is not given (Settings)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def add_to(
        self, parser: argparse.ArgumentParser | Any, *, help: str | None = None, default: Any = None
    ) -> None:
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
        parser.add_argument(*self.flags, help=text, **kwargs)


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
    ),
    "test_timeout": Option(
        ("--test-timeout",),
        "per-test time limit (default 300)",
        type=float,
        default=300.0,
        metavar="SECONDS",
    ),
    "memory_mb": Option(
        ("--memory-mb",),
        "address-space limit per test subprocess (default 8192)",
        type=int,
        default=8192,
        metavar="MB",
    ),
    "config": Option(("--config",), "relay config YAML", type=absolute_path, metavar="FILE"),
    "no_progress": Option(
        ("--no-progress",), "no progress line", action="store_true", default=False
    ),
}


def add_options(
    parser: argparse.ArgumentParser | Any,
    *names: str,
    help: Mapping[str, str] | None = None,
    default: Mapping[str, Any] | None = None,
) -> None:
    """Add the named options (keys of OPTIONS) to `parser`, with per-command overrides."""
    for name in names:
        OPTIONS[name].add_to(parser, help=(help or {}).get(name), default=(default or {}).get(name))
