from __future__ import annotations

import pytest

from selector.diff import as_form, parse_unified_diff
from selector.errors import SelectorError

MULTI = """\
From 1b2c Mon Sep 17 00:00:00 2001
Subject: [PATCH] several kinds of change

---
diff --git a/torch/_refs/__init__.py b/torch/_refs/__init__.py
index 6b90d2e..93f0a1c 100644
--- a/torch/_refs/__init__.py
+++ b/torch/_refs/__init__.py
@@ -10,2 +10,3 @@ def logsumexp(
     a = 1
-    b = 2
+    b = 3
+    c = 4
\\ No newline at end of file
diff --git a/aten/src/ATen/native/Old.cpp b/aten/src/ATen/native/New.cpp
similarity index 92%
rename from aten/src/ATen/native/Old.cpp
rename to aten/src/ATen/native/New.cpp
index 1111111..2222222 100644
--- a/aten/src/ATen/native/Old.cpp
+++ b/aten/src/ATen/native/New.cpp
@@ -1 +1 @@ Tensor gelu(const Tensor& self) {
-  return x;
+  return y;
diff --git a/test/test_new.py b/test/test_new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/test/test_new.py
@@ -0,0 +1,2 @@
+def test_x():
+    pass
diff --git a/docs/old.rst b/docs/old.rst
deleted file mode 100644
index 4444444..0000000
--- a/docs/old.rst
+++ /dev/null
@@ -1 +0,0 @@
-gone
diff --git a/docs/logo.png b/docs/logo.png
index 5555555..6666666 100644
Binary files a/docs/logo.png and b/docs/logo.png differ
diff --git a/torch/a.py b/torch/b.py
similarity index 100%
rename from torch/a.py
rename to torch/b.py
"""


def test_every_kind_of_file_change() -> None:
    parsed = parse_unified_diff(MULTI)
    assert not parsed.truncated
    got = [(f.path, f.status, f.previous_path, f.binary) for f in parsed.files]
    assert got == [
        ("torch/_refs/__init__.py", "modified", None, False),
        ("aten/src/ATen/native/New.cpp", "renamed", "aten/src/ATen/native/Old.cpp", False),
        ("test/test_new.py", "added", None, False),
        ("docs/old.rst", "removed", None, False),
        ("docs/logo.png", "modified", None, True),
        ("torch/b.py", "renamed", "torch/a.py", False),
    ]


def test_hunks_keep_numbers_context_and_lines() -> None:
    refs, cpp, new = parse_unified_diff(MULTI).files[:3]
    (hunk,) = refs.hunks
    assert (hunk.old_start, hunk.old_count, hunk.new_start, hunk.new_count) == (10, 2, 10, 3)
    assert hunk.context == "def logsumexp("
    assert hunk.removed == ("    b = 2",)
    assert hunk.added == ("    b = 3", "    c = 4")
    assert cpp.hunks[0].context == "Tensor gelu(const Tensor& self) {"
    assert (cpp.hunks[0].old_count, cpp.hunks[0].new_count) == (1, 1)  # omitted counts mean 1
    assert new.hunks[0].added == ("def test_x():", "    pass")


def test_a_hunk_cut_short_marks_the_diff_truncated() -> None:
    text = (
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n"
        "@@ -1,5 +1,5 @@\n a\n-b\n+c\n"
        "diff --git a/y.py b/y.py\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-p\n+q\n"
    )
    parsed = parse_unified_diff(text)
    assert parsed.truncated
    assert [f.path for f in parsed.files] == ["x.py", "y.py"]
    assert parsed.files[1].hunks[0].added == ("q",)


def test_plain_diff_without_git_header() -> None:
    text = "--- a/c10/core/Scalar.h\n+++ b/c10/core/Scalar.h\n@@ -1 +1 @@\n-a\n+b\n"
    parsed = parse_unified_diff(text)
    assert [(f.path, f.status) for f in parsed.files] == [("c10/core/Scalar.h", "modified")]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("just some words\n", "<in>: no `diff --git`"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,x +1 @@\n", "<in>:4: malformed hunk header"),
    ],
)
def test_bad_diff_names_the_line(text: str, where: str) -> None:
    with pytest.raises(SelectorError, match=where):
        parse_unified_diff(text, "<in>")


def test_empty_diff_is_no_change() -> None:
    assert parse_unified_diff("").files == ()


@pytest.mark.parametrize(
    ("minus", "plus"),
    [
        ("torch/nn/functional.py.orig", "torch/nn/functional.py"),
        ("torch/nn/functional.py", "torch/nn/functional.py.new"),
        ("./torch/nn/functional.py", "./torch/nn/functional.py"),
        (
            "/usr/lib/python3/site-packages/torch/nn/functional.py",
            "/tmp/edited/site-packages/torch/nn/functional.py",
        ),
    ],
)
def test_plain_diffs_of_two_copies_name_the_repository_file(minus: str, plus: str) -> None:
    text = (
        f"--- {minus}\t2026-12-01 10:00:00\n+++ {plus}\t2026-12-01 10:01:00\n@@ -1 +1 @@\n-a\n+b\n"
    )
    (patch,) = parse_unified_diff(text).files
    assert (patch.path, patch.status, patch.previous_path) == (
        "torch/nn/functional.py",
        "modified",
        None,
    )


def test_a_git_diff_between_two_names_is_a_rename() -> None:
    text = (
        "diff --git a/torch/x.py b/torch/y.py\n--- a/torch/x.py\n+++ b/torch/y.py\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    (patch,) = parse_unified_diff(text).files
    assert (patch.path, patch.status, patch.previous_path) == (
        "torch/y.py",
        "renamed",
        "torch/x.py",
    )


def _section(path: str, hunk: str, *, old: str | None = None, header: str = "") -> str:
    """One file's section as `git diff` prints it (`old`: the name it had before)."""
    old = old or path
    return f"diff --git a/{old} b/{path}\n{header}--- a/{old}\n+++ b/{path}\n{hunk}"


def test_a_file_given_in_two_sections_is_one_patch_whose_sections_apply_in_order() -> None:
    text = (
        "commit 1111\nAuthor: a\n\n    first\n\n"
        + _section("torch/x.py", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n")
        + _section("torch/y.py", "@@ -1 +1 @@\n-p\n+q\n")
        + "commit 2222\nAuthor: a\n\n    second\n\n"
        + _section("torch/x.py", "@@ -2,2 +2,3 @@\n B\n c\n+d\n")
    )
    parsed = parse_unified_diff(text)
    assert [f.path for f in parsed.files] == ["torch/x.py", "torch/y.py"]
    x = parsed.files[0]
    assert x.status == "modified"
    assert [s.line for s in x.sections] == [6, 24]
    assert [[h.added for h in group] for group in x.in_order()] == [[("B",)], [("d",)]]
    assert len(x.hunks) == 2  # the selector reads every changed line of every section
    assert x.where(1) == "section 2 (line 24 of the diff)"
    assert parsed.files[1].sections == () and parsed.files[1].in_order() == (parsed.files[1].hunks,)


ADD = (
    "diff --git a/torch/n.py b/torch/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/torch/n.py\n"
)
DELETE = "diff --git a/torch/n.py b/torch/n.py\ndeleted file mode 100644\n--- a/torch/n.py\n"
DELETE += "+++ /dev/null\n"
RENAME = "similarity index 90%\nrename from torch/n.py\nrename to torch/m.py\n"
EDIT_N = _section("torch/n.py", "@@ -1 +1 @@\n-x\n+y\n")
EDIT_M = _section("torch/m.py", "@@ -1 +1 @@\n-y\n+z\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ADD + "@@ -0,0 +1 @@\n+x\n" + EDIT_N, ("torch/n.py", "added", None)),
        (EDIT_N + DELETE + "@@ -1 +0,0 @@\n-y\n", ("torch/n.py", "removed", None)),
        (
            DELETE + "@@ -1 +0,0 @@\n-x\n" + ADD + "@@ -0,0 +1 @@\n+y\n",
            ("torch/n.py", "modified", None),
        ),
        (
            _section("torch/m.py", "@@ -1 +1 @@\n-x\n+y\n", old="torch/n.py", header=RENAME)
            + EDIT_M,
            ("torch/m.py", "renamed", "torch/n.py"),
        ),
        (
            EDIT_N
            + _section("torch/m.py", "@@ -1 +1 @@\n-y\n+z\n", old="torch/n.py", header=RENAME),
            ("torch/m.py", "renamed", "torch/n.py"),
        ),
        (
            _section("torch/m.py", "", old="torch/n.py", header=RENAME)
            + _section(
                "torch/n.py",
                "@@ -1 +1 @@\n-x\n+y\n",
                old="torch/m.py",
                header=RENAME.replace("from torch/n.py", "from torch/m.py").replace(
                    "to torch/m.py", "to torch/n.py"
                ),
            ),
            ("torch/n.py", "modified", None),
        ),
    ],
    ids=[
        "added-then-edited",
        "edited-then-deleted",
        "deleted-then-added",
        "renamed-then-edited",
        "edited-then-renamed",
        "renamed-and-back",
    ],
)
def test_what_the_sections_of_a_file_make_together(
    text: str, expected: tuple[str, str, str | None]
) -> None:
    (patch,) = parse_unified_diff(text).files
    assert (patch.path, patch.status, patch.previous_path) == expected
    assert len(patch.in_order()) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            DELETE + "@@ -1 +0,0 @@\n-x\n" + EDIT_N,
            r"<in>:7: torch/n.py: the section here changes it, but it was deleted \(the "
            r"section at line 1\); .*`git log -p --reverse`",
        ),
        (
            EDIT_N + ADD + "@@ -0,0 +1 @@\n+x\n",
            r"<in>:7: torch/n.py: the section here adds it, but it is already there \(the "
            r"section at line 1\)",
        ),
        (
            ADD + "@@ -0,0 +1 @@\n+x\n" + DELETE + "@@ -1 +0,0 @@\n-x\n",
            r"<in>:7: torch/n.py: the section here deletes it, but it is new in this diff",
        ),
        (
            _section("torch/m.py", "", old="torch/n.py", header=RENAME) + EDIT_N,
            r"<in>:7: torch/n.py: the section here changes it, after it was renamed to "
            r"torch/m.py \(the section at line 1\)",
        ),
    ],
    ids=["edit-after-delete", "add-twice", "delete-a-new-file", "edit-a-renamed-name"],
)
def test_an_order_no_text_can_follow_is_refused_naming_file_and_sections(
    text: str, message: str
) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_unified_diff(text, "<in>")


@pytest.mark.parametrize(
    "name",
    [
        "torch/../torch/nn/functional.py",
        "./torch/nn/functional.py",
        "torch//nn/functional.py",
        "torch/./nn/../nn/functional.py",
    ],
)
def test_a_file_name_is_resolved_to_its_repository_path(name: str) -> None:
    git = _section(name, "@@ -1 +1 @@\n-a\n+b\n")
    plain = f"--- {name}\n+++ {name}\n@@ -1 +1 @@\n-a\n+b\n"
    renamed = _section(
        name, "", old="torch/old.py", header=f"rename from torch/old.py\nrename to {name}\n"
    )
    for text, status in ((git, "modified"), (plain, "modified"), (renamed, "renamed")):
        (patch,) = parse_unified_diff(text).files
        assert (patch.path, patch.status) == ("torch/nn/functional.py", status), text
    # Two names of one file are one file: its sections, in order.
    (both,) = parse_unified_diff(
        _section("torch/nn/functional.py", "@@ -1 +1 @@\n-a\n+b\n")
        + _section(name, "@@ -1 +1 @@\n-b\n+c\n")
    ).files
    assert [g[0].added for g in both.in_order()] == [("b",), ("c",)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_section("torch/../../x.py", ""), r"<in>:1: 'torch/../../x.py' leads out of the repo"),
        (
            "--- ../torch/x.py\n+++ ../torch/x.py\n@@ -1 +1 @@\n-a\n+b\n",
            r"<in>:1: '../torch/x.py' leads out",
        ),
        (
            "--- /etc/x.py\n+++ /etc/x.py\n@@ -1 +1 @@\n-a\n+b\n",
            r"<in>:1: '/etc/x.py' is an absolute path",
        ),
        ("diff --git a//etc/x.py b//etc/x.py\n", r"<in>:1: '/etc/x.py' is an absolute path"),
        (
            _section(
                "torch/y.py",
                "",
                old="torch/x.py",
                header="rename from torch/x.py\nrename to torch/../../y.py\n",
            ),
            r"<in>:3: 'torch/../../y.py' leads out",
        ),
        (_section("torch/..", ""), r"<in>:1: 'torch/..' names no file"),
    ],
    ids=[
        "dotdot-git",
        "dotdot-plain",
        "absolute-plain",
        "absolute-git",
        "dotdot-rename",
        "nothing",
    ],
)
def test_a_file_name_outside_the_repository_is_refused(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_unified_diff(text, "<in>")


def test_every_form_keeps_a_files_sections() -> None:
    text = _section("torch/x.py", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n") + _section(
        "torch/x.py", "@@ -2,2 +2,3 @@\n B\n c\n+d\n"
    )
    groups = [[h.lines for h in g] for g in parse_unified_diff(text).files[0].in_order()]
    for form in ("plain", "github"):
        (patch,) = parse_unified_diff(as_form(text, form)).files
        assert [[h.lines for h in g] for g in patch.in_order()] == groups, form


def test_a_copied_file_stays_a_copy_in_githubs_form() -> None:
    """A copy keeps its original: GitHub's `copied` entry is read back as a copy, never as a
    rename (which would take the original away)."""
    from selector.diff import as_form

    text = (
        "diff --git a/torch/a.py b/torch/b.py\nsimilarity index 90%\ncopy from torch/a.py\n"
        "copy to torch/b.py\n--- a/torch/a.py\n+++ b/torch/b.py\n@@ -1,1 +1,1 @@\n-x = 1\n+x = 2\n"
    )
    (copy,) = parse_unified_diff(as_form(text, "github")).files
    assert (copy.path, copy.status, copy.previous_path) == ("torch/b.py", "copied", "torch/a.py")
