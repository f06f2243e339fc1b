"""Selector ChangeSets from the example events or from made-up diffs."""

from __future__ import annotations

from pathlib import Path

from contracts.event import TriggerEvent
from relay.events import load_event_file
from selector import ChangeSet
from tests.testing.paths import EVENTS


def example_change(name: str) -> ChangeSet:
    """An example event as the CLI reads it: the payload plus its sibling patch, if any."""
    event = load_event_file(EVENTS / f"{name}.json")
    assert isinstance(event, TriggerEvent), event
    patch = EVENTS / f"{name}.patch"
    text = patch.read_text(encoding="utf-8") if patch.exists() else None
    return ChangeSet.from_event(event, text, diff_source=str(patch))


def diff_change(*paths: str, body: str = "") -> ChangeSet:
    """A diff touching `paths` with one trivial hunk each (or `body` as the whole diff)."""
    if body:
        return ChangeSet.from_diff(body, head_sha="f" * 40)
    text = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-old\n+new\n" for p in paths
    )
    return ChangeSet.from_diff(text, head_sha="f" * 40)


def write_patch(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path
