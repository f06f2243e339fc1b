"""Where a file's hunks go in a text, and the text they make (pure: text in, text out).

`selector.diff` reads a diff; this module applies it, for everybody: the Scout placing changed
lines in definitions (`selector.definitions.locate`), the old-source check of
`workflows.stores.sources` (does the file at hand match the diff?), the change overlay (a
change's Python files over the installed torch) and the bisect (a window's commits replayed).
`patched` (the selector's question: does it apply, and to what?) and `apply_patch` (the
overlay's: apply it, or say why not) are one placing, so the selector never plans on a text
the overlay does not make, nor places a file the overlay refuses.

The policy, "exact lines, nearest place, in order":

* **Lines compare exactly.** A line ends at "\\n"; a "\\r" right before it belongs to the
  ending, so a CRLF file matches the diff of its LF twin (and keeps its CRLF). Everything else
  is the line's: trailing white space counts, and a form feed or another Unicode line break
  inside a line does not end it (as for git and Python's tokenizer). A hunk's old lines
  (context and removed) must all equal the text's.
* **A hunk moves at most MAX_OFFSET lines.** It is looked for at the line its header names,
  shifted by as much as the hunk before it moved (code moves in blocks between versions),
  then nearest first, up and down, up to MAX_OFFSET lines away.
* **Hunks apply in order and never overlap.** Each starts at or after the end of the one
  before it in the old text (as GNU `patch` places them): a hunk never matches lines an
  earlier one wrote or consumed.
* **Ambiguity is refused.** A hunk whose lines match as near above as below where it is
  looked for (a context that appears twice) is refused rather than guessed; otherwise the
  nearest match wins.
* **A cut hunk is refused**: one that holds other line counts than its header's is half a
  change. An insertion-only hunk (`@@ -5,0 +6,2 @@`) goes after line 5.
* **Endings are the text's.** Kept lines keep theirs; an added line gets the text's (its
  first line's: CRLF or LF). The new text ends with a newline if the old one did (or was
  empty), unless a hunk that reaches the end carries `\\ No newline at end of file`: then
  its new side decides.
* **Errors name the file and the hunk**: PatchError, `PATH: [section N (line L of the
  diff), ]hunk K (@@ -A,B @@) does not apply: ...`, and say what was looked for where (and
  where the lines are when they are farther, or before the hunk above).
* A file given in several sections: each section over the text the ones before it made.

Why, where the two appliers this one replaces differed: each rule is the one that never
applies a hunk in a wrong place, and the selector takes the same answer. Trailing white space:
the selector ignored it, the overlay did not; ignoring it lets the overlay remove a line the
diff does not name (in a multi-line string, trailing white space is the string's). Distance:
the selector searched the whole file, the overlay 200 lines; farther, a few common lines
(`return x`, blank lines) are more likely another place than the same one moved. Order: the
overlay let a hunk land on or before what an earlier hunk wrote; the selector never went
back. Insertion-only hunks: the overlay put them one line early. Ambiguity and cut hunks:
both took the upper place, and applied what a cut hunk held (the overlay refused a cut diff
only when a user gave it, not an event's); now both refuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from selector.diff import FilePatch, Hunk, joined, split_lines
from selector.errors import SelectorError

MAX_OFFSET = 200  # lines a hunk may have moved from where its header (and the hunk before) put it

# A file's sections apply in the diff's order; `git log -p` prints the newest commit first.
_ORDER = (
    "are its sections in the order they were made? `git log -p --reverse` prints the "
    "oldest commit first"
)
_AGAINST = "the installed file"
_HINT = "is this diff against another torch version?"


class PatchError(SelectorError):
    """A hunk does not apply; the message names the file, the hunk and why."""


@dataclass(frozen=True)
class Applied:
    """A patch applied: the new text, and the lines the change is made of (from 1)."""

    text: str
    removed: tuple[int, ...] = ()  # old-side lines it removes
    added: tuple[int, ...] = ()  # new-side lines it adds
    neighbours: tuple[int, ...] = ()  # old-side lines next to an insertion


def apply_patch(text: str, patch: FilePatch, *, against: str = _AGAINST, hint: str = _HINT) -> str:
    """The text with every hunk of `patch` applied (PatchError when one does not apply).
    `against` names the text in errors, `hint` what may be wrong."""
    for group, hunks in enumerate(patch.in_order()):
        text = _apply(text, hunks, _Named(patch, group, against, hint)).text
    return text


def patched(text: str, patch: FilePatch) -> Applied | None:
    """`patch` applied to `text` as `apply_patch` applies it, with its changed lines; None
    where `apply_patch` raises. A file given in several sections: the lines of the change
    they make together."""
    try:
        if not patch.sections:
            return _apply(text, patch.hunks, _Named(patch, 0))
        new = apply_patch(text, patch)
        together = _apply(text, joined(patch, text, new).hunks, _Named(patch, 0))
        return replace(together, text=new)
    except PatchError:
        return None


@dataclass(frozen=True)
class _Named:
    """How an error names the hunks of one section of a file."""

    patch: FilePatch
    group: int
    against: str = _AGAINST
    hint: str = _HINT

    def error(self, number: int, hunk: Hunk, why: str) -> PatchError:
        section = self.patch.where(self.group)
        return PatchError(
            f"{self.patch.path}: {section + ', ' if section else ''}hunk {number} "
            f"(@@ -{hunk.old_start},{hunk.old_count} @@) does not apply: {why}"
        )

    @property
    def text(self) -> str:
        """The text the hunks are looked for in."""
        return self.against if not self.group else "the text the sections before it made"

    @property
    def where(self) -> str:
        """That text, with what may be wrong when a hunk is not in it."""
        if self.group:
            return f"{self.text} ({_ORDER})"
        if self.patch.sections:
            return f"{self.against} ({self.hint} {_ORDER})"
        return f"{self.against} ({self.hint})"


def _apply(text: str, hunks: Sequence[Hunk], named: _Named) -> Applied:
    rows, ends = split_lines(text)
    eol = next((end for end in ends if end), "\n")
    out: list[str] = []
    out_ends: list[str] = []  # "" for an added line: it takes `eol`
    removed: list[int] = []
    added: list[int] = []
    neighbours: list[int] = []
    final_newline = not ends or bool(ends[-1])
    pos = 0  # index into `rows` of the next line not yet copied
    shift = 0  # how far the hunk before moved from its header's line
    for number, hunk in enumerate(hunks, 1):
        old = [line[1:] for line in hunk.lines if line[:1] in " -"]
        _check_counts(hunk, number, named)
        header = hunk.old_start - 1 if hunk.old_count else hunk.old_start
        want = min(max(header + shift, 0), len(rows))
        found = _place(rows, old, want, pos)
        if len(found) != 1:
            raise named.error(number, hunk, _refused(rows, hunk, (want, pos), found, named))
        at = found[0]
        shift = at - header
        out += rows[pos:at]
        out_ends += ends[pos:at]
        pos = at
        for line in hunk.lines:
            tag = line[:1]
            if tag == "+":
                out.append(line[1:])
                out_ends.append("")
                added.append(len(out))
                neighbours.extend(n for n in (pos, pos + 1) if 1 <= n <= len(rows))
                continue
            if tag == " ":
                out.append(rows[pos])
                out_ends.append(ends[pos])
            else:
                removed.append(pos + 1)
            pos += 1
        if pos == len(rows) and (hunk.old_lacks_newline or hunk.new_lacks_newline):
            final_newline = not hunk.new_lacks_newline
    out += rows[pos:]
    out_ends += ends[pos:]
    if out:
        out_ends = [end or eol for end in out_ends]
        out_ends[-1] = out_ends[-1] if final_newline else ""
    return Applied(
        "".join(line + end for line, end in zip(out, out_ends, strict=True)),
        tuple(sorted(set(removed))),
        tuple(sorted(set(added))),
        tuple(sorted(set(neighbours))),
    )


def _check_counts(hunk: Hunk, number: int, named: _Named) -> None:
    old = sum(1 for line in hunk.lines if line[:1] in " -")
    new = sum(1 for line in hunk.lines if line[:1] in " +")
    if (old, new) != (hunk.old_count, hunk.new_count):
        raise named.error(
            number,
            hunk,
            f"it holds {old} old and {new} new lines where its header counts "
            f"{hunk.old_count} and {hunk.new_count} (the diff was cut; make it again)",
        )


def _place(rows: list[str], old: list[str], want: int, floor: int) -> list[int]:
    """The nearest places to `want`, within MAX_OFFSET lines and at or after `floor`, where
    `old` stands in `rows`: one, two equally near (above and below), or none."""
    last = len(rows) - len(old)  # the last place `old` fits in

    def fits(at: int) -> bool:
        return floor <= at <= last and all(rows[at + i] == line for i, line in enumerate(old))

    for offset in range(MAX_OFFSET + 1):
        found = sorted(at for at in {want - offset, want + offset} if fits(at))
        if found or (want - offset < floor and want + offset > last):
            return found
    return []


def _refused(
    rows: list[str], hunk: Hunk, near: tuple[int, int], found: list[int], named: _Named
) -> str:
    """Why `hunk`, looked for near line index `want` and at or after `floor` (`near`), is not
    placed; `found` is `_place`'s answer."""
    want, floor = near
    old = [line[1:] for line in hunk.lines if line[:1] in " -"]
    if found:
        return (
            f"its lines match {named.text} at lines {found[0] + 1} and {found[1] + 1}, both "
            f"{want - found[0]} lines from line {want + 1}: which one it changes is not "
            "known; give the diff with more context (`git diff -U10`)"
        )
    count, start = len(old), hunk.old_start
    if not count:  # an insertion fits anywhere after the hunk above it
        return f"it inserts after line {start}, before the end of the hunk above it"
    why = f"its lines {start}..{start + count - 1} are not in {named.where}"
    elsewhere = [
        at
        for at in range(len(rows) - count + 1)
        if rows[at] == old[0] and rows[at : at + count] == old
    ]
    if not elsewhere:
        return why
    at = min(elsewhere, key=lambda a: abs(a - want))
    if at < floor:
        return f"{why}; they are at line {at + 1}, before the end of the hunk above it"
    return f"{why}; they are at line {at + 1}, farther than {MAX_OFFSET} lines from line {want + 1}"
