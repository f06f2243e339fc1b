"""Apply a one-file unified diff to a text, exactly (context must match), as `patch` would."""

from __future__ import annotations

from selector.diff import FilePatch


class PatchError(Exception):
    """A hunk does not apply; the message names the hunk and the first differing line."""


def apply_patch(text: str, patch: FilePatch, *, fuzz_lines: int = 200) -> str:
    """The text with every hunk of `patch` applied.

    Each hunk's old lines (context and removed) must match the text exactly, at the line the
    header names or within `fuzz_lines` of it (upstream moves code between releases; the
    offset is harmless, a content mismatch is not).
    """
    lines = text.splitlines(keepends=True)
    shift = 0
    for number, hunk in enumerate(patch.hunks, 1):
        old = [line[1:] for line in hunk.lines if line[:1] in " -"]
        new = [line[1:] for line in hunk.lines if line[:1] in " +"]
        want = hunk.old_start - 1 + shift
        at = _find(lines, old, want, fuzz_lines)
        if at is None:
            raise PatchError(
                f"{patch.path}: hunk {number} (@@ -{hunk.old_start},{hunk.old_count} @@) does "
                f"not apply: its lines {hunk.old_start}..{hunk.old_start + len(old) - 1} are "
                "not in the installed file (is this diff against another torch version?)"
            )
        eol = "\n"
        lines[at : at + len(old)] = [line + eol for line in new]
        shift += len(new) - len(old) + (at - want)
    return "".join(lines)


def _find(lines: list[str], old: list[str], want: int, fuzz: int) -> int | None:
    stripped = [line.rstrip("\n").rstrip("\r") for line in lines]
    for delta in range(fuzz + 1):
        for at in (want - delta, want + delta) if delta else (want,):
            if 0 <= at <= len(stripped) - len(old) and stripped[at : at + len(old)] == old:
                return at
    return None
