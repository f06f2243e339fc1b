"""The change overlay: a diff's Python files applied to an installed package tree, imported by
a real Python subprocess (a small `torch` package written in the test stands in for the
installed one, so every kind of file change can be made and checked in milliseconds)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workflows.runner.change_overlay import ChangeError, file_kind, prepare

INIT = "VERSION = 'base'\n"
FUNCTIONAL = textwrap.dedent(
    """\
    def glu(x):
        if x == 0:
            raise RuntimeError("no scalars")
        return x * 2


    def keep():
        return "kept"
    """
)
HELPERS = "def helper():\n    return 'old helper'\n"


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    """A site folder with a small installed `torch` package."""
    root = tmp_path / "site"
    (root / "torch" / "nn").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(INIT)
    (root / "torch" / "nn" / "__init__.py").write_text("")
    (root / "torch" / "nn" / "functional.py").write_text(FUNCTIONAL)
    (root / "torch" / "_helpers.py").write_text(HELPERS)
    return root


def run_python(site: Path, env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter that finds the small torch first (as site-packages)."""
    base = {**os.environ, "PYTHONPATH": str(site)}
    full = {**base, **env} if env else base
    if env and "PYTHONPATH" in env:
        full["PYTHONPATH"] = env["PYTHONPATH"]
    return subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60
    )


def git_diff(path: str, old: str, new: str, *, tmp: Path) -> str:
    """A real `git diff --no-index` of two texts, relabelled to `path`."""
    a, b = tmp / "a.txt", tmp / "b.txt"
    a.write_text(old)
    b.write_text(new)
    out = subprocess.run(
        ["git", "diff", "--no-index", "--no-color", str(a), str(b)],
        capture_output=True,
        text=True,
    ).stdout
    lines = out.splitlines(keepends=True)
    body = "".join(line for line in lines if not line.startswith(("diff --git", "index ")))
    body = body.replace(f"--- a{a}", f"--- a/{path}").replace(f"+++ b{b}", f"+++ b/{path}")
    return f"diff --git a/{path} b/{path}\n" + body


BROKEN_GLU = FUNCTIONAL.replace("if x == 0:", "if x <= 1:")


def test_a_changed_module_is_imported_changed_from_its_installed_path(
    site: Path, tmp_path: Path
) -> None:
    diff = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    change = prepare(diff, site, cache_dir=tmp_path / "cache")
    assert change.state == "applied"
    assert [(f.path, f.module) for f in change.applied] == [
        ("torch/nn/functional.py", "torch.nn.functional")
    ]
    code = (
        "import inspect, torch.nn.functional as F\n"
        "print(F.__file__)\n"
        "print('raises' if F.glu.__code__.co_consts and 'x <= 1' in inspect.getsource(F.glu)"
        " else 'plain')\n"
        "try:\n    F.glu(1)\nexcept RuntimeError as e:\n    print('error', e)\n"
    )
    changed = run_python(site, change.env({"PYTHONPATH": str(site)}), code)
    assert changed.returncode == 0, changed.stderr
    lines = changed.stdout.splitlines()
    assert lines[0] == str(site / "torch" / "nn" / "functional.py")
    assert lines[1:] == ["raises", "error no scalars"]
    # The installed file and its bytecode cache are untouched: without the change, the base.
    assert (site / "torch" / "nn" / "functional.py").read_text() == FUNCTIONAL
    plain = run_python(site, {}, "import torch.nn.functional as F; print(F.glu(1))")
    assert plain.stdout.strip() == "2"


def test_new_deleted_renamed_modules_and_the_package_init(site: Path, tmp_path: Path) -> None:
    new_module = "diff --git a/torch/fresh.py b/torch/fresh.py\nnew file mode 100644\n"
    new_module += "--- /dev/null\n+++ b/torch/fresh.py\n@@ -0,0 +1,2 @@\n"
    new_module += "+def answer():\n+    return 42\n"
    removed = "diff --git a/torch/_helpers.py b/torch/_helpers.py\ndeleted file mode 100644\n"
    removed += "--- a/torch/_helpers.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n"
    removed += "-def helper():\n-    return 'old helper'\n"
    renamed = git_diff(
        "torch/nn/functional.py", FUNCTIONAL, FUNCTIONAL.replace('"kept"', '"moved"'), tmp=tmp_path
    )
    renamed = renamed.replace(
        "diff --git a/torch/nn/functional.py b/torch/nn/functional.py\n",
        "diff --git a/torch/nn/functional.py b/torch/nn/_functional.py\n"
        "similarity index 90%\nrename from torch/nn/functional.py\n"
        "rename to torch/nn/_functional.py\n",
    ).replace("+++ b/torch/nn/functional.py", "+++ b/torch/nn/_functional.py")
    init = git_diff("torch/__init__.py", INIT, "VERSION = 'changed'\n", tmp=tmp_path)
    change = prepare(new_module + removed + renamed + init, site, cache_dir=tmp_path / "c")
    assert {f.path: f.status for f in change.applied} == {
        "torch/fresh.py": "added",
        "torch/_helpers.py": "removed",
        "torch/nn/_functional.py": "renamed",
        "torch/__init__.py": "modified",
    }
    code = textwrap.dedent(
        """\
        import torch, torch.fresh, torch.nn._functional as moved
        print(torch.VERSION, torch.fresh.answer(), moved.keep())
        for name in ("torch._helpers", "torch.nn.functional"):
            try:
                __import__(name)
            except ModuleNotFoundError as exc:
                print("gone", name, "deletes" in str(exc))
        """
    )
    done = run_python(site, change.env({"PYTHONPATH": str(site)}), code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "changed 42 moved",
        "gone torch._helpers True",
        "gone torch.nn.functional True",
    ]


def test_a_hunk_that_does_not_apply_names_file_and_hunk(site: Path, tmp_path: Path) -> None:
    other = FUNCTIONAL.replace('"no scalars"', '"other text"')
    diff = git_diff("torch/nn/functional.py", other, other.replace("x * 2", "x * 3"), tmp=tmp_path)
    diff = diff.replace('"other text"', '"text of another version"')
    with pytest.raises(ChangeError, match=r"torch/nn/functional.py: hunk 1 .* does not apply"):
        prepare(diff, site, source="my.patch", cache_dir=tmp_path / "c")
    # An event's diff (made against upstream's base): that file is named, not fatal.
    loose = prepare(diff, site, strict=False, cache_dir=tmp_path / "c")
    assert loose.state == "not_applied"
    assert "does not apply" in loose.not_applied[0].why


def test_a_wrong_hunk_count_is_refused_before_anything_applies(site: Path, tmp_path: Path) -> None:
    diff = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    # The header counts three more lines than the hunk holds (a cut or hand-edited diff).
    cut = re.sub(
        r"@@ -1,(\d+) \+1,(\d+) @@", lambda m: f"@@ -1,{int(m[1]) + 3} +1,{int(m[2]) + 3} @@", diff
    )
    assert cut != diff
    with pytest.raises(ChangeError, match=r"my.patch:\d+: torch/nn/functional.py: hunk 1 .*cut"):
        prepare(cut, site, source="my.patch", cache_dir=tmp_path / "c")


def test_a_change_to_a_module_not_installed_is_refused(site: Path, tmp_path: Path) -> None:
    diff = git_diff("torch/absent.py", "a = 1\n", "a = 2\n", tmp=tmp_path)
    with pytest.raises(ChangeError, match=r"torch/absent.py: not in the installed torch"):
        prepare(diff, site, cache_dir=tmp_path / "c")


def test_mixed_python_and_cpp_is_applied_in_part(site: Path, tmp_path: Path) -> None:
    python = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    cpp = git_diff("aten/src/ATen/native/Glu.cpp", "int a;\n", "int b;\n", tmp=tmp_path)
    docs = git_diff("docs/source/nn.rst", "a\n", "b\n", tmp=tmp_path)
    test = git_diff("test/test_nn.py", "a = 1\n", "a = 2\n", tmp=tmp_path)
    change = prepare(python + cpp + docs + test, site, cache_dir=tmp_path / "c")
    assert change.state == "partial"
    assert [f.path for f in change.not_applied] == ["aten/src/ATen/native/Glu.cpp"]
    assert "needs a build" in change.not_applied[0].why
    assert {f.path for f in change.no_effect} == {"docs/source/nn.rst", "test/test_nn.py"}
    only_cpp = prepare(cpp, site, cache_dir=tmp_path / "c")
    assert only_cpp.state == "not_applied" and only_cpp.env() == {}


def test_a_syntax_error_is_the_changes_own_failure(site: Path, tmp_path: Path) -> None:
    diff = git_diff(
        "torch/nn/functional.py",
        FUNCTIONAL,
        FUNCTIONAL.replace("return x * 2", "return x *"),
        tmp=tmp_path,
    )
    change = prepare(diff, site, cache_dir=tmp_path / "c")
    assert change.broken and change.broken[0].startswith("torch/nn/functional.py:4:")


def test_the_overlay_is_keyed_by_the_change(site: Path, tmp_path: Path) -> None:
    one = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    two = git_diff("torch/nn/functional.py", FUNCTIONAL, FUNCTIONAL + "\nX = 1\n", tmp=tmp_path)
    a = prepare(one, site, cache_dir=tmp_path / "c")
    again = prepare(one, site, cache_dir=tmp_path / "c")
    b = prepare(two, site, cache_dir=tmp_path / "c")
    assert a.folder == again.folder != b.folder
    activation = json.loads((Path(a.folder) / "activation.json").read_text())
    assert activation["id"] == a.id


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("torch/nn/functional.py", "python"),
        ("torch/_refs/__init__.py", "python"),
        ("functorch/dim/__init__.py", "python"),
        ("torch/csrc/autograd/init.cpp", "build"),
        ("torch/csrc/utils/python.py", "build"),
        ("aten/src/ATen/native/native_functions.yaml", "build"),
        ("aten/src/ATen/native/SoftMax.cpp", "build"),
        ("torchgen/gen.py", "build"),
        ("CMakeLists.txt", "build"),
        ("setup.py", "build"),
        ("torch/_C/_VariableFunctions.pyi.in", "build"),
        ("torch/utils/model_dump/code.js", "other"),
        ("torch/functional.pyi", "outside"),
        ("test/test_nn.py", "outside"),
        ("docs/source/index.rst", "outside"),
        (".github/workflows/pull.yml", "outside"),
    ],
)
def test_file_kinds(path: str, kind: str) -> None:
    assert file_kind(path) == kind


def test_a_files_sections_apply_in_the_diffs_order(site: Path, tmp_path: Path) -> None:
    """`git log -p --reverse` of two commits of one file, then a harmless third: the second
    edits what only the first wrote; every section takes effect, the file is applied once."""
    first = FUNCTIONAL.replace("if x == 0:", "if x <= 1:")
    second = first.replace('"no scalars"', '"no scalars or ones"')
    last = second.replace('return "kept"', 'return "kept"  # as it was')
    path = "torch/nn/functional.py"
    diff = (
        git_diff(path, FUNCTIONAL, first, tmp=tmp_path)
        + git_diff(path, first, second, tmp=tmp_path)
        + git_diff(path, second, last, tmp=tmp_path)
    )
    change = prepare(diff, site, cache_dir=tmp_path / "c")
    assert [(f.path, f.module) for f in change.applied] == [(path, "torch.nn.functional")]
    assert change.applied[0].why == "3 hunks in 3 sections, applied in the diff's order"
    code = "import torch.nn.functional as F\ntry:\n    F.glu(1)\nexcept RuntimeError as e:\n"
    code += "    print(e)\nprint(F.keep())\n"
    done = run_python(site, change.env({"PYTHONPATH": str(site)}), code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["no scalars or ones", "kept"]

    # Newest first (`git log -p` as it prints by default): the order cannot be honored.
    newest_first = git_diff(path, first, second, tmp=tmp_path) + git_diff(
        path, FUNCTIONAL, first, tmp=tmp_path
    )
    with pytest.raises(
        ChangeError,
        match=r"my.patch: torch/nn/functional.py: section 1 \(line 1 of the diff\), hunk 1 "
        r".* not in the installed file .*`git log -p --reverse`",
    ):
        prepare(newest_first, site, source="my.patch", cache_dir=tmp_path / "c")
    # Two edits of one line, each made against the installed file: the second cannot follow.
    both = git_diff(path, FUNCTIONAL, first, tmp=tmp_path)
    other = git_diff(path, FUNCTIONAL, FUNCTIONAL.replace("x == 0", "x < 0"), tmp=tmp_path)
    line = len(both.splitlines()) + 1
    with pytest.raises(
        ChangeError,
        match=rf"torch/nn/functional.py: section 2 \(line {line} of the diff\), hunk 1 .* not "
        r"in the text the sections before it made",
    ):
        prepare(both + other, site, source="my.patch", cache_dir=tmp_path / "c")


@pytest.mark.parametrize(
    "name",
    ["torch/../torch/nn/functional.py", "./torch/nn/functional.py", "torch//nn/functional.py"],
)
def test_a_path_is_applied_under_its_repository_path(name: str, site: Path, tmp_path: Path) -> None:
    diff = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    change = prepare(diff.replace("torch/nn/functional.py", name), site, cache_dir=tmp_path / "c")
    plain = prepare(diff, site, cache_dir=tmp_path / "c")
    assert change.applied == plain.applied
    done = run_python(
        site, change.env({"PYTHONPATH": str(site)}), "import torch.nn.functional as F\nF.glu(1)"
    )
    assert "no scalars" in done.stderr  # the change took effect


@pytest.mark.parametrize(
    ("name", "why"),
    [("torch/../../x.py", "leads out of the repository"), ("/tmp/x.py", "is an absolute path")],
)
def test_a_path_outside_the_tree_is_refused(
    name: str, why: str, site: Path, tmp_path: Path
) -> None:
    diff = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    with pytest.raises(ChangeError, match=rf"my.patch:1: '{re.escape(name)}' {why}"):
        prepare(
            diff.replace("a/torch/nn/functional.py", f"a/{name}").replace(
                "b/torch/nn/functional.py", f"b/{name}"
            ),
            site,
            source="my.patch",
            cache_dir=tmp_path / "c",
        )
    assert not (tmp_path / "c").exists()


def test_an_overlay_edited_after_it_was_written_is_made_again_never_believed(
    site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The overlay folder is keyed by the change; one edited since (a reverted module, a
    same-named folder with other texts) is said and written again before anything runs."""
    diff = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    first = prepare(diff, site, cache_dir=tmp_path / "cache")
    [module] = Path(first.folder).glob("*.torch.nn.functional.py")
    module.write_text(FUNCTIONAL)  # the break taken out behind the runner's back
    again = prepare(diff, site, cache_dir=tmp_path / "cache")
    assert again.folder == first.folder
    assert "does not hold the change's texts" in capsys.readouterr().err
    [module] = Path(again.folder).glob("*.torch.nn.functional.py")
    assert module.read_text() == BROKEN_GLU
    code = "import torch.nn.functional as F\ntry:\n    F.glu(1)\nexcept RuntimeError as e:\n"
    changed = run_python(site, again.env({"PYTHONPATH": str(site)}), code + "    print(e)\n")
    assert changed.stdout.strip() == "no scalars", changed.stderr


def test_overlays_no_run_used_for_a_day_are_pruned(site: Path, tmp_path: Path) -> None:
    from workflows.runner.change_overlay.overlay_files import UNUSED_S, prune

    cache = tmp_path / "cache"
    old = prepare(git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path), site,
                  cache_dir=cache)  # fmt: skip
    stale = Path(old.folder)
    os.utime(stale, (0, 0))
    new_text = FUNCTIONAL.replace("if x == 0:", "if x < 0:")
    fresh = prepare(git_diff("torch/nn/functional.py", FUNCTIONAL, new_text, tmp=tmp_path), site,
                    cache_dir=cache)  # fmt: skip
    assert not stale.exists() and Path(fresh.folder).is_dir()  # pruned when the next is made
    assert prune(cache, unused_s=UNUSED_S) == []  # the one just used stays


def test_a_users_own_sitecustomize_runs_on_the_changed_side_too(site: Path, tmp_path: Path) -> None:
    """The overlay's sitecustomize comes first on the changed side's path; the user's own,
    further on, still runs there, as it does on the base side (a failing one is said, and
    the process goes on, as Python does)."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    diff = git_diff("torch/nn/functional.py", FUNCTIONAL, BROKEN_GLU, tmp=tmp_path)
    change = prepare(diff, site, cache_dir=tmp_path / "cache")
    code = "import os, torch.nn.functional as F\nprint(os.environ.get('USER_SITE_RAN'), F.__file__)"
    path = os.pathsep.join((str(site), str(user)))
    base = run_python(site, {"PYTHONPATH": path}, code)
    changed = run_python(site, change.env({"PYTHONPATH": path}), code)
    assert base.stdout.split()[0] == "yes", base.stderr
    assert changed.stdout.split()[0] == "yes", changed.stderr
    (user / "sitecustomize.py").write_text("raise RuntimeError('user site broke')\n")
    failing = run_python(site, change.env({"PYTHONPATH": path}), code)
    assert failing.returncode == 0 and "user site broke" in failing.stderr
