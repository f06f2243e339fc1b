"""The window's commits and what each does to the installed torch: which can be replayed
without a build, and the torch of each point of the window as one cumulative diff.

A commit is replayable when every file it changes is a Python module of the installed torch
(applied by the change overlay) or outside it (no effect); a file only a build brings
(C++/CUDA, codegen input, build file), a non-module file of the package, or a module GitHub
sent no patch for makes it not replayable. A commit kept from it only by files that need a
build is replayed by assumption (`Commit.assumed`): its Python part is applied, its build
part skipped, assuming that part does not change the outcome. Point `k` of a window is its
base with commits `0..k-1` applied: the diff of each file from the installed text to its
text after those commits, patches applied in sequence (`state_diff`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selector import SelectorError
from selector.diff import compare_patch_text, parse_unified_diff, split_lines
from selector.patches import PatchError, apply_patch
from workflows.runner.change_overlay import file_kind


@dataclass(frozen=True)
class Commit:
    """One commit of the window; `why` says what keeps a commit from being replayed;
    `assumed` names the files that need a build when they alone do (its Python part is then
    replayed, its build part skipped)."""

    sha: str
    message: str
    author: str
    entries: tuple[Mapping[str, Any], ...]
    replayable: bool
    why: str = ""
    assumed: str = ""

    @property
    def replays(self) -> bool:
        """Its Python part can be replayed: all of it, or by assumption."""
        return self.replayable or bool(self.assumed)

    @property
    def has_python(self) -> bool:
        """It changes a Python module of the installed torch (a point it adds differs)."""
        return any(_is_module(e) for e in self.entries)

    @property
    def title(self) -> str:
        return self.message.strip().splitlines()[0] if self.message.strip() else "(no message)"

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(str(e.get("filename")) for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {
            "sha": self.sha,
            "title": self.title,
            "author": self.author,
            "files": list(self.paths),
            "replayable": self.replayable,
            **({"why": self.why} if self.why else {}),
            **({"assumed": self.assumed} if self.assumed else {}),
        }


def classify(sha: str, message: str, author: str, entries: Sequence[Mapping[str, Any]]) -> Commit:
    """The commit with whether it can be replayed on the installed torch, or by assumption
    when only files that need a build keep it from it (pure: by path)."""
    blocking = []
    build: list[str] = []  # the files needing a build, when nothing else blocks
    for entry in entries:
        path = str(entry.get("filename") or "")
        kinds = {file_kind(path)} | (
            {file_kind(str(entry["previous_filename"]))}
            if entry.get("previous_filename")
            else set()
        )
        if kinds <= {"outside"}:
            continue
        if "build" in kinds and kinds <= {"build", "outside"}:
            blocking.append(f"{path} needs a build")
            build.append(path)
        elif "build" in kinds:  # renamed from or to a Python module or a package file
            blocking.append(f"{path} needs a build (and replaces a file of the package)")
        elif "other" in kinds:
            blocking.append(f"{path} is not a Python module (only a build or install brings it)")
        elif not (isinstance(entry.get("patch"), str) and entry.get("patch")) and not (
            entry.get("status") == "renamed" and not entry.get("changes")
        ):
            blocking.append(f"{path}: GitHub sent no patch of it")
    why = "; ".join(blocking[:3]) + (f"; and {len(blocking) - 3} more" if len(blocking) > 3 else "")
    assumed = ""
    if blocking and len(build) == len(blocking):
        assumed = ", ".join(build[:3]) + (f" and {len(build) - 3} more" if len(build) > 3 else "")
    return Commit(sha, message, author, tuple(entries), not blocking, why, assumed)


def replayable_prefix(commits: Sequence[Commit], torch_root: Path) -> tuple[int, str]:
    """How many commits from the start can be replayed in sequence on the installed torch
    (those replayed by assumption too: their Python part), and why the next one cannot (""
    when all can). A commit whose patch does not apply to the text its predecessors left is
    not replayable either (the installed torch is not the window's base, or GitHub's patch is
    not the commit's whole change)."""
    texts: dict[str, str | None] = {}
    for index, commit in enumerate(commits):
        if not commit.replays:
            return index, commit.why
        try:
            _apply(commit, texts, torch_root)
        except PatchError as exc:
            return index, f"its patch does not apply to the installed torch: {exc}"
    return len(commits), ""


def state_diff(commits: Sequence[Commit], k: int, torch_root: Path) -> str:
    """The unified diff from the installed torch to point `k` of the window (commits
    `0..k-1` applied in sequence); "" for the base. The commits must be replayable (their
    Python part: the build part of one replayed by assumption is skipped)."""
    texts: dict[str, str | None] = {}
    for commit in commits[:k]:
        _apply(commit, texts, torch_root)
    out: list[str] = []
    for path in sorted(texts):
        before = _installed(torch_root, path)
        after = texts[path]
        if before == after:
            continue
        old_name = f"a/{path}" if before is not None else "/dev/null"
        new_name = f"b/{path}" if after is not None else "/dev/null"
        out.append(f"diff --git a/{path} b/{path}\n")
        if before is None:
            out.append("new file mode 100644\n")
        elif after is None:
            out.append("deleted file mode 100644\n")
        out += difflib.unified_diff(
            _lines(before or ""), _lines(after or ""), old_name, new_name, n=3
        )
    return "".join(out)


def _apply(commit: Commit, texts: dict[str, str | None], root: Path) -> None:
    """Apply the commit's Python modules' patches to `texts` (path -> text, None: deleted)."""
    wanted = [dict(e) for e in commit.entries if _is_module(e)]
    if not wanted:
        return
    try:
        parsed = parse_unified_diff(compare_patch_text(wanted), f"commit {commit.sha[:12]}")
    except SelectorError as exc:
        raise PatchError(f"commit {commit.sha[:12]}: {exc}") from None
    for patch in parsed.files:
        source = patch.previous_path or patch.path
        current = "" if patch.status == "added" else texts.get(source, _installed(root, source))
        if current is None:
            raise PatchError(f"{source}: not in the installed torch (or removed before)")
        new_text = apply_patch(current, patch) if patch.hunks else current
        if patch.status == "removed":
            texts[patch.path] = None
            continue
        if patch.previous_path and patch.previous_path != patch.path:
            texts[patch.previous_path] = None
        texts[patch.path] = new_text


def _is_module(entry: Mapping[str, Any]) -> bool:
    paths = [str(entry.get("filename") or "")]
    if entry.get("previous_filename"):
        paths.append(str(entry["previous_filename"]))
    return any(file_kind(p) == "python" for p in paths)


def _installed(root: Path, path: str) -> str | None:
    try:
        return (root / path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _lines(text: str) -> list[str]:
    """The text's lines for difflib, as the engine counts them (a form feed ends none)."""
    return [line + "\n" for line in split_lines(text)[0]]
