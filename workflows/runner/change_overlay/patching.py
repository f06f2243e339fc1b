"""Apply a one-file unified diff to a text, exactly (context must match), as `patch` would."""

from __future__ import annotations

from collections.abc import Sequence

from selector.diff import FilePatch, Hunk

# A file's sections apply in the diff's order; `git log -p` prints the newest commit first.
_ORDER = (
    "are its sections in the order they were made? `git log -p --reverse` prints the "
    "oldest commit first"
)


class PatchError(Exception):
    """A hunk does not apply; the message names the hunk and the first differing line."""


def apply_patch(
    text: str,
    patch: FilePatch,
    *,
    fuzz_lines: int = 200,
    against: str = "the installed file",
    hint: str = "is this diff against another torch version?",
) -> str:
    """The text with every hunk of `patch` applied.

    Each hunk's old lines (context and removed) must match the text exactly, at the line the
    header names or within `fuzz_lines` of it (upstream moves code between releases; the
    offset is harmless, a content mismatch is not). A file the diff gives in several
    sections: each section's hunks over the text the sections before it made. `against`
    names the file a hunk that does not apply was looked for in, `hint` what may be wrong.
    """
    for group, hunks in enumerate(patch.in_order()):
        text = _apply_hunks(text, hunks, patch, group, fuzz_lines, (against, hint))
    return text


def _apply_hunks(
    text: str,
    hunks: Sequence[Hunk],
    patch: FilePatch,
    group: int,
    fuzz_lines: int,
    named: tuple[str, str],
) -> str:
    against, hint = named
    lines = text.splitlines(keepends=True)
    shift = 0
    section = patch.where(group)
    for number, hunk in enumerate(hunks, 1):
        old = [line[1:] for line in hunk.lines if line[:1] in " -"]
        new = [line[1:] for line in hunk.lines if line[:1] in " +"]
        want = hunk.old_start - 1 + shift
        at = _find(lines, old, want, fuzz_lines)
        if at is None:
            where = f"{against} ({hint})"
            if group:
                where = f"the text the sections before it made ({_ORDER})"
            elif patch.sections:
                where = f"{against} ({hint} {_ORDER})"
            raise PatchError(
                f"{patch.path}: {section + ', ' if section else ''}hunk {number} "
                f"(@@ -{hunk.old_start},{hunk.old_count} @@) does not apply: its lines "
                f"{hunk.old_start}..{hunk.old_start + len(old) - 1} are not in {where}"
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
