"""A unified-diff parser for `git diff` / GitHub compare output (pure: text in, records out).

Understands `diff --git` headers, renames and copies, new and deleted files, binary files,
and hunks with the function context git prints after the second `@@`. A hunk that ends
before its header's line counts are used up marks the diff as truncated (GitHub cuts long
diffs that way), which the Scout treats as an incomplete change.

This is the one reading of a diff that the selector and the change overlay share, so what is
selected and what is applied are the same files and the same hunks:

* every file name is a repository path, `.`/`..` parts and doubled `/` resolved
  (`torch/../torch/x.py` is `torch/x.py`); a name that is absolute or leads out of the
  repository is refused;
* a file the diff gives in several sections (`git log -p --reverse` prints one per commit,
  or two diffs put together) is one `FilePatch` whose sections apply in the diff's order,
  each over the text the ones before it made (`FilePatch.in_order`; `diff_sections` joins
  them); an order no text can follow (a section that changes a file an earlier one deleted)
  is refused, naming the file and the sections;
* a line ends at "\\n" only (`split_lines`: a "\\r" before it is part of the ending, a form
  feed inside a line is not a break), in a diff as in the texts `selector.patches` applies
  its hunks to.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from selector.errors import SelectorError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_GIT_HEADER = re.compile(r"^diff --git (?:\"?a/(.+?)\"?) (?:\"?b/(.+?)\"?)$")


@dataclass(frozen=True)
class Hunk:
    """One `@@` block: header numbers, git's function context, and its lines."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    context: str  # text after the second `@@` (enclosing function or YAML entry), may be ""
    lines: tuple[str, ...]  # each starts with " ", "+" or "-" (a "\" marker line is dropped)
    # `\ No newline at end of file` after its last old (context or removed) line, or its last
    # new (context or added) line: that side's file ends there without a newline. Not in the
    # repr: a change's holdout seed digests its hunks' repr (`ChangeSet.seed`).
    old_lacks_newline: bool = field(default=False, repr=False)
    new_lacks_newline: bool = field(default=False, repr=False)

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(line[1:] for line in self.lines if line.startswith("+"))

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(line[1:] for line in self.lines if line.startswith("-"))


@dataclass(frozen=True)
class Section:
    """One of the sections a diff gives one file in: where it starts in the diff (its line)
    and the index of its first hunk in `FilePatch.hunks`."""

    line: int
    start: int


@dataclass(frozen=True)
class FilePatch:
    """The diff of one file; `hunks` are all of its hunks, in the diff's order."""

    path: str  # new path ("b/"), or the old one for a deleted file
    status: str  # added | modified | removed | renamed | copied
    previous_path: str | None = None
    hunks: tuple[Hunk, ...] = ()
    binary: bool = False
    # A file given in several sections: one per section, in order (empty when given once).
    sections: tuple[Section, ...] = field(default=())

    def in_order(self) -> tuple[tuple[Hunk, ...], ...]:
        """The hunks, one group per section: each group applies to the text the groups
        before it made (its line numbers are that text's), the first to the old file."""
        if not self.sections:
            return (self.hunks,)
        starts = [s.start for s in self.sections] + [len(self.hunks)]
        return tuple(self.hunks[a:b] for a, b in zip(starts, starts[1:], strict=False))

    def where(self, group: int) -> str:
        """`section N (line L of the diff)` for hunk group `group` (from 0) of a file given
        in several sections; "" for a file given once."""
        if not self.sections:
            return ""
        return f"section {group + 1} (line {self.sections[group].line} of the diff)"


@dataclass(frozen=True)
class ParsedDiff:
    files: tuple[FilePatch, ...]
    truncated: bool = False


def parse_unified_diff(text: str, source: str = "<diff>") -> ParsedDiff:
    """Parse `git diff` output (several files); `source` names the input in errors."""
    sections: list[tuple[int, FilePatch]] = []  # (the diff's line of its header, the patch)
    truncated = False
    lines = split_lines(text)[0]
    pos = 0
    # Anything before the first file header (a `git format-patch` mail header) is skipped.
    while pos < len(lines) and not _starts_file(lines, pos):
        pos += 1
    while pos < len(lines):
        line = pos + 1
        patch, pos, cut = _parse_file(lines, pos, source)
        sections.append((line, patch))
        truncated = truncated or cut
    if not sections and text.strip():
        raise SelectorError(
            f"{source}: no `diff --git` or `---`/`+++` file header found; give the output of "
            "`git diff` (or a GitHub `.diff`)"
        )
    from selector.diff_sections import one_per_file  # it builds on this module's records

    return ParsedDiff(one_per_file(sections, source), truncated)


def split_lines(text: str) -> tuple[list[str], list[str]]:
    """(lines, their endings) of a text, as git counts lines: a line ends at "\\n", a "\\r"
    right before it is part of the ending ("\\r\\n"); the last line's ending is "" when the
    text does not end with "\\n". A form feed or another Unicode line break inside a line
    does not end it (`str.splitlines` would)."""
    pieces = text.split("\n")
    tail = pieces.pop()  # what follows the last newline: "" or a line without an ending
    lines: list[str] = []
    endings: list[str] = []
    for piece in pieces:
        crlf = piece.endswith("\r")
        lines.append(piece[:-1] if crlf else piece)
        endings.append("\r\n" if crlf else "\n")
    if tail:
        lines.append(tail)
        endings.append("")
    return lines, endings


def repository_path(name: str, where: str = "<diff>") -> str:
    """The repository path a diff's file name means: `.` parts, doubled `/` and `..` parts
    resolved (`./torch//nn/../nn/f.py` is `torch/nn/f.py`). An absolute name, or one whose
    `..` leads out of the repository, is a SelectorError naming it (`where`: the diff and
    line); so is a name that resolves to nothing."""
    if name.startswith("/"):
        raise SelectorError(
            f"{where}: {name!r} is an absolute path: a diff names files relative to the "
            "repository's top folder (as `git diff` prints them)"
        )
    parts: list[str] = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise SelectorError(
                    f"{where}: {name!r} leads out of the repository (its `..` goes above "
                    "the top folder); name the file by its path in the repository"
                )
            parts.pop()
            continue
        parts.append(part)
    if not parts:
        raise SelectorError(f"{where}: {name!r} names no file of the repository")
    return "/".join(parts)


def _starts_file(lines: list[str], pos: int) -> bool:
    line = lines[pos]
    if line.startswith("diff --git "):
        return True
    return line.startswith("--- ") and pos + 1 < len(lines) and lines[pos + 1].startswith("+++ ")


_BACKUP_SUFFIXES = (".orig", ".old", ".bak", ".new", "~")


def _strip_prefix(name: str) -> str | None:
    """The repository path a `---`/`+++` line names: git's `a/`/`b/`, `./` and, for a diff
    made against an installed tree, what follows `site-packages/` are not part of it."""
    name = name.split("\t", 1)[0].strip().strip('"')
    if name == "/dev/null":
        return None
    if "/site-packages/" in name:
        name = name.rsplit("/site-packages/", 1)[1]
    while name.startswith("./"):
        name = name[2:]
    if name.startswith(("a/", "b/")):
        return name[2:]
    return name


def _named(name: str | None, source: str, line: int) -> str | None:
    return None if name is None else repository_path(name, f"{source}:{line}")


def _plain_pair(old: str, new: str) -> str:
    """The file a plain `diff -u OLD NEW` of two copies edits: the new name, unless it is a
    backup copy's (`x.py.orig` against `x.py`, either way round)."""
    for suffix in _BACKUP_SUFFIXES:
        if new.endswith(suffix) and new[: -len(suffix)] == old:
            return old
    return new


def _parse_file(lines: list[str], pos: int, source: str) -> tuple[FilePatch, int, bool]:
    old: str | None = None
    new: str | None = None
    status = "modified"
    binary = False
    renamed_from: str | None = None
    header_line = pos + 1
    git_header = lines[pos].startswith("diff --git ")
    if git_header:
        match = _GIT_HEADER.match(lines[pos])
        if match is None:
            raise SelectorError(
                f"{source}:{header_line}: cannot read the file names in {lines[pos]!r}"
            )
        old = _named(match.group(1), source, header_line)
        new = _named(match.group(2), source, header_line)
        pos += 1
        # Extended header lines up to the first `---`, hunk or next file.
        while pos < len(lines) and not lines[pos].startswith(("--- ", "@@", "diff --git ")):
            line = lines[pos]
            if line.startswith("new file mode"):
                status = "added"
            elif line.startswith("deleted file mode"):
                status = "removed"
            elif line.startswith("rename from "):
                status = "renamed"
                renamed_from = _named(line[len("rename from ") :], source, pos + 1)
            elif line.startswith("rename to "):
                new = _named(line[len("rename to ") :], source, pos + 1)
            elif line.startswith("copy from "):
                status = "copied"
                renamed_from = _named(line[len("copy from ") :], source, pos + 1)
            elif line.startswith("copy to "):
                new = _named(line[len("copy to ") :], source, pos + 1)
            elif line.startswith(("Binary files ", "GIT binary patch")):
                binary = True
            pos += 1
    if pos < len(lines) and lines[pos].startswith("--- "):
        minus = _named(_strip_prefix(lines[pos][4:]), source, pos + 1)
        if pos + 1 >= len(lines) or not lines[pos + 1].startswith("+++ "):
            raise SelectorError(f"{source}:{pos + 1}: `---` line without the `+++` line after it")
        plus = _named(_strip_prefix(lines[pos + 1][4:]), source, pos + 2)
        if minus is None:
            status = "added"
        if plus is None:
            status = "removed"
        old = minus if minus is not None else old
        new = plus if plus is not None else new
        pos += 2
    hunks: list[Hunk] = []
    truncated = False
    while pos < len(lines) and lines[pos].startswith("@@"):
        hunk, pos, cut = _parse_hunk(lines, pos, source)
        hunks.append(hunk)
        truncated = truncated or cut
    # Skip anything else until the next file (e.g. a trailing `-- ` mail signature).
    while pos < len(lines) and not _starts_file(lines, pos):
        pos += 1
    path = new if status != "removed" else (old or new)
    if path is None:
        raise SelectorError(f"{source}:{header_line}: a file diff without a file name")
    previous = renamed_from or (old if status == "renamed" else None)
    if status == "modified" and old and new and old != new:
        if git_header:
            status, previous = "renamed", old
        else:
            # A plain diff cannot say "renamed": two names are two copies of one file
            # (`diff -u x.py.orig x.py`, `diff -u a/x.py b/x.py` in other layouts).
            path = _plain_pair(old, new)
    return FilePatch(path, status, previous, tuple(hunks), binary), pos, truncated


def joined(patch: FilePatch, old: str, new: str) -> FilePatch:
    """`patch` as one section: the change from `old` (the text before its first section) to
    `new` (after its last), in hunks as `diff -u` makes them (no function context)."""
    diff = difflib.unified_diff(split_lines(old)[0], split_lines(new)[0], lineterm="", n=3)
    lines = list(diff)[2:]  # the `---`/`+++` lines
    hunks: list[Hunk] = []
    pos = 0
    while pos < len(lines):
        hunk, pos, _cut = _parse_hunk(lines, pos, patch.path)
        hunks.append(hunk)
    return replace(patch, hunks=tuple(hunks), sections=())


def _parse_hunk(lines: list[str], pos: int, source: str) -> tuple[Hunk, int, bool]:
    match = _HUNK.match(lines[pos])
    if match is None:
        raise SelectorError(f"{source}:{pos + 1}: malformed hunk header {lines[pos]!r}")
    old_start, old_count = int(match.group(1)), int(match.group(2) or 1)
    new_start, new_count = int(match.group(3)), int(match.group(4) or 1)
    context = match.group(5).strip()
    pos += 1
    body: list[str] = []
    lacks = {"-": False, "+": False}  # a side's last line has no newline

    def marker() -> None:  # "\ No newline at end of file": of the line before it
        tag = body[-1][:1] if body else ""
        for side in ("-", "+"):
            lacks[side] = lacks[side] or tag in (side, " ")

    old_left, new_left = old_count, new_count
    while pos < len(lines) and (old_left > 0 or new_left > 0):
        line = lines[pos]
        if line.startswith("\\"):
            marker()
            pos += 1
            continue
        tag = line[:1] or " "  # some tools strip the space of empty context lines
        if tag == "+":
            new_left -= 1
        elif tag == "-":
            old_left -= 1
        elif tag == " ":
            old_left -= 1
            new_left -= 1
        else:
            break  # the hunk ended early: the diff was cut
        body.append(line if line else " ")
        pos += 1
    while pos < len(lines) and lines[pos].startswith("\\"):
        marker()
        pos += 1
    cut = old_left > 0 or new_left > 0
    hunk = Hunk(
        old_start, old_count, new_start, new_count, context, tuple(body), lacks["-"], lacks["+"]
    )
    return hunk, pos, cut


def iter_changed_lines(patch: FilePatch) -> Iterator[tuple[Hunk, int, str]]:
    """(hunk, index in hunk, text) of every added or removed line."""
    for hunk in patch.hunks:
        for i, line in enumerate(hunk.lines):
            if line[:1] in "+-":
                yield hunk, i, line[1:]


def compare_patch_text(files: list[dict[str, object]]) -> str:
    """A unified diff from GitHub compare (or pull-request files) entries: each has
    `filename`, `status`, optional `previous_filename`, and `patch` (its hunks alone, no file
    header; absent for binary or very large files)."""
    out: list[str] = []
    for entry in files:
        name = str(entry.get("filename") or "")
        if not name:
            raise SelectorError("a compare file entry without 'filename'")
        status = str(entry.get("status") or "modified")
        old = str(entry.get("previous_filename") or name)
        out.append(f"diff --git a/{old} b/{name}")
        if status == "added":
            out.append("new file mode 100644")
        elif status == "removed":
            out.append("deleted file mode 100644")
        elif status == "renamed" and old != name:
            out += [f"rename from {old}", f"rename to {name}"]
        elif status == "copied" and old != name:  # the original stays
            out += [f"copy from {old}", f"copy to {name}"]
        patch = entry.get("patch")
        if not isinstance(patch, str) or not patch:
            if status not in ("renamed", "removed", "added"):
                out.append(f"Binary files a/{old} and b/{name} differ")
            continue
        out.append("--- /dev/null" if status == "added" else f"--- a/{old}")
        out.append("+++ /dev/null" if status == "removed" else f"+++ b/{name}")
        out += split_lines(patch)[0]
    return "\n".join(out) + ("\n" if out else "")


def as_form(text: str, form: str) -> str:
    """The same change as another tool would print it: `git` (as given), `plain` (`diff -u`:
    no `diff --git` lines, no function context after `@@`), `github` (compare patches: one
    entry per file, hunks only, context dropped as another diff algorithm may place it
    elsewhere). Hunk bodies are kept as they are; a file given in several sections keeps
    them."""
    if form == "git":
        return text
    parsed = parse_unified_diff(text)
    if form == "plain":
        lines: list[str] = []
        for f in parsed.files:
            for old, new, hunks in _sections_of(f):
                lines.append(f"--- a/{old}" if old else "--- /dev/null")
                lines.append(f"+++ b/{new}" if new else "+++ /dev/null")
                lines += _plain_hunks(hunks)
        return "\n".join(lines) + "\n"
    if form == "github":
        entries: list[dict[str, object]] = [
            {
                "filename": new or old,
                "status": "added"
                if old is None
                else "removed"
                if new is None
                else (f.status if i == 0 and f.status == "copied" else "renamed")
                if old != new
                else "modified",
                "previous_filename": old if old and new and old != new else None,
                "patch": "\n".join(_plain_hunks(hunks)),
            }
            for f in parsed.files
            for i, (old, new, hunks) in enumerate(_sections_of(f))
        ]
        return compare_patch_text(entries)
    raise SelectorError(f"unknown diff form {form!r}; known: git, plain, github")


def _sections_of(patch: FilePatch) -> list[tuple[str | None, str | None, tuple[Hunk, ...]]]:
    """(old name, new name, hunks) of each section (None: `/dev/null`): the first from the
    old name (none for a new file), the last to none for a deleted file."""
    groups = patch.in_order()
    out: list[tuple[str | None, str | None, tuple[Hunk, ...]]] = []
    for i, hunks in enumerate(groups):
        old: str | None = patch.path
        if i == 0:
            old = None if patch.status == "added" else (patch.previous_path or patch.path)
        new = None if patch.status == "removed" and i == len(groups) - 1 else patch.path
        out.append((old, new, hunks))
    return out


def _plain_hunks(hunks: Sequence[Hunk]) -> list[str]:
    lines: list[str] = []
    for h in hunks:
        lines.append(f"@@ -{h.old_start},{h.old_count} +{h.new_start},{h.new_count} @@")
        lines += list(h.lines)
    return lines
