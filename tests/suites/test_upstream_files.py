"""torch-spyre file suites over upstream-style test files (tests/suites/upstream_like/):
several files per process, plain classes, tuple dtypes, exclusions with their rules,
per-test fingerprints from the test's own source."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suites.expand import Expansion, expand, load_suites
from suites.model import Expectation
from tests.testing.paths import REPO_ROOT

UPSTREAM_LIKE = REPO_ROOT / "tests" / "suites" / "upstream_like"
MULTI = UPSTREAM_LIKE / "multi.yaml"
TINY = UPSTREAM_LIKE / "tiny.yaml"


def _expand(*specs: Path, root: Path = UPSTREAM_LIKE) -> Expansion:
    return expand(load_suites(list(specs)), env={"TORCH_ROOT": str(root)})


def _tree(tmp_path: Path, name: str) -> Path:
    """A copy of the fixture tree under its own path (a fresh import of every file)."""
    root = tmp_path / name
    shutil.copytree(UPSTREAM_LIKE, root)
    return root


def test_every_file_of_a_process_expands_whatever_was_imported_before(tmp_path: Path) -> None:
    # Importing a file instantiates test classes and sets up the device; before, every later
    # file's classes were named `...SPYRE` and dropped.
    root = _tree(tmp_path, "order")
    first = _expand(root / "tiny.yaml", root / "multi.yaml", root=root)
    alone = {v.id for v in _expand(root / "multi.yaml", root=root).variants}
    multi = {v.id for v in first.variants if v.suite == "multi"}
    assert multi == alone
    assert len(multi) == 17
    assert {v.template for v in first.variants} == {
        "test_tiny_ops",
        "test_tiny_plain",
        "test_tiny_generic",
    }


def test_plain_parametrized_and_restricted_classes_become_variants() -> None:
    ids = {v.id for v in _expand(MULTI).variants}
    assert "multi::test_tiny_plain::TestPlain::test_ones_sum::none" in ids
    assert "multi::test_tiny_plain::TestPlainNN::test_linear_shape::none" in ids
    # instantiate_parametrized_tests members, governed by the entry naming the test as written
    assert "multi::test_tiny_plain::TestPlainParametrized::test_arange_len_n_1::none" in ids
    assert "multi::test_tiny_plain::TestPlainParametrized::test_arange_len_n_2::none" in ids
    # upstream instantiates it only_for cpu; torch-spyre instantiates it for privateuse1 too
    assert "multi::test_tiny_generic::TestCpuOnlyUpstream::test_restricted::none" in ids


def test_tuple_dtypes_keep_every_combination() -> None:
    ids = {v.id for v in _expand(MULTI).variants}
    combos = {i.rsplit("::", 1)[1] for i in ids if "::test_index_dtypes::" in i}
    # torch-spyre reads one dtype word of the name (float16 of int32_float16): all in
    # supported_dtypes, so all four stay, under ids that keep the whole tuple.
    assert combos == {"int32_float16", "int32_float32", "int64_float16", "int64_float32"}


def test_excluded_variants_are_not_generated_and_name_their_rule() -> None:
    expansion = _expand(MULTI)
    ids = {v.id for v in expansion.variants}
    lines = MULTI.read_text().splitlines()

    def rule_lines(vid: str) -> str:
        """The rule's line and the one above it (a list's rule points at its first item)."""
        gone = expansion.excluded[vid]
        assert vid not in ids and gone.expectation is Expectation.SKIP
        n = int(gone.rule.rsplit(":", 1)[1])
        return "\n".join(lines[n - 2 : n])

    # A listed skip is removed as torch-spyre removes it (not a SKIPPED item).
    skipped = "multi::test_tiny_plain::TestPlain::test_skipped_by_config::none"
    assert "names: [TestPlain::test_skipped_by_config]" in rule_lines(skipped)
    assert expansion.excluded[skipped].reason == "raises on purpose"
    bf16 = "multi::test_tiny_generic::TestGeneric::test_unary_abs::bfloat16"
    assert "supported_dtypes:" in rule_lines(bf16)
    # supported_ops[].dtypes: abs is generated at float32 only
    abs16 = "multi::test_tiny_generic::TestGeneric::test_unary_abs::float16"
    assert "dtypes:" in rule_lines(abs16) and "supported" not in rule_lines(abs16)
    assert "multi::test_tiny_generic::TestGeneric::test_unary_neg::float16" in ids


def test_explain_names_the_rule_of_an_excluded_variant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workflows.cli.commands.suites import cmd_explain
    from workflows.settings import Settings

    monkeypatch.setenv("TORCH_ROOT", str(UPSTREAM_LIKE))
    vid = "multi::test_tiny_generic::TestGeneric::test_unary_abs::float16"
    args = argparse.Namespace(variant_id=vid, specs=[str(MULTI)])
    settings = Settings(state_dir=Path("/nonexistent"), redis_url=None)  # explain reads none
    assert cmd_explain(args, settings) == 0
    out = capsys.readouterr().out
    assert "excluded:" in out and f"decided by:  {MULTI}:" in out
    assert "not in the dtypes global.supported_ops lists for abs" in out


def test_fingerprints_are_per_test_and_follow_its_source(tmp_path: Path) -> None:
    before = {v.id: v for v in _expand(MULTI).variants}
    plain = {i: v.fingerprint for i, v in before.items() if "test_tiny_plain::TestPlain::" in i}
    assert len(set(plain.values())) == len(plain)  # one per test, not one for all
    dtypes = {v.fingerprint for i, v in before.items() if "::test_index_dtypes::" in i}
    assert len(dtypes) == 1  # the dtypes of one test share its source
    # Edit one test, and the helper two tests use: exactly their variants change.
    root = _tree(tmp_path, "edited")
    path = root / "test" / "test_tiny_plain.py"
    text = path.read_text()
    text = text.replace("torch.ones(3).sum().item(), 3.0", "torch.ones(3).sum().item(), 3")
    path.write_text(text)
    after = {v.id: v for v in _expand(root / "multi.yaml", root=root).variants}
    changed = {i for i in before if before[i].fingerprint != after[i].fingerprint}
    assert changed == {"multi::test_tiny_plain::TestPlain::test_ones_sum::none"}
    root2 = _tree(tmp_path, "helper")
    path2 = root2 / "test" / "test_tiny_plain.py"
    path2.write_text(path2.read_text().replace("return t * 2", "return t + t"))
    after2 = {v.id: v for v in _expand(root2 / "multi.yaml", root=root2).variants}
    changed2 = {i for i in before if before[i].fingerprint != after2[i].fingerprint}
    assert changed2 == {
        "multi::test_tiny_plain::TestPlain::test_uses_helper::none",
        "multi::test_tiny_plain::TestPlain::test_other_helper_user::none",
    }
    assert after2["multi::test_tiny_plain::TestPlain::test_uses_helper::none"].sources == (
        "test/test_tiny_plain.py:TestPlain.test_uses_helper",
        "test/test_tiny_plain.py:_double",
    )


WIDEN = UPSTREAM_LIKE / "widen.yaml"
PLAIN_WIDEN = UPSTREAM_LIKE / "plain_widen.yaml"


def test_dtype_includes_and_listed_op_dtypes_widen_what_upstream_generates(
    tmp_path: Path,
) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    abs_info = next(op for op in op_db if op.name == "abs")
    own = (abs_info.dtypes, abs_info.dtypesIf)
    root = _tree(tmp_path, "widen")  # a fresh import, whatever ran before
    # One process, two configs over one file: each gets what torch-spyre generates for it.
    expansion = _expand(root / "plain_widen.yaml", root / "widen.yaml", root=root)
    got = {(v.suite, v.subject.rsplit("::", 1)[1], v.dtype) for v in expansion.variants}
    native = {
        (test, "float32")
        for test in (
            "test_float32_only_abs",
            "test_float32_only_neg",
            "test_not_widened_abs",
            "test_not_widened_neg",
        )
    }
    assert {(t, d) for s, t, d in got if s == "plain_widen"} == native
    # edits.dtypes.include float16 reaches both ops of that test only; abs lists float64,
    # which widens the @ops allowed dtypes of every test using abs (neg supports float64
    # itself, so it is generated too, as torch-spyre's _OOTDtypePatcher does); sin, which
    # edits.ops.include adds to one test's @ops list, gets that test's dtypes.
    assert {(t, d) for s, t, d in got if s == "widen"} == native | {
        ("test_float32_only_sin", "float16"),
        ("test_float32_only_sin", "float32"),
        ("test_float32_only_sin", "float64"),
        ("test_float32_only_abs", "float16"),
        ("test_float32_only_neg", "float16"),
        ("test_float32_only_abs", "float64"),
        ("test_float32_only_neg", "float64"),
        ("test_not_widened_abs", "float64"),
        ("test_not_widened_neg", "float64"),
    }
    # The OpInfo, shared with every other suite of the process, is given back as it was.
    assert abs_info.dtypes is own[0] and abs_info.dtypesIf is not own[1]
    assert abs_info.dtypesIf == own[1]


@pytest.mark.long
def test_a_widened_variant_runs_from_its_own_module(tmp_path: Path) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text(
        "widen::test_tiny_widen::TestWiden::test_float32_only_abs::float16\n"
        "plain_widen::test_tiny_widen::TestWiden::test_float32_only_abs::float32\n"
    )
    out = tmp_path / "r.jsonl"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "suites.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--spyre-specs",
            str(PLAIN_WIDEN),
            "--spyre-specs",
            str(WIDEN),
            "--spyre-ids",
            str(ids),
            "--spyre-results",
            str(out),
            "-q",
            "-o",
            "addopts=",
        ],
        cwd=tmp_path,
        # This checkout's code, whatever the installed package points at.
        env={**os.environ, "TORCH_ROOT": str(UPSTREAM_LIKE), "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ends = {
        r["id"]: r["status"]
        for r in map(json.loads, out.read_text().splitlines())
        if r["event"] == "end"
    }
    assert ends == {i: "passed" for i in ids.read_text().split()}


def test_an_edit_of_a_device_generic_helper_method_selects_its_users_variants() -> None:
    # As `self.is_view_of` in test_view_ops.py: a method of the generic class, called by
    # some of its tests; each test has a variant per op and dtype.
    import difflib

    from selector.changeset import ChangeSet
    from selector.heuristics import REGISTRY
    from selector.heuristics.base import RetrieveContext
    from selector.history import History
    from selector.index import InventoryIndex
    from selector.scout import scout
    from suites.model import Inventory

    path = "test/test_tiny_widen.py"
    old = (UPSTREAM_LIKE / path).read_text()
    inventory = Inventory("2.13.0", "x", tuple(_expand(WIDEN).variants))
    index = InventoryIndex.build(inventory)

    def selected(new: str) -> set[str]:
        assert new != old
        diff = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"a/{path}",
                f"b/{path}",
            )
        )
        changes = ChangeSet.from_diff(diff).with_sources({path: old})
        facts = scout(changes, index)
        ctx = RetrieveContext(facts=facts, index=index, history=History())
        return set(REGISTRY["upstream_test"].score(ctx))

    users = {v.id for v in inventory.variants if "::test_not_widened_" in v.id}
    assert len(users) == 4  # abs and neg, float32 and float64
    helper = old.replace("self.assertEqual(t.cpu().dtype, dtype)", "assert t.cpu().dtype == dtype")
    assert selected(helper) == users
    own = old.replace("sample = next(iter(", "sample = next(iter(  # first sample\n            ")
    assert selected(own) == {v.id for v in inventory.variants} - users


def test_a_file_that_does_not_import_leaves_the_other_files_of_its_suite() -> None:
    # As profiler/test_profiler.py next to test_execution_trace.py in one real config.
    expansion = _expand(UPSTREAM_LIKE / "mixed.yaml")
    assert {v.id for v in expansion.variants} == {
        "mixed::test_tiny_plain::TestPlain::test_ones_sum::none"
    }
    why = expansion.unavailable["mixed"]
    assert "test_tiny_newer.py: import failed: ImportError" in why
    assert "skipIfNoSuchHelper" in why
