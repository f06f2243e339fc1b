"""One diff engine: what the selector says applies (`patched`, and `locate` on top of it) and
what the change overlay applies (`apply_patch`) are one answer, for the shipped diffs and for
hostile ones (CRLF, trailing white space, a context twice, moved hunks, a cut hunk, missing
newlines, empty files, binary-ish lines). Every case asserts both answers and what they are."""

from __future__ import annotations

import difflib
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

import pytest

from benchmarks.selection.mutations import load_mutations
from benchmarks.selection.results import DEFAULT_MUTATIONS
from selector.definitions import locate
from selector.diff import FilePatch, parse_unified_diff, split_lines
from selector.patches import MAX_OFFSET, PatchError, apply_patch, patched
from tests.testing.paths import REPO_ROOT

PATH = "torch/nn/functional.py"


def _answers(text: str, patch: FilePatch) -> tuple[str | None, PatchError | None]:
    """(the new text, or None where the selector says the patch does not apply; the overlay's
    error, or None where it applies), after checking the two say the same."""
    selected = patched(text, patch)
    try:
        applied = apply_patch(text, patch)
    except PatchError as exc:
        assert selected is None, f"the selector places what the overlay refuses: {exc}"
        return None, exc
    assert selected is not None, "the overlay applies what the selector says does not apply"
    assert selected.text == applied, "the selector plans on another text than the overlay's"
    return applied, None


def _located_agrees(text: str, patch: FilePatch) -> None:
    """`locate` places a Python patch exactly where it applies (the old text parses)."""
    compile(text, patch.path, "exec", dont_inherit=True)
    assert (locate(patch, text) is None) == (patched(text, patch) is None)


def _diff(old: str, new: str, path: str = PATH, *, n: int = 3, eol: str = "\n") -> FilePatch:
    """A git-style diff of two texts (difflib, lines as `split_lines` counts them), one file."""
    body = difflib.unified_diff(
        split_lines(old)[0], split_lines(new)[0], f"a/{path}", f"b/{path}", lineterm="", n=n
    )
    text = eol.join([f"diff --git a/{path} b/{path}", *body]) + eol
    (patch,) = parse_unified_diff(text).files
    return patch


def _numbered(count: int, word: str = "line") -> str:
    return "".join(f"{word} {i}\n" for i in range(count))


BASE = _numbered(30)
EDITED = BASE.replace("line 15\n", "line fifteen\n")


# --- the shipped diffs ----------------------------------------------------------------------


def _shipped() -> list[tuple[str, str]]:
    """(name, diff text) of every diff the repository ships: the selection benchmark's
    mutations, examples/, benchmarks/ and test data."""
    found = [(m.id, m.diff) for m in load_mutations(DEFAULT_MUTATIONS)]
    for folder in ("examples", "benchmarks", "tests"):
        for suffix in ("*.patch", "*.diff"):
            for file in sorted((REPO_ROOT / folder).rglob(suffix)):
                found.append((file.relative_to(REPO_ROOT).as_posix(), file.read_text("utf-8")))
    return found


def _torch_files() -> Path | None:
    spec = find_spec("torch")  # finds the installed torch without importing it
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent.parent


SHIPPED = _shipped()
# The mutations were written against this torch: on it, every one of their files applies.
WRITTEN_FOR = "2.13.0"


def test_the_shipped_diffs_are_all_read() -> None:
    names = [name for name, _ in SHIPPED]
    assert len(names) >= 60 and "examples/changes/glu_batch_check.patch" in names
    assert "benchmarks/triage/glu_int_dim.patch" in names


# The examples' diffs run by default; the mutations' and the benchmarks' (each 2-15 s: the
# torch files they touch read and placed four ways) run with the `long` end-to-end proofs.
SWEEP = [
    pytest.param(
        name, diff, id=name, marks=() if name.startswith("examples/") else pytest.mark.long
    )
    for name, diff in SHIPPED
]


@pytest.mark.parametrize(("name", "diff"), SWEEP)
def test_a_shipped_diff_and_its_hostile_twins_get_one_answer(name: str, diff: str) -> None:
    root = _torch_files()
    if root is None:
        pytest.skip("torch is not installed: no old side for the shipped diffs")
    installed = metadata.version("torch").split("+")[0]
    for patch in parse_unified_diff(diff, name).files:
        file = root / (patch.previous_path or patch.path)
        if patch.status == "added" or not file.is_file() or not patch.hunks:
            continue
        text = file.read_text(encoding="utf-8")
        new, error = _answers(text, patch)
        _located_agrees(text, patch)
        if name.startswith(("py-", "examples/changes/")) and installed == WRITTEN_FOR:
            assert error is None, f"{name} was written against this torch: {error}"
        if new is None:
            continue
        # Moved down, within the offset: the same change, below the new lines.
        pad = "# a line upstream added\n" * 7
        assert _answers(pad + text, patch)[0] == pad + new
        _located_agrees(pad + text, patch)
        # Moved beyond the offset: refused by both.
        far = "# a line upstream added\n" * (MAX_OFFSET + patch.hunks[0].old_start + 1)
        assert _answers(far + text, patch)[1] is not None
        # CRLF: matches, and every line keeps (or gets) CRLF.
        assert _answers(text.replace("\n", "\r\n"), patch)[0] == new.replace("\n", "\r\n")
        # Trailing white space on a line the patch removes (or inserts next to): not the
        # line the diff names, so not applied.
        done = patched(text, patch)
        assert done is not None
        rows, ends = split_lines(text)
        rows[(done.removed or done.neighbours)[0] - 1] += " "
        spaced = "".join(row + end for row, end in zip(rows, ends, strict=True))
        assert _answers(spaced, patch)[0] is None


# --- line endings and white space -----------------------------------------------------------


def test_a_crlf_text_matches_an_lf_diff_and_keeps_its_endings() -> None:
    patch = _diff(BASE, EDITED.replace("line 20\n", "line 20\nline 20a\n"))
    new, _ = _answers(BASE.replace("\n", "\r\n"), patch)
    assert new == EDITED.replace("line 20\n", "line 20\nline 20a\n").replace("\n", "\r\n")


def test_a_crlf_diff_applies_to_an_lf_text() -> None:
    patch = _diff(BASE, EDITED, eol="\r\n")
    assert all("\r" not in line for line in patch.hunks[0].lines)
    assert _answers(BASE, patch)[0] == EDITED


def test_trailing_white_space_is_part_of_a_line() -> None:
    patch = _diff(BASE, EDITED)
    spaced = BASE.replace("line 14\n", "line 14   \n")  # a context line of the hunk
    new, error = _answers(spaced, patch)
    assert new is None and error is not None
    assert "hunk 1 (@@ -13,7 @@) does not apply" in str(error)
    # A multi-line string's trailing white space is its content: never silently changed.
    source = 'DOC = """\nkeep   \n"""\nX = 1\n'
    edit = _diff(
        source.replace("keep   ", "keep"), source.replace("keep   ", "keep").replace("1", "2")
    )
    _answers(source, edit)
    _located_agrees(source, edit)
    assert patched(source, edit) is None


# --- where a hunk goes ----------------------------------------------------------------------


@pytest.mark.parametrize("moved", [1, 37, MAX_OFFSET])
def test_a_hunk_moved_within_the_offset_applies_there(moved: int) -> None:
    patch = _diff(BASE, EDITED)
    pad = _numbered(moved, "new")
    assert _answers(pad + BASE, patch)[0] == pad + EDITED
    # Moved up as far (the lines above it deleted upstream).
    if moved <= 12:
        cut = "".join(BASE.splitlines(True)[moved:])
        assert _answers(cut, patch)[0] == "".join(EDITED.splitlines(True)[moved:])


@pytest.mark.parametrize("moved", [MAX_OFFSET + 1, 5 * MAX_OFFSET])
def test_a_hunk_beyond_the_offset_is_refused(moved: int) -> None:
    patch = _diff(BASE, EDITED)
    new, error = _answers(_numbered(moved, "new") + BASE, patch)
    assert new is None
    assert f"they are at line {13 + moved}, farther than {MAX_OFFSET} lines" in str(error)


def test_a_later_hunk_moves_as_far_as_the_one_before_it() -> None:
    old = _numbered(120)
    new = old.replace("line 10\n", "line ten\n").replace("line 110\n", "line 110 edited\n")
    patch = _diff(old, new)
    assert len(patch.hunks) == 2
    # Upstream added 150 lines above both hunks and 100 between them: the second hunk is 250
    # lines from its header, 100 from where the first one's move puts it.
    top, middle = _numbered(150, "top"), _numbered(100, "middle")
    moved_old = top + old.replace("line 60\n", middle + "line 60\n")
    moved_new = top + new.replace("line 60\n", middle + "line 60\n")
    assert _answers(moved_old, patch)[0] == moved_new


def test_of_two_matches_the_nearest_wins() -> None:
    block = "a\ndef f():\n    return 1\nb\n"
    old = block + "x\n" * 8 + block + "c\n" * 30
    patch = _diff(old, old.replace("    return 1\n", "    return 2\n", 1), n=1)
    # The first copy moved 3 lines down (to 3 lines from the header), the second is 15.
    shifted = "x\n" * 3 + old
    new, _ = _answers(shifted, patch)
    assert new == "x\n" * 3 + old.replace("    return 1\n", "    return 2\n", 1)


def test_a_context_that_appears_twice_at_its_header_applies_there() -> None:
    block = "if x:\n    y = 1\n    z = 2\n"
    old = block + "pad\n" * 5 + block
    second = old[: len(block) + 20] + block.replace("y = 1", "y = 3")
    patch = _diff(old, second, n=1)
    assert [line[1:] for line in patch.hunks[0].lines if line[0] != "+"] == block.splitlines()
    assert _answers(old, patch)[0] == second


def test_two_matches_equally_near_are_refused() -> None:
    block = "    y = 1\n    z = 2\n    w = 3\n"
    old = "head\n" * 10 + block + "tail\n"
    patch = _diff(old, old.replace("z = 2", "z = 9"), n=1)
    assert patch.hunks[0].old_start == 11
    # The hunk's lines are no longer at its header (line 11), but 4 lines above and 4 below.
    hostile = "other\n" * 6 + block + "other\n" * 5 + block + "tail\n"
    new, error = _answers(hostile, patch)
    assert new is None
    assert "match the installed file at lines 7 and 15, both 4 lines from line 11" in str(error)


def test_hunks_never_overlap_or_go_back() -> None:
    old = _numbered(100)
    new = old.replace("line 5\n", "line five\n").replace("line 30\n", "line thirty\n")
    patch = _diff(old, new, n=1)
    # Upstream moved `line 29..31` above the first hunk: the second hunk's lines now stand
    # before the end of the first one's, which a hunk never goes back to.
    block = "line 29\nline 30\nline 31\n"
    moved = block + old.replace(block, "")
    new_text, error = _answers(moved, patch)
    assert new_text is None
    assert "hunk 2 (@@ -30,3 @@) does not apply" in str(error)
    assert "they are at line 1, before the end of the hunk above it" in str(error)


def test_an_insertion_only_hunk_goes_after_its_header_line() -> None:
    new = BASE.replace("line 5\n", "line 5\ninserted\n")
    patch = _diff(BASE, new, n=0)
    assert patch.hunks[0].old_count == 0 and patch.hunks[0].old_start == 6
    assert _answers(BASE, patch)[0] == new


# --- files that are not there, cut hunks, the end of a file ---------------------------------


def test_a_patch_for_a_file_that_does_not_exist() -> None:
    patch = _diff(BASE, EDITED)
    new, error = _answers("", patch)  # what a missing file reads as
    assert new is None and "hunk 1" in str(error) and PATH in str(error)
    added = _diff("", "def f():\n    return 1\n")
    assert _answers("", added)[0] == "def f():\n    return 1\n"


def test_a_truncated_hunk_is_refused() -> None:
    hunk = _diff(BASE, EDITED).hunks[0]
    full = f"diff --git a/{PATH} b/{PATH}\n--- a/{PATH}\n+++ b/{PATH}\n"
    full += "@@ -13,7 +13,7 @@\n" + "\n".join(hunk.lines) + "\n"
    cut = "\n".join(full.splitlines()[:-3]) + "\n"  # GitHub cuts long diffs like this
    parsed = parse_unified_diff(cut)
    assert parsed.truncated
    new, error = _answers(BASE, parsed.files[0])
    assert new is None
    assert "holds 4 old and 4 new lines where its header counts 7 and 7" in str(error)
    assert _answers(BASE, parse_unified_diff(full).files[0])[0] == EDITED


def _git_style(old_side: str, new_side: str, body: str) -> FilePatch:
    return parse_unified_diff(f"--- a/{PATH}\n+++ b/{PATH}\n{old_side}{new_side}{body}").files[0]


NO_NEWLINE = "\\ No newline at end of file\n"


def test_no_newline_at_end_of_file_markers_decide_the_last_newline() -> None:
    # The last line changes, neither side ends with a newline (git prints both markers).
    both = _git_style("", "", f"@@ -1,2 +1,2 @@\n a\n-b\n{NO_NEWLINE}+c\n{NO_NEWLINE}")
    assert both.hunks[0].old_lacks_newline and both.hunks[0].new_lacks_newline
    assert _answers("a\nb", both)[0] == "a\nc"
    # A newline added at the end.
    added = _git_style("", "", f"@@ -1,2 +1,2 @@\n a\n-b\n{NO_NEWLINE}+b\n")
    assert _answers("a\nb", added)[0] == "a\nb\n"
    # A newline removed at the end.
    removed = _git_style("", "", f"@@ -1,2 +1,2 @@\n a\n-b\n+b\n{NO_NEWLINE}")
    assert _answers("a\nb\n", removed)[0] == "a\nb"
    # Without markers (a diff tool that drops them): the old text's end is kept.
    plain = _diff("a\nb\n", "a\nc\n")
    assert _answers("a\nb", plain)[0] == "a\nc"
    assert _answers("a\nb\n", plain)[0] == "a\nc\n"


def test_an_empty_file() -> None:
    filled = _diff("", "a\nb\n")
    assert _answers("", filled)[0] == "a\nb\n"
    emptied = _diff("a\nb\n", "")
    assert _answers("a\nb\n", emptied)[0] == ""
    assert _answers("", _diff("a\n", "b\n"))[0] is None


@pytest.mark.parametrize("odd", ["\x0c", "\x00", "\x1c", "\x85", "\u2028", "\x0b", "\r"])
def test_a_binary_ish_character_inside_a_line_does_not_end_it(odd: str) -> None:
    old = f"x = 1\ny = 'a{odd}b'\nz = 3\nw = 4\n"
    new = old.replace("z = 3", "z = 33")
    patch = _diff(old, new)
    assert len(patch.hunks) == 1 and len(patch.hunks[0].lines) == 5
    assert _answers(old, patch)[0] == new
    # The same line with another character there is another line.
    assert _answers(old.replace(odd, "?"), patch)[0] is None


def test_errors_name_the_file_the_section_and_the_hunk() -> None:
    first = BASE.replace("line 3\n", "line three\n")
    second = first.replace("line three\n", "line 3!\n")
    # Newest first: section 1 does not apply to the installed text.
    diff = _section(first, second) + _section(BASE, first)
    (patch,) = parse_unified_diff(diff).files
    new, error = _answers(BASE, patch)
    assert new is None
    assert str(error).startswith(f"{PATH}: section 1 (line 1 of the diff), hunk 1 (@@ -1,7 @@)")
    assert "`git log -p --reverse`" in str(error)
    (in_order,) = parse_unified_diff(_section(BASE, first) + _section(first, second)).files
    assert _answers(BASE, in_order)[0] == second


def _section(old: str, new: str) -> str:
    body = difflib.unified_diff(
        old.splitlines(True), new.splitlines(True), f"a/{PATH}", f"b/{PATH}"
    )
    return f"diff --git a/{PATH} b/{PATH}\n" + "".join(body)
