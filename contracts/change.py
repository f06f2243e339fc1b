"""The change under test as the run's records carry it: what of it was applied, and how much.

`workflows.runner.change_overlay` applies a change's Python files to the torch under test;
`workflows.run.under_test` judges what that tested (`contracts.tested.Tested`) from its state.
`ChangeNote` is the change as planned.json and run.json hold it, the codec
`workflows.run.run_model.ChangeUnderTest` writes through and the record `dashboard_export`
reads (the report's applied and not-applied files, the callback's change summary).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from contracts.codec import EMPTY, Record, wire

_SET = wire(omit=EMPTY)


class ChangeState(StrEnum):
    """How much of a change was applied: the `state` planned.json and run.json hold."""

    APPLIED = "applied"  # every file of it that changes torch
    PARTIAL = "partial"  # some of those files, not all
    NOT_APPLIED = "not_applied"  # none of them could be
    NONE = "none"  # nothing in the change touches the torch under test


@dataclass(frozen=True)
class FileNote(Record):
    """One changed file and what happened to it (`change_overlay.FileEffect`, as written);
    `module`, `previous_path` and `tree` are written only when set."""

    path: str
    status: str = "modified"  # added | modified | removed | renamed | copied
    why: str = ""  # what happened to it, in a few words
    module: str | None = field(default=None, metadata=_SET)  # the module an applied file is
    previous_path: str | None = field(default=None, metadata=_SET)
    # TREE_VAR for an upstream test file applied to the suites' checkout
    tree: str = field(default="", metadata=_SET)


@dataclass(frozen=True)
class ChangeNote(Record):
    """The change applied on the torch under test as planned.json and run.json carry it: its
    state, the files applied, not applied and without effect, the changed modules that do
    not compile, where its diff came from, and the event's base and head shas."""

    id: str = ""
    state: str = ""  # a ChangeState; "" when a record did not keep it
    applied: tuple[FileNote, ...] = ()
    not_applied: tuple[FileNote, ...] = ()
    no_effect: tuple[FileNote, ...] = ()
    broken: tuple[str, ...] = ()
    source: str = ""
    base_sha: str = ""
    head_sha: str = ""
    # Keys a record written by another version lacks (not written back) or has that this one
    # does not know (kept as read).
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> tuple[FileNote, ...]:
        """Every file the change names: applied, not applied, without effect."""
        return (*self.applied, *self.not_applied, *self.no_effect)
