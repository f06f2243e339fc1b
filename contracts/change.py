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
from typing import Any, ClassVar


class ChangeState(StrEnum):
    """How much of a change was applied: the `state` planned.json and run.json hold."""

    APPLIED = "applied"  # every file of it that changes torch
    PARTIAL = "partial"  # some of those files, not all
    NOT_APPLIED = "not_applied"  # none of them could be
    NONE = "none"  # nothing in the change touches the torch under test


@dataclass(frozen=True)
class FileNote:
    """One changed file and what happened to it (`change_overlay.FileEffect`, as written)."""

    path: str
    status: str  # added | modified | removed | renamed | copied
    why: str  # what happened to it, in a few words
    module: str | None = None  # the module an applied file is
    previous_path: str | None = None
    tree: str = ""  # TREE_VAR for an upstream test file applied to the suites' checkout

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "status": self.status, "why": self.why}
        if self.module:
            data["module"] = self.module
        if self.previous_path:
            data["previous_path"] = self.previous_path
        if self.tree:
            data["tree"] = self.tree
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileNote:
        return cls(
            str(data["path"]),
            str(data.get("status", "modified")),
            str(data.get("why", "")),
            data.get("module"),
            data.get("previous_path"),
            str(data.get("tree") or ""),
        )


@dataclass(frozen=True)
class ChangeNote:
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

    KEYS: ClassVar[tuple[str, ...]] = (
        *("id", "state", "applied", "not_applied", "no_effect", "broken"),
        *("source", "base_sha", "head_sha"),
    )

    @property
    def files(self) -> tuple[FileNote, ...]:
        """Every file the change names: applied, not applied, without effect."""
        return (*self.applied, *self.not_applied, *self.no_effect)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "state": self.state,
            "applied": [f.to_json() for f in self.applied],
            "not_applied": [f.to_json() for f in self.not_applied],
            "no_effect": [f.to_json() for f in self.no_effect],
            "broken": list(self.broken),
            "source": self.source,
            "base_sha": self.base_sha,
            "head_sha": self.head_sha,
        }
        return {**{k: v for k, v in data.items() if k not in self.missing}, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChangeNote:
        def files(name: str) -> tuple[FileNote, ...]:
            return tuple(FileNote.from_json(f) for f in data.get(name) or ())

        return cls(
            str(data.get("id") or ""),
            str(data.get("state") or ""),
            files("applied"),
            files("not_applied"),
            files("no_effect"),
            tuple(str(b) for b in data.get("broken") or ()),
            str(data.get("source") or ""),
            str(data.get("base_sha") or ""),
            str(data.get("head_sha") or ""),
            missing=frozenset(cls.KEYS) - data.keys(),
            extra={k: v for k, v in data.items() if k not in cls.KEYS},
        )
