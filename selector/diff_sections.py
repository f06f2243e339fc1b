"""A file a diff gives in several sections, as one `FilePatch` (pure).

`git log -p --reverse` prints one section of a file per commit that changed it, and two diffs
put together give a file twice. The diff is applied as written: the sections of one file
apply in the diff's order, each over the text the ones before it made, so a later section
joins the file an earlier one left at its old name, and what they do to the file together
is its status. An order no text can follow is refused, naming the file and the sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from selector.diff import FilePatch, Hunk, Section
from selector.errors import SelectorError


@dataclass
class _Joined:
    """A file's sections so far: what they make of it together, and their hunks."""

    path: str
    status: str
    previous_path: str | None
    binary: bool
    groups: list[tuple[int, tuple[Hunk, ...]]]  # (the diff's line of a section, its hunks)

    def patch(self) -> FilePatch:
        hunks: list[Hunk] = []
        sections: list[Section] = []
        for line, group in self.groups:
            sections.append(Section(line, len(hunks)))
            hunks += group
        if len(sections) == 1:
            sections = []  # a file given once
        return FilePatch(
            self.path, self.status, self.previous_path, tuple(hunks), self.binary, tuple(sections)
        )


def one_per_file(sections: Sequence[tuple[int, FilePatch]], source: str) -> tuple[FilePatch, ...]:
    """One FilePatch per file, in the order files first appear: a later section of a file
    (its old name is a name an earlier section left the file at) joins it, to apply over the
    text the earlier ones made. What the sections do to the file together is its status: a
    rename then an edit is a rename, an edit then a deletion a deletion, a deletion then a
    new file of that name an edit. An order no text can follow is a SelectorError naming
    the file and both sections' lines."""
    files: dict[str, _Joined] = {}  # by the name the sections so far leave the file at
    gone: dict[str, tuple[int, str]] = {}  # a name renamed away: (that section's line, how)

    def refuse(line: int, path: str, what: str, earlier: int) -> SelectorError:
        return SelectorError(
            f"{source}:{line}: {path}: the section here {what} (the section at line "
            f"{earlier}); a diff's sections of one file apply in the order given, each "
            "over the text the ones before it made: put them in the order they were made "
            "(`git log -p --reverse`), or give the file's change once (`git diff BASE HEAD`)"
        )

    def landing(line: int, name: str, old: str) -> None:
        """A rename or copy to `name` must not land on a file an earlier section changes."""
        there = files.get(name)
        if name != old and there is not None:
            raise refuse(
                line,
                name,
                f"renames or copies {old} onto it, but it is changed",
                there.groups[0][0],
            )

    for line, patch in sections:
        group = (line, patch.hunks)
        if patch.status == "added":
            earlier = files.get(patch.path)
            if earlier is None:
                if patch.path in gone:
                    at, how = gone[patch.path]
                    raise refuse(line, patch.path, f"adds it, after {how}", at)
                files[patch.path] = _Joined(patch.path, "added", None, patch.binary, [group])
                continue
            if earlier.status != "removed":
                raise refuse(
                    line, patch.path, "adds it, but it is already there", earlier.groups[-1][0]
                )
            earlier.status, earlier.previous_path = "modified", None  # deleted, then new again
            earlier.binary = earlier.binary or patch.binary
            earlier.groups.append(group)
            continue
        old = patch.previous_path or patch.path
        earlier = files.get(old)
        if earlier is None:
            if old in gone:
                at, how = gone[old]
                raise refuse(line, old, f"changes it, after {how}", at)
            landing(line, patch.path, old)
            files[patch.path] = _Joined(
                patch.path, patch.status, patch.previous_path, patch.binary, [group]
            )
            if patch.status == "renamed" and patch.path != old:
                gone[old] = (line, f"it was renamed to {patch.path}")
            continue
        last = earlier.groups[-1][0]
        if earlier.status == "removed":
            raise refuse(line, old, "changes it, but it was deleted", last)
        if patch.status == "copied":
            # A copy of the text the earlier sections made: a file of its own.
            landing(line, patch.path, old)
            origin = earlier.previous_path if earlier.status in ("renamed", "copied") else old
            files[patch.path] = _Joined(
                patch.path,
                "added" if earlier.status == "added" else "copied",
                None if earlier.status == "added" else origin,
                earlier.binary or patch.binary,
                [*earlier.groups, group],
            )
            continue
        if patch.status == "removed":
            if earlier.status in ("added", "copied"):
                raise refuse(line, old, "deletes it, but it is new in this diff", last)
            if earlier.status == "renamed" and earlier.previous_path:
                del files[old]  # a rename then a deletion: the old name is deleted
                gone.pop(earlier.previous_path, None)
                gone[old] = (line, "it was deleted")
                earlier.path, earlier.previous_path = earlier.previous_path, None
                files[earlier.path] = earlier
            earlier.status = "removed"
        elif patch.status == "renamed" and patch.path != old:
            landing(line, patch.path, old)
            del files[old]
            gone[old] = (line, f"it was renamed to {patch.path}")
            if earlier.status == "modified":
                earlier.status, earlier.previous_path = "renamed", old
            elif earlier.status == "renamed" and earlier.previous_path == patch.path:
                # renamed back to its first name
                earlier.status, earlier.previous_path = "modified", None
                gone.pop(patch.path, None)
            earlier.path = patch.path
            files[patch.path] = earlier
        earlier.binary = earlier.binary or patch.binary
        earlier.groups.append(group)
    order = sorted(files.values(), key=lambda f: f.groups[0][0])
    return tuple(f.patch() for f in order)
