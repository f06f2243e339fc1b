"""Old-side sources of a change: the text of each patched file at the base version, for the
Scout's line-level facts (`selector.definitions`).

Where a file is read from, first match wins:

1. the installed torch of the Inventory's version (`torch/...` paths: the wheel carries the
   Python sources in the repository's layout), when its version is the Inventory's;
2. nothing: the Scout falls back to the diff text alone (hunk headers and changed lines),
   and the plan says which files were placed by source and which by hunks.

A file that does not match the patch (the installed version differs from the base) is
detected by the Scout itself: the patch does not apply, and hunks are used.

    change = with_old_sources(change, torch_version="2.13.0")
"""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path, PurePosixPath

import selector

# Files larger than this are not read (the largest torch source, the OpInfo database, is
# about 1 MB).
MAX_SOURCE_BYTES = 8 * 1024 * 1024


@lru_cache(maxsize=1)
def installed_torch() -> tuple[Path | None, str]:
    """(the directory holding the installed `torch` package, its version), without importing
    torch; (None, "") when torch is not installed."""
    spec = find_spec("torch")
    if spec is None or spec.origin is None:
        return None, ""
    try:
        version = metadata.version("torch").split("+", 1)[0]
    except metadata.PackageNotFoundError:
        version = ""
    return Path(spec.origin).resolve().parent.parent, version


def installed_source(path: str, root: Path) -> str | None:
    """The text of repository path `path` under `root` (the installed torch), or None."""
    parts = PurePosixPath(path).parts
    if not parts or parts[0] != "torch" or ".." in parts or PurePosixPath(path).is_absolute():
        return None
    file = root.joinpath(*parts)
    try:
        if not file.is_file() or file.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def with_old_sources(
    change: selector.ChangeSet, *, torch_version: str = "", root: Path | None = None
) -> selector.ChangeSet:
    """`change` with the old-side texts this machine has for its patched files.

    `torch_version`: the Inventory's torch; the installed sources are used only when the
    installed torch is that version (empty: whatever is installed). `root` overrides where
    torch is found (tests)."""
    if not change.patches:
        return change
    installed, version = installed_torch()
    root = root or installed
    if root is None or (torch_version and root == installed and version != torch_version):
        return change
    sources: dict[str, str] = {}
    for path, patch in change.patches.items():
        if path in change.sources or patch.status == "added" or not patch.hunks:
            continue
        text = installed_source(patch.previous_path or path, root)
        if text is not None:
            sources[path] = text
    return change.with_sources(sources) if sources else change
