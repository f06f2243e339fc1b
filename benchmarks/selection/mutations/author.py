"""Writing mutations: a git-style diff of a Python edit to the installed torch sources.

Hunk headers carry the function context git's built-in `python` diff driver prints (the
nearest `def` or `class` line above the hunk), as upstream diffs from GitHub do.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from benchmarks.selection.mutations.model import MutationError, torch_root

_PY_FUNCNAME = re.compile(r"^[ \t]*((class|(async[ \t]+)?def)[ \t].*)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def python_diff(
    repo_path: str, old: str, new: str, root: Path | None = None, occurrence: int = 1
) -> str:
    """The unified diff replacing the `occurrence`-th `old` snippet of `repo_path` by `new`."""
    text = ((root or torch_root()) / repo_path).read_text(encoding="utf-8")
    start = -1
    for _ in range(occurrence):
        start = text.find(old, start + 1)
        if start < 0:
            raise MutationError(f"{repo_path}: snippet not found: {old[:60]!r}")
    mutated = text[:start] + new + text[start + len(old) :]
    return git_diff(repo_path, text, mutated)


def git_diff(repo_path: str, before: str, after: str, context: int = 3) -> str:
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lines = [f"diff --git a/{repo_path} b/{repo_path}\n"]
    for line in difflib.unified_diff(a, b, f"a/{repo_path}", f"b/{repo_path}", n=context):
        match = _HUNK.match(line)
        if match:
            first = int(match.group(1)) - 1  # 0-based index of the hunk's first old line
            line = line.rstrip("\n") + _context(a, first) + "\n"
        elif line.startswith(("---", "+++")):
            line = line.rstrip() + "\n"
        lines.append(line if line.endswith("\n") else line + "\n")
    return "".join(lines)


def _context(lines: list[str], first: int) -> str:
    for index in range(first - 1, -1, -1):
        match = _PY_FUNCNAME.match(lines[index].rstrip("\n"))
        if match:
            return " " + match.group(1).rstrip()[:80]
    return ""
