"""ChangeSet: what changed upstream, as the Scout reads it (paths, patches, messages, labels)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from contracts.event import TriggerEvent
from selector.diff import FilePatch, parse_unified_diff
from selector.plan_parts import ChangeNote


@dataclass(frozen=True)
class ChangedPath:
    path: str
    status: str  # added | modified | removed | renamed | copied
    previous_path: str | None = None


@dataclass(frozen=True)
class ChangeSet:
    """One upstream change. `complete` is False when the list of paths may be partial."""

    paths: tuple[ChangedPath, ...] = ()
    patches: Mapping[str, FilePatch] = field(default_factory=dict)  # by path
    complete: bool = True
    truncated: bool = False
    commit_messages: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    kind: str = "push"  # push | pull_request | nightly | periodic | rerun | diff
    head_sha: str = ""
    base_sha: str | None = None
    repo: str = "pytorch/pytorch"
    delivery_id: str = ""
    rerun: str | None = None  # "failed" | "full" | None, as TriggerEvent.rerun
    # Old-side text of changed files (the base version), by path: the Scout maps changed
    # lines to the definitions that hold them. Files not here are read from hunks alone.
    sources: Mapping[str, str] = field(default_factory=dict)

    def seed(self) -> str:
        """What seeds this change's holdout: its head sha, else a digest of what it changes
        (two different diffs without a sha draw different samples, so the holdout covers
        the Inventory over many runs; the same diff draws the same one)."""
        if self.head_sha and self.head_sha not in ("nosha", "unknown"):
            return self.head_sha
        digest = hashlib.sha256()
        for changed in sorted(self.paths, key=lambda p: p.path):
            digest.update(f"{changed.path}\0{changed.status}\0".encode())
            patch = self.patches.get(changed.path)
            if patch is not None:
                digest.update(repr(patch.hunks).encode())
        return "change-" + digest.hexdigest()[:16]

    def with_sources(self, sources: Mapping[str, str]) -> ChangeSet:
        """The same change, with old-side texts for (some of) its patched files."""
        return replace(self, sources={**self.sources, **sources})

    @classmethod
    def from_diff(
        cls,
        text: str,
        *,
        source: str = "<diff>",
        head_sha: str = "",
        base_sha: str | None = None,
        commit_messages: tuple[str, ...] = (),
        labels: tuple[str, ...] = (),
    ) -> ChangeSet:
        """A change known only by its unified diff (which lists every file it touches)."""
        parsed = parse_unified_diff(text, source)
        return cls(
            paths=tuple(ChangedPath(f.path, f.status, f.previous_path) for f in parsed.files),
            patches={f.path: f for f in parsed.files},
            complete=True,
            truncated=parsed.truncated,
            commit_messages=commit_messages,
            labels=labels,
            kind="diff",
            head_sha=head_sha,
            base_sha=base_sha,
            delivery_id=head_sha,
        )

    @classmethod
    def from_event(
        cls, event: TriggerEvent, diff_text: str | None = None, *, diff_source: str = "<diff>"
    ) -> ChangeSet:
        """A change from a trigger, with the diff of its whole range when one is known.

        A diff covers every file of the range, so it makes an incomplete file list complete
        (a pull request payload lists no files); paths only the event names are kept too.
        """
        paths = {f.path: ChangedPath(f.path, f.status, f.previous_path) for f in event.files}
        patches: dict[str, FilePatch] = {}
        complete = event.files_complete
        truncated = event.truncated
        if diff_text is not None:
            parsed = parse_unified_diff(diff_text, diff_source)
            for f in parsed.files:
                paths[f.path] = ChangedPath(f.path, f.status, f.previous_path)
                patches[f.path] = f
            complete = True
            truncated = truncated or parsed.truncated
        return cls(
            paths=tuple(paths.values()),
            patches=patches,
            complete=complete,
            truncated=truncated,
            commit_messages=event.commit_messages,
            labels=event.labels,
            kind=event.kind,
            head_sha=event.head_sha,
            base_sha=event.base_sha,
            repo=event.repo,
            delivery_id=event.delivery_id,
            rerun=event.rerun,
        )

    def summary(self) -> ChangeNote:
        """The digest a plan records (patches are not repeated)."""
        return ChangeNote(
            kind=self.kind,
            repo=self.repo,
            head_sha=self.head_sha,
            base_sha=self.base_sha,
            delivery_id=self.delivery_id,
            files=len(self.paths),
            files_with_patch=sum(1 for p in self.paths if p.path in self.patches),
            files_with_source=sum(1 for p in self.paths if p.path in self.sources),
            complete=self.complete,
            truncated=self.truncated,
            labels=tuple(self.labels),
        )
