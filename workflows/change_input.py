"""The `--event FILE | --diff FILE.patch` input that `run` and `select` share."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflows.cli import CommandError


@dataclass(frozen=True)
class ChangeInput:
    event: Any  # relay.events.TriggerEvent; None for a bare diff
    diff_text: str | None
    diff_source: str


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--event", type=Path, metavar="FILE",
                        help="a recorded delivery {event, delivery_id, payload} (see "
                        "examples/events/); a sibling FILE.patch supplies the diff when the "
                        "payload carries none")
    source.add_argument("--diff", type=Path, metavar="FILE.patch",
                        help="a unified diff (git diff) in PyTorch's repository layout")


def read_source(args: argparse.Namespace) -> ChangeInput:
    """Read the event (and its sibling patch) or the diff; errors name the file."""
    from relay.events import EventError, Ignored, load_event_file

    if args.diff is not None:
        return ChangeInput(None, read_text(args.diff, "diff"), str(args.diff))
    try:
        event = load_event_file(args.event)
    except EventError as exc:
        raise CommandError(str(exc)) from exc
    if isinstance(event, Ignored):
        raise CommandError(f"{args.event}: this delivery triggers no run: {event.reason}")
    sibling = args.event.with_suffix(".patch")
    diff_text = read_text(sibling, "diff") if sibling.exists() else None
    return ChangeInput(event, diff_text, str(sibling))


def read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{path}: cannot read the {what}: {exc.strerror}") from exc
