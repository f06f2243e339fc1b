"""The `--event FILE | --diff FILE.patch` input that `run` and `select` share, and the
argument types and checks every command uses for paths and numbers.

Paths are made absolute at the edge (`options.absolute_path`), against the directory the
command was started in: shard subprocesses, workers and `runs resume` run elsewhere, so
nothing inside ever sees a relative path. Numbers out of range (`options.RANGES`) are refused
(`checked`, exit 2) before anything is read or written.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.event import TriggerEvent
from workflows.cli.options import RANGES, absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings


@dataclass(frozen=True)
class ChangeInput:
    event: TriggerEvent | None  # None for a bare diff
    diff_text: str | None
    diff_source: str


def shown(path: Path) -> str:
    """`path` for a command line to type here: relative when under the current directory."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_config(args: argparse.Namespace) -> None:
    """A given `--config FILE` (the relay's YAML) must be a readable text file."""
    config = getattr(args, "config", None)
    if isinstance(config, Path) and config.exists():
        read_text(config, "relay config (YAML)")


def check_ranges(args: argparse.Namespace) -> None:
    """Refuse (CommandError, exit 2) every number of `args` that RANGES bounds and that is
    out of its range; nothing has been read or written yet."""
    for dest, (option, low, low_ok, high) in RANGES.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        shown_value = f"{value:g}" if isinstance(value, float) else str(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise CommandError(f"{option} {shown_value}: not a finite number")
        too_low = value < low if low_ok else value <= low
        if too_low or (high is not None and value > high):
            bound = (
                f"within [{low:g}, {high:g}]"
                if high is not None
                else f"{'at least' if low_ok else 'more than'} {low:g}"
            )
            raise CommandError(f"{option} {shown_value}: must be {bound}")


Command = Callable[[argparse.Namespace, Settings], int]  # a `func`: its arguments, settings


def checked(func: Command) -> Command:
    """`func` that first checks the numbers of its arguments (see RANGES) and `--config`."""

    @functools.wraps(func)
    def run_checked(args: argparse.Namespace, settings: Settings) -> int:
        check_ranges(args)
        check_config(args)
        return func(args, settings)

    return run_checked


COUNT_BUDGET_HELP = (
    "run at most N variants: the best selected ones and the holdout sample together (the "
    "holdout takes SHARE of N, more when the selection leaves room); failing and new "
    "variants always run, even past N"
)


def check_budget(args: argparse.Namespace) -> None:
    """A full run runs everything: a budget with it is refused, never silently dropped."""
    if args.full and (args.budget is not None or args.budget_time is not None):
        given = "--budget" if args.budget is not None else "--budget-time"
        raise CommandError(
            f"--full runs every variant, so {given} cannot bound it: give one or the other"
        )


def add_budget_arguments(parser: argparse.ArgumentParser, count_help: str) -> None:
    """`--budget N | --budget-time SECONDS` and `--holdout SHARE` (run and select)."""
    group = parser.add_mutually_exclusive_group()
    add_options(group, "budget", "budget_time", help={"budget": count_help})
    add_options(parser, "holdout")


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--event",
        type=absolute_path,
        metavar="FILE",
        help="a recorded delivery {event, delivery_id, payload} (see "
        "examples/events/); a sibling FILE.patch supplies the diff when the "
        "payload carries none",
    )
    source.add_argument(
        "--diff",
        type=absolute_path,
        metavar="FILE.patch",
        help="a unified diff (git diff) in PyTorch's repository layout",
    )


def read_source(args: argparse.Namespace) -> ChangeInput:
    """Read the event (and its sibling patch) or the diff; errors name the file."""
    from relay.events import Ignored, load_event_file

    if args.diff is not None:
        return ChangeInput(None, read_diff(args.diff), str(args.diff))
    event = load_event_file(args.event)
    if isinstance(event, Ignored):
        raise CommandError(f"{args.event}: this delivery triggers no run: {event.reason}")
    sibling = args.event.with_suffix(".patch")
    diff_text = read_diff(sibling) if sibling.exists() else None
    return ChangeInput(event, diff_text, str(sibling))


def read_diff(path: Path) -> str:
    """A unified diff that holds at least one file change; errors name the file and line."""
    from selector.diff import parse_unified_diff

    text = read_text(path, "diff")
    if not text.strip():
        raise CommandError(
            f"{path}: the diff is empty: it holds no file changes, so there "
            "is nothing to select (give the output of `git diff`)"
        )
    parsed = parse_unified_diff(text, str(path))
    if not parsed.files:
        raise CommandError(
            f"{path}: the diff holds no file changes (give the output of `git diff`)"
        )
    return text


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file; a missing, unreadable or binary file is a CommandError naming it."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise CommandError(f"{path}: is a directory, not {_a(what)}") from None
    except OSError as exc:
        raise CommandError(f"{path}: cannot read the {what}: {exc.strerror}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(
            f"{path}: not {_a(what)}: binary data (byte 0x{data[exc.start]:02x} "
            f"at offset {exc.start} is not UTF-8)"
        ) from None
    if "\0" in text:
        raise CommandError(
            f"{path}: not {_a(what)}: binary data (a NUL byte at offset {text.index(chr(0))})"
        )
    return text


def read_json(path: Path, what: str = "JSON file") -> Any:
    """Parsed JSON of a text file; errors name the file, line and column."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg} (expected: {what})"
        ) from exc
    except RecursionError:
        raise CommandError(f"{path}: not {_a(what)}: JSON nested too deep to read") from None


def read_impact_map(path: Path) -> Any:
    """The selector's ImpactMap from `spyre-ci impact-map` output (JSON or the compact
    `.json.gz`); errors name the file."""
    from workflows.tracing.traces import read_trace

    return read_trace(path)  # the one reader of the format checks every entry


def read_inventory(path: Path, option: str = "--inventory") -> Any:
    """The suites.model.Inventory saved at `path`; a missing or unreadable one names the file."""
    from suites.model import Inventory

    if not path.exists():
        raise CommandError(
            f"{path}: no inventory there ({option}); build one inside the torch environment "
            f"with `spyre-ci inventory --out {shown(path)}`, or pass --inventory FILE"
        )
    if path.is_dir():
        raise CommandError(f"{path}: is a directory, not an inventory ({option})")
    try:
        return Inventory.load(path)
    except (
        OSError,
        ValueError,
        KeyError,
        EOFError,
        TypeError,
        AttributeError,
        RecursionError,
    ) as exc:
        raise CommandError(
            f"{path}: not a readable inventory ({option}): {exc}; rebuild it "
            f"with `spyre-ci inventory --out {shown(path)}`"
        ) from exc


def check_out_dir(path: Path, option: str = "--out") -> None:
    """An output directory: absent (it is created) or a directory, never a file; and one
    this process can write (tried: permissions alone do not say it, for root or a read-only
    file system)."""
    if path.exists() and not path.is_dir():
        raise CommandError(
            f"{path}: exists and is not a directory ({option} names the "
            "directory the outputs go to)"
        )
    check_writable(path, option)


def check_writable(path: Path, what: str) -> None:
    """`path` is a folder this process can create and write into (CommandError naming it)."""
    outermost = next((p for p in [path, *path.parents] if p.parent.exists()), path)
    created = None if outermost.exists() else outermost  # the outermost folder made here
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".spyre-ci-probe-"):
            pass
    except OSError as exc:
        raise CommandError(
            f"{path}: cannot be written ({what}): {exc.strerror or exc}; give a folder "
            "this user can write"
        ) from None
    finally:
        if created is not None:  # a probe leaves nothing: the run makes it when it writes
            shutil.rmtree(created, ignore_errors=True)


STATE_DIR = "the state directory, $SPYRE_CI_STATE_DIR"


def state_dir(settings: Settings) -> Path:
    """The state directory, once it is known to be usable: a folder this process can create
    and write (History's SQLite file writes beside itself even to be read). Every command
    that reads or writes it asks here first, so one that cannot be used is bad input (exit 2,
    naming it) whichever command meets it; what fails after that is an outage (exit 3)."""
    check_writable(settings.state_dir, STATE_DIR)
    return settings.state_dir


def history_store(settings: Settings) -> Any:
    """The History `settings` name: Redis when a URL is set, else the SQLite file in the
    state directory (checked usable first, `state_dir`)."""
    from workflows.stores.history import open_history

    if settings.redis_url:
        return open_history(settings.state_dir, settings.redis_url)
    return open_history(state_dir(settings))


def check_specs(paths: Any, option: str = "--specs") -> None:
    """Every given spec file or folder exists."""
    for given in paths:
        if not Path(given).exists():
            raise CommandError(f"{given}: no such spec file or folder ({option})")


def _a(what: str) -> str:
    return f"{'an' if what[:1].lower() in 'aeiou' else 'a'} {what}"


def _json_kind(value: Any) -> str:
    return {
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def impact_map_path(given: Path | None, settings: Settings) -> str | None:
    """`--impact-map`, else $SPYRE_CI_IMPACT_MAP, as an absolute path; it must exist and
    read as an impact map (checked here, before anything is recorded)."""
    path = given or settings.impact_map
    if path is None:
        return None
    if not path.exists():
        raise CommandError(
            f"{path}: no impact map there; record one with `spyre-ci impact-map --out {path}`"
        )
    read_impact_map(path)
    return str(path.resolve())


def env_cache(args: argparse.Namespace, settings: Settings) -> Path:
    """`--cache-dir`, else `$SPYRE_CI_ENV_CACHE` (the settings'): where the per-version torch
    environments live."""
    found = args.cache_dir or settings.env_cache_dir
    if found is None:
        raise CommandError("no environment cache: give --cache-dir or set SPYRE_CI_ENV_CACHE")
    return Path(found)


def stderr_log(quiet: bool) -> Callable[[str], None]:
    """A progress logger on stderr, silent when `quiet` (`--no-progress`)."""

    def log(text: str) -> None:
        if not quiet:
            print(text, file=sys.stderr, flush=True)

    return log
