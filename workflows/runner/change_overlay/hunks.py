"""A diff's hunks hold the lines their headers count, checked before anything is applied:
a hand-edited or cut diff is bad input, named by file, hunk and line."""

from __future__ import annotations

import re

from selector import SelectorError
from selector.diff import repository_path, split_lines


class ChangeError(Exception):
    """The change cannot be applied as given: bad input (exit code 2). The message names the
    file and the hunk."""


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def check_hunk_counts(diff_text: str, source: str) -> None:
    """Every hunk holds exactly the lines its header counts (ChangeError otherwise, naming
    the file, the hunk and the diff's line): a hand-edited or cut diff is refused before
    anything is applied."""
    lines = split_lines(diff_text)[0]  # as the parser reads them
    current = "?"
    number = 0
    pos = 0
    while pos < len(lines):
        line = lines[pos]
        if line.startswith("diff --git "):
            current, number = _shown(line.split(" b/", 1)[-1]), 0
        elif line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            name = line[4:].split("\t", 1)[0].strip()
            current = _shown(name[2:] if name.startswith(("a/", "b/")) else name)
        match = _HUNK.match(line)
        if not match:
            pos += 1
            continue
        number += 1
        old = int(match.group(2) or 1) if match.group(2) != "0" else 0
        new = int(match.group(4) or 1) if match.group(4) != "0" else 0
        start, pos = pos, pos + 1
        seen_old = seen_new = 0
        while pos < len(lines):
            body = lines[pos]
            if body.startswith(("@@", "diff --git ")) or (
                body.startswith("--- ") and pos + 1 < len(lines) and lines[pos + 1][:4] == "+++ "
            ):
                break
            tag = body[:1]
            if tag == "\\":
                pass
            elif tag == "+":
                seen_new += 1
            elif tag == "-":
                seen_old += 1
            elif tag == " " or body == "":
                if body == "" and seen_old >= old and seen_new >= new:
                    break  # a blank line after a complete hunk: not part of it
                seen_old += 1
                seen_new += 1
            else:
                break
            pos += 1
        if (seen_old, seen_new) != (old, new):
            raise ChangeError(
                f"{source}:{start + 1}: {current}: hunk {number} ({line.split('@@')[1].strip()})"
                f" counts {old} old and {new} new lines but holds {seen_old} and {seen_new}: "
                "the diff is cut or was edited by hand; make it again with `git diff`"
            )


def _shown(name: str) -> str:
    """A diff's file name as the change's files are listed (the parser has refused the
    names it cannot resolve)."""
    try:
        return repository_path(name)
    except SelectorError:
        return name
