"""A change to upstream's test files is tested: a file a file suite reuses
(`${TORCH_ROOT}/test/...`) takes the change in a mirror of TORCH_ROOT that only the changed
side's test processes import, its edited tests are selected and run there, and a run that
runs none of them never says the change was tested. A hunk that does not apply to
TORCH_ROOT is bad input; a test file no suite reuses has no effect, and the run says so.

End to end on `tests/suites/upstream_like/` (TORCH_ROOT) with `tiny.yaml`."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
from pathlib import Path

import pytest

from contracts import tested as verdict
from contracts.event import TriggerEvent
from selector import ChangeSet
from suites.loader import EDITED_TESTS_VAR
from tests.testing.cli import build_inventory, cli, spyre_ci
from tests.testing.paths import REPO_ROOT
from tests.testing.shared import built_once
from workflows.run.run_model import ChangeUnderTest, EnvironmentUnderTest, RunRequest
from workflows.run.under_test import not_applied, reached
from workflows.runner.change_overlay import (
    TREE_VAR,
    ChangeError,
    FileEffect,
    UpstreamTests,
    prepare,
)
from workflows.runner.change_overlay.prepare import WHY_BESIDE_REUSED, WHY_UNUSED_TEST
from workflows.stores.sources import reused_tests, tests_root, with_old_sources

TESTED, PARTIAL, NOT_TESTED = (
    verdict.Tested.TESTED,
    verdict.Tested.PARTIAL,
    verdict.Tested.NOT_TESTED,
)

UPSTREAM_LIKE = REPO_ROOT / "tests" / "suites" / "upstream_like"
TINY = UPSTREAM_LIKE / "tiny.yaml"
OPS_FILE = "test/test_tiny_ops.py"
OPS_TEXT = (UPSTREAM_LIKE / OPS_FILE).read_text()
ONES = "tiny::test_tiny_ops::TestTiny::test_ones::none"
ONES_LINE = "self.assertEqual(torch.ones(3, device=device).sum().item(), 3.0)"


def edit_diff(path: str, old: str, new: str) -> str:
    """A unified diff (`diff -u` form, no function context) of one file."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(lines)


def ops_edit(old: str, new: str) -> str:
    assert old in OPS_TEXT
    return edit_diff(OPS_FILE, OPS_TEXT, OPS_TEXT.replace(old, new, 1))


@pytest.fixture(scope="module")
def upstream_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inventory of tiny.yaml over the upstream-like tree (9 variants)."""
    env = {**os.environ, "TORCH_ROOT": str(UPSTREAM_LIKE)}
    return built_once(
        tmp_path_factory, "upstream-tiny.json.gz", lambda p: build_inventory(TINY, p, env=env)
    )


# -- the overlay of TORCH_ROOT ------------------------------------------------------------


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """A small upstream checkout: a reused test file, a sibling it imports, other entries."""
    root = tmp_path / "pytorch"
    (root / "test" / "nested").mkdir(parents=True)
    (root / "test" / "test_a.py").write_text("from common_a import VALUE\n\nX = VALUE\n")
    (root / "test" / "common_a.py").write_text("VALUE = 1\n")
    (root / "test" / "nested" / "test_b.py").write_text("Y = 2\n")
    (root / "test" / "__pycache__").mkdir()  # the checkout's bytecode: never the mirror's
    (root / "README.md").write_text("upstream\n")
    return root


def test_a_reused_test_file_is_applied_to_a_mirror_of_torch_root(
    checkout: Path, tmp_path: Path
) -> None:
    diff = edit_diff("test/test_a.py", "from common_a import VALUE\n\nX = VALUE\n", "X = 3\n")
    tests = UpstreamTests(checkout, frozenset({"test/test_a.py"}))
    change = prepare(diff, tmp_path / "site", tests=tests, cache_dir=tmp_path / "cache")
    assert change.state == "applied" and not change.folder  # no module of torch changed
    [effect] = change.applied
    assert (effect.path, effect.tree, effect.module) == ("test/test_a.py", TREE_VAR, None)
    # The changed side's TORCH_ROOT, and the edited file named (a zygote leaves it alone)
    assert change.env() == {
        TREE_VAR: change.tree,
        EDITED_TESTS_VAR: str(Path(change.tree) / "test" / "test_a.py"),
    }
    mirror = Path(change.tree)
    assert (mirror / "test" / "test_a.py").read_text() == "X = 3\n"
    assert not (mirror / "test" / "test_a.py").is_symlink()
    for untouched in ("README.md", "test/common_a.py", "test/nested"):
        assert (mirror / untouched).is_symlink()
        assert (mirror / untouched).resolve() == (checkout / untouched).resolve()
    assert not (mirror / "test" / "__pycache__").exists()
    assert (checkout / "test" / "test_a.py").read_text().startswith("from common_a")
    # Prepared again (a shard on another process): the same folder, not rewritten.
    again = prepare(diff, tmp_path / "site", tests=tests, cache_dir=tmp_path / "cache")
    assert (again.id, again.tree) == (change.id, change.tree)
    # The checkout moved on: another mirror, never the stale one.
    (checkout / "test" / "test_a.py").write_text("from common_a import VALUE\n\nX = VALUE\n# +\n")
    moved = prepare(diff, tmp_path / "site", tests=tests, cache_dir=tmp_path / "cache")
    assert moved.tree != change.tree


def test_new_removed_and_nested_test_files(checkout: Path, tmp_path: Path) -> None:
    diff = (
        edit_diff("test/nested/test_b.py", "Y = 2\n", "Y = 5\n")
        + "".join(difflib.unified_diff([], ["Z = 1\n"], "/dev/null", "b/test/test_new.py"))
        + "".join(difflib.unified_diff(["VALUE = 1\n"], [], "a/test/common_a.py", "/dev/null"))
    )
    reused = frozenset({"test/nested/test_b.py", "test/test_new.py", "test/common_a.py"})
    change = prepare(diff, tmp_path, tests=UpstreamTests(checkout, reused), cache_dir=tmp_path)
    assert sorted(f.status for f in change.applied) == ["added", "modified", "removed"]
    mirror = Path(change.tree)
    assert (mirror / "test" / "nested" / "test_b.py").read_text() == "Y = 5\n"
    assert (mirror / "test" / "test_new.py").read_text() == "Z = 1\n"
    assert not (mirror / "test" / "common_a.py").exists()
    assert (mirror / "test" / "test_a.py").is_symlink()


def test_a_hunk_that_does_not_apply_to_torch_root_names_file_and_hunk(
    checkout: Path, tmp_path: Path
) -> None:
    diff = edit_diff("test/test_a.py", "from common_a import ELSE\n\nX = VALUE\n", "X = 3\n")
    tests = UpstreamTests(checkout, frozenset({"test/test_a.py"}))
    with pytest.raises(ChangeError) as refused:
        prepare(diff, tmp_path, tests=tests, cache_dir=tmp_path)
    assert "test/test_a.py: hunk 1 (@@ -1,3 @@) does not apply" in str(refused.value)
    assert f"$TORCH_ROOT's file ({checkout / 'test' / 'test_a.py'})" in str(refused.value)
    # An event's diff (made against upstream's base): named not applied, never run as is.
    loose = prepare(diff, tmp_path, tests=tests, cache_dir=tmp_path, strict=False)
    assert [f.path for f in loose.not_applied] == ["test/test_a.py"]
    assert loose.state == "not_applied" and not loose.tree


def test_a_test_file_no_suite_reuses_has_no_effect(checkout: Path, tmp_path: Path) -> None:
    # Its hunk would not apply either: a file no suite reuses is never looked at.
    diff = edit_diff("test/test_other.py", "nothing like it\n", "X = 1\n")
    unused = prepare(diff, tmp_path, tests=UpstreamTests(checkout, frozenset({"test/test_a.py"})))
    assert unused.state == "none" and not unused.tree and unused.env() == {}
    assert "no file suite reuses" in unused.no_effect[0].why
    unset = prepare(diff, tmp_path, tests=UpstreamTests(None))
    assert "TORCH_ROOT} is unset" in unset.no_effect[0].why


def test_a_helper_a_reused_test_imports_is_never_of_no_effect(
    checkout: Path, tmp_path: Path
) -> None:
    """`test/common_a.py`, imported by the reused `test/test_a.py`: it changes what that test
    does, and is not carried into the mirror it runs from, so the run names it not applied
    (tested in part, or not at all), never "no effect" beside a green verdict. A file the
    reused tests neither import nor could read stays of no effect."""
    (checkout / "test" / "nested" / "helpers.py").write_text("Z = 1\n")
    (checkout / "test" / "common_a.py").write_text("from nested.helpers import Z\n\nVALUE = 1\n")
    tests = UpstreamTests(checkout, frozenset({"test/test_a.py"}))
    helper = edit_diff(
        "test/common_a.py", "from nested.helpers import Z\n\nVALUE = 1\n", "VALUE = 2\n"
    )
    change = prepare(helper, tmp_path, tests=tests, cache_dir=tmp_path, strict=False)
    assert [(f.path, f.why) for f in change.not_applied] == [
        ("test/common_a.py", WHY_BESIDE_REUSED)
    ]
    assert change.state == "not_applied" and not change.no_effect
    # Imported through the helper, from the reused file's folder (`nested.helpers`).
    deeper = edit_diff("test/nested/helpers.py", "Z = 1\n", "Z = 2\n")
    change = prepare(deeper, tmp_path, tests=tests, cache_dir=tmp_path, strict=False)
    assert [f.path for f in change.not_applied] == ["test/nested/helpers.py"]
    # Data beside it (an expect file), read relative to the test file.
    data = "".join(difflib.unified_diff([], ["x\n"], "/dev/null", "b/test/expect/a.expect"))
    change = prepare(data, tmp_path, tests=tests, cache_dir=tmp_path, strict=False)
    assert [f.why for f in change.not_applied] == [WHY_BESIDE_REUSED]
    # Another test file no reused file imports, and a file outside the test tree: no effect.
    other = edit_diff("test/nested/test_b.py", "Y = 2\n", "Y = 3\n")
    change = prepare(other, tmp_path, tests=tests, cache_dir=tmp_path, strict=False)
    assert change.state == "none" and [f.why for f in change.no_effect] == [WHY_UNUSED_TEST]


def test_a_change_to_torch_and_its_tests_gets_both(checkout: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("V = 1\n")
    diff = edit_diff("torch/__init__.py", "V = 1\n", "V = 2\n") + edit_diff(
        "test/test_a.py", "from common_a import VALUE\n\nX = VALUE\n", "X = 3\n"
    )
    tests = UpstreamTests(checkout, frozenset({"test/test_a.py"}))
    change = prepare(diff, site, tests=tests, cache_dir=tmp_path / "cache")
    env = change.env({"PYTHONPATH": ""})
    assert env[TREE_VAR] == change.tree and "SPYRE_CI_CHANGE" in env
    assert Path(change.tree).parent == Path(change.folder)


# -- which files the suites reuse, and their old text for the selector ------------------------


def test_the_files_a_spec_reuses_under_torch_root() -> None:
    assert reused_tests([str(TINY)], UPSTREAM_LIKE) == {OPS_FILE}
    everything = reused_tests([str(UPSTREAM_LIKE)], UPSTREAM_LIKE)
    assert {OPS_FILE, "test/test_tiny_generic.py", "test/test_tiny_plain.py"} <= everything
    assert reused_tests([], UPSTREAM_LIKE) == frozenset()  # the bundled specs: OpInfo only
    assert tests_root({"TORCH_ROOT": str(UPSTREAM_LIKE)}) == UPSTREAM_LIKE
    assert tests_root({}) is None


def test_the_edited_test_is_located_from_torch_root_and_selected(
    upstream_inventory: Path, tmp_path: Path
) -> None:
    diff = ops_edit(ONES_LINE, ONES_LINE.replace("3.0", "4.0"))
    change = with_old_sources(ChangeSet.from_diff(diff), tests=UPSTREAM_LIKE)
    assert change.sources[OPS_FILE] == OPS_TEXT
    patch = tmp_path / "edit.diff"
    patch.write_text(diff)
    env = {**os.environ, "TORCH_ROOT": str(UPSTREAM_LIKE)}
    chosen = cli(
        "select", "--diff", str(patch), "--inventory", str(upstream_inventory), "--explain",
        env=env,
    )  # fmt: skip
    assert chosen.returncode == 0, chosen.stderr
    assert "selected 1 of 9" in chosen.stdout
    assert f"{ONES}  <- upstream_test: upstream test {OPS_FILE}:TestTiny.test_ones" in (
        chosen.stdout
    )


# -- the verdict: tested only by the edited tests' own variants ---------------------------


def _environment(
    *applied: FileEffect, no_effect: tuple[FileEffect, ...] = ()
) -> EnvironmentUnderTest:
    change = ChangeUnderTest(
        "c1", "applied" if applied else "none", applied=applied, no_effect=no_effect
    )
    return EnvironmentUnderTest(change=change, tested=TESTED, headline="the change was tested")


EDITED = FileEffect(OPS_FILE, "modified", "1 hunk", tree=TREE_VAR)
MODULE = FileEffect("torch/nn/functional.py", "modified", "1 hunk", "torch.nn.functional")
INTERNAL = FileEffect(
    "torch/testing/_internal/common_utils.py", "modified", "1 hunk", "x.common_utils"
)
UNUSED = FileEffect("test/test_nn.py", "modified", WHY_UNUSED_TEST)


@pytest.mark.parametrize(
    ("applied", "ids", "tested"),
    [
        ((EDITED,), [ONES], TESTED),
        ((EDITED,), ["ops::compare_cpu::abs::float32"], NOT_TESTED),
        ((EDITED,), [], NOT_TESTED),
        ((EDITED, MODULE), ["ops::compare_cpu::abs::float32"], PARTIAL),
        ((MODULE,), [], TESTED),  # not a test: what the selector chose stands
        ((INTERNAL,), [], NOT_TESTED),
        ((INTERNAL,), ["ops::compare_cpu::abs::float32"], TESTED),
    ],
)
def test_what_runs_decides_whether_edited_tests_were_tested(
    applied: tuple[FileEffect, ...], ids: list[str], tested: str
) -> None:
    planned = reached(_environment(*applied), ids)
    assert planned.tested == tested
    if tested != TESTED:
        assert planned.notes[-1].startswith("edited tests not run:")
        assert planned.headline != "the change was tested"
    # At finish the same verdict, said once.
    assert reached(planned, ids, ran=True).notes == planned.notes


def test_planned_but_none_ran_is_not_tested() -> None:
    planned = reached(_environment(EDITED), [ONES])
    assert planned.tested == TESTED
    finished = reached(planned, [], ran=True)
    assert finished.tested == NOT_TESTED
    assert "none of the variants that test them ran" in finished.notes[-1]
    assert reached(None, [], ran=True) is None


def test_a_change_only_to_tests_no_suite_reuses_is_not_called_tested() -> None:
    alone = reached(_environment(no_effect=(UNUSED,)), [])
    assert alone.tested == NOT_TESTED
    with_module = reached(_environment(MODULE, no_effect=(UNUSED,)), ["ops::x::y::float32"])
    assert with_module.tested == TESTED


def test_no_apply_names_a_reused_test_file_not_applied() -> None:
    diff = ops_edit(ONES_LINE, ONES_LINE.replace("3.0", "4.0")) + edit_diff(
        "test/test_nn.py", "a\n", "b\n"
    )
    request = RunRequest(
        "r1", TriggerEvent("push", "d1", "pytorch/pytorch", ""), "out", "", diff_text=diff
    )
    change = not_applied(request, UpstreamTests(UPSTREAM_LIKE, frozenset({OPS_FILE})))
    assert [f.path for f in change.not_applied] == [OPS_FILE]
    assert [f.path for f in change.no_effect] == ["test/test_nn.py"]


# -- end to end: `spyre-ci run --diff` over the upstream-like tree ------------------------


def run(
    diff: str, inventory: Path, tmp_path: Path, name: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    patch = tmp_path / f"{name}.diff"
    patch.write_text(diff)
    out = tmp_path / name
    env = {
        **os.environ,
        "TORCH_ROOT": str(UPSTREAM_LIKE),
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
    }
    done = spyre_ci(
        "run", "--diff", str(patch), "--inventory", str(inventory), "--specs", str(TINY),
        "--holdout", "0", "--jobs", "1", "--no-progress", "--out", str(out), *extra, env=env,
    )  # fmt: skip
    record = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return done, record


@pytest.mark.long
def test_an_edit_that_breaks_an_upstream_test_is_its_new_failure(
    upstream_inventory: Path, tmp_path: Path
) -> None:
    done, record = run(
        ops_edit(ONES_LINE, ONES_LINE.replace("3.0", "4.0")), upstream_inventory, tmp_path, "red"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    [result] = record["results"]
    assert (result["id"], result["status"], result["classification"]) == (ONES, "failed", "new")
    assert result["base_status"] == "passed"  # A/B: the base side imports TORCH_ROOT as it is
    environment = record["environment"]
    assert environment["tested"] == "tested"
    assert environment["change"]["applied"][0]["tree"] == "TORCH_ROOT"
    assert f"applied: {OPS_FILE}" in done.stdout and "change TESTED" in done.stdout
    assert (UPSTREAM_LIKE / OPS_FILE).read_text() == OPS_TEXT  # the checkout is never written


def test_an_edited_test_runs_in_a_process_forked_from_the_change_s_zygote(
    upstream_inventory: Path, tmp_path: Path
) -> None:
    """The warm runner serves a change to upstream's tests (its own zygote, TORCH_ROOT the
    mirror) and the edited test still runs as edited: red, blamed by A/B on the change."""
    evidence = tmp_path / "forked-from"
    # The edited test records the process its keeper was forked from, then fails.
    record_parent = (
        "import os; keeper = open(f'/proc/{os.getppid()}/stat').read()"
        ".rsplit(')', 1)[1].split()[1]; "
        f"open({str(evidence)!r}, 'wb').write(open(f'/proc/{{keeper}}/cmdline', 'rb').read()); "
    )
    edit = ops_edit(ONES_LINE, record_parent + ONES_LINE.replace("3.0", "4.0"))
    done, record = run(edit, upstream_inventory, tmp_path, "warm")
    assert done.returncode == 1, done.stdout + done.stderr
    [result] = record["results"]
    assert (result["id"], result["status"], result["classification"]) == (ONES, "failed", "new")
    assert result["base_status"] == "passed"
    assert b"workflows.runner.zygote_process" in evidence.read_bytes()


@pytest.mark.parametrize(
    "statement",
    [
        "raise RuntimeError('boom at import')",
        pytest.param("import os; os._exit(9)", marks=pytest.mark.long),
        pytest.param("time.sleep(3600)", marks=pytest.mark.long),
    ],
    ids=["raises", "exits", "hangs"],
)
def test_an_edit_that_breaks_importing_the_test_file_is_the_change_s_failure(
    statement: str, upstream_inventory: Path, tmp_path: Path
) -> None:
    """An edited test file is the change's code, as a changed torch module is: an error, an
    exit or a hang in its import is the change's failure (red, blamed by A/B), never an
    infrastructure fault that would teach nothing and blame the tool."""
    edit = ops_edit("_OPS = [", f"{statement}\n_OPS = [")
    done, record = run(edit, upstream_inventory, tmp_path, "broken", "--test-timeout", "10")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "INFRASTRUCTURE" not in done.stdout and not record["infrastructure"]
    by_id = {r["id"]: r for r in record["results"]}
    assert len(by_id) == 9 and {r["status"] for r in by_id.values()} == {"error"}
    assert (by_id[ONES]["classification"], by_id[ONES]["base_status"]) == ("new", "passed")
    assert "importing the change's test file test/test_tiny_ops.py" in by_id[ONES]["message"]
    assert "the change breaks importing a test file it edits" in by_id[ONES]["message"]


@pytest.mark.slow
def test_a_harmless_edit_runs_green_and_is_tested(upstream_inventory: Path, tmp_path: Path) -> None:
    done, record = run(
        ops_edit(ONES_LINE, ONES_LINE.replace("3.0)", "3)")), upstream_inventory, tmp_path, "ok"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(r["id"], r["status"]) for r in record["results"]] == [(ONES, "passed")]
    assert record["environment"]["tested"] == "tested"
    assert "change TESTED" in done.stdout


@pytest.mark.slow
def test_an_edit_that_removes_the_selected_test_is_not_tested(
    upstream_inventory: Path, tmp_path: Path
) -> None:
    renamed = ops_edit("def test_ones(self, device):", "def test_ones_renamed(self, device):")
    done, record = run(renamed, upstream_inventory, tmp_path, "renamed")
    assert done.returncode == 4, done.stdout + done.stderr  # nothing of it ran: no verdict
    assert record["environment"]["tested"] == "not_tested"
    assert "change NOT TESTED" in done.stdout and "edited tests not run" in done.stdout


def test_a_hunk_that_does_not_apply_to_torch_root_is_bad_input(
    upstream_inventory: Path, tmp_path: Path
) -> None:
    wrong = ops_edit(ONES_LINE, ONES_LINE.replace("3.0", "4.0")).replace(
        " class TestTiny(TestCase):", " class TestTinyElsewhere(TestCase):"
    )
    patch = tmp_path / "wrong.diff"
    patch.write_text(wrong)
    env = {**os.environ, "TORCH_ROOT": str(UPSTREAM_LIKE), "SPYRE_CI_ZYGOTE": "0"}
    done = cli(
        "run", "--diff", str(patch), "--inventory", str(upstream_inventory), "--specs", str(TINY),
        "--no-progress", "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"the change cannot be applied: {patch}: {OPS_FILE}: hunk 1" in done.stderr
    assert "does not apply" in done.stderr and "$TORCH_ROOT" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was recorded


def test_a_test_file_no_suite_reuses_is_said_to_have_no_effect(
    upstream_inventory: Path, tmp_path: Path
) -> None:
    generic = UPSTREAM_LIKE / "test" / "test_tiny_generic.py"
    text = generic.read_text()
    diff = edit_diff(
        "test/test_tiny_generic.py", text, text.replace("import torch\n", "import torch\nE = 1\n")
    )
    patch = tmp_path / "unused.diff"
    patch.write_text(diff)
    env = {**os.environ, "TORCH_ROOT": str(UPSTREAM_LIKE), "SPYRE_CI_ZYGOTE": "0"}
    done = cli(
        "run", "--diff", str(patch), "--inventory", str(upstream_inventory), "--specs", str(TINY),
        "--holdout", "0", "--no-progress", "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr  # nothing of it runs here
    assert "no effect here: test/test_tiny_generic.py" in done.stdout
    assert "change TESTED" not in done.stdout and "selected 0" in done.stdout
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["environment"]["change"]["no_effect"][0]["path"] == "test/test_tiny_generic.py"


@pytest.mark.long
def test_a_run_never_calls_a_helper_edit_tested_nor_of_no_effect(tmp_path: Path) -> None:
    """End to end, as a user types it: a change that edits a torch docstring and a helper a
    reused test file imports (`test/common_tiny.py`, breaking `test_ones`). The run must not
    say the change was tested, nor that the helper has no effect: it names it not applied,
    the change tested in part."""
    import shutil

    root = tmp_path / "pytorch"
    shutil.copytree(UPSTREAM_LIKE, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "test" / "common_tiny.py").write_text("def expected_sum(n):\n    return float(n)\n")
    ops = root / OPS_FILE
    imports = "import time\n\nfrom common_tiny import expected_sum\n"
    uses = ONES_LINE.replace("3.0)", "expected_sum(3))")
    ops.write_text(OPS_TEXT.replace("import time\n", imports, 1).replace(ONES_LINE, uses))
    env = {**os.environ, "TORCH_ROOT": str(root), "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    inventory = build_inventory(root / "tiny.yaml", tmp_path / "tiny.json.gz", env=env)
    import importlib.util

    spec = importlib.util.find_spec("torch")  # found, not imported
    assert spec is not None and spec.submodule_search_locations
    functional = Path(next(iter(spec.submodule_search_locations))) / "nn" / "functional.py"
    text = functional.read_text()
    line = "    Applies element-wise, the function :math:`\\text{SoftSign}(x)"
    assert line in text
    diff = (
        "diff --git a/torch/nn/functional.py b/torch/nn/functional.py\n"
        + edit_diff("torch/nn/functional.py", text, text.replace(line, line.replace("-", ""), 1))
        + "diff --git a/test/common_tiny.py b/test/common_tiny.py\n"
        + edit_diff(
            "test/common_tiny.py",
            "def expected_sum(n):\n    return float(n)\n",
            "def expected_sum(n):\n    return float(n) + 1\n",
        )
    )
    patch = tmp_path / "helper.diff"
    patch.write_text(diff)
    done = spyre_ci(
        "run", "--diff", str(patch), "--inventory", str(inventory), "--specs",
        str(root / "tiny.yaml"), "--holdout", "0", "--jobs", "1", "--no-progress", "--out",
        str(tmp_path / "out"), env=env,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode in (0, 4), output
    assert "change TESTED\n" not in done.stdout and "change TESTED:" not in done.stdout
    assert "no effect here: test/common_tiny.py" not in output
    assert "NOT applied: test/common_tiny.py (imported or read by upstream test files" in output
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["environment"]["tested"] in ("partial", "not_tested")
    assert [f["path"] for f in record["environment"]["change"]["not_applied"]] == [
        "test/common_tiny.py"
    ]


def test_a_compile_check_is_kept_and_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run again of the same change does not compile its modules again: the check's
    result (broken or not) is kept by a digest of path and text, and read back the same."""
    import importlib

    # The module (the package's `prepare` is its function).
    preparing = importlib.import_module("workflows.runner.change_overlay.prepare")
    _broken = preparing._broken
    from workflows.stores import kept

    folder, stores = list(kept._FOLDER), dict(kept._STORES)
    try:
        kept.keep_in(tmp_path / "cache")
        texts = {"torch/a.py": "x = 1\n", "torch/b.py": "def f(:\n", "torch/gone.py": None}
        first = _broken(texts, [])
        assert first == ["torch/b.py:1: invalid syntax"]
        assert len(list((tmp_path / "cache" / "compiles").glob("*.pickle"))) == 2
        compiled = preparing._compiles
        with monkeypatch.context() as patch:
            patch.setattr(preparing, "_compiles", lambda *_: pytest.fail("compiled again"))
            assert _broken(texts, []) == first  # read back, not compiled
        assert compiled("torch/b.py", "def f():\n    pass\n") == []
        assert _broken({"torch/b.py": "def f():\n    pass\n"}, []) == []  # another text
    finally:
        kept._FOLDER[:] = folder
        kept._STORES.clear()
        kept._STORES.update(stores)
