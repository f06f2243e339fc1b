from __future__ import annotations

import pytest

from selector.diff import parse_unified_diff
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
