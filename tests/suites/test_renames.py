"""Upstream renames: matching on evidence (`suites.renames`), and `suites audit --since-root`
over tests/suites/upstream_renamed/ (v1: the file as it was; v2: a release later)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from suites.model import Outcome, Status
from suites.renames import RenameRecord, find_renames
from tests.testing.paths import REPO_ROOT
from workflows.cli.main import main

RENAMED = REPO_ROOT / "tests" / "suites" / "upstream_renamed"
PREFIX = "renamed::test_renamed_ops::"


def _record(subject: str, body: str, dtype: str = "none", **kw: object) -> RenameRecord:
    test = kw.pop("test", subject)
    return RenameRecord(
        id=f"s::t::{subject}::{dtype}",
        suite="s",
        template="t",
        subject=subject,
        dtype=dtype,
        test=str(test),
        body=body,
        **kw,  # type: ignore[arg-type]
    )


def test_matching_needs_one_to_one_evidence() -> None:
    old = [
        _record("A::test_x", "b1", "float32"),
        _record("A::test_x", "b1", "float16"),
        _record("A::test_gone", "b2"),
        _record("A::test_twin_1", "b3"),
        _record("A::test_twin_2", "b3"),
        _record("A::test_no_body", ""),
        _record("A::test_op_foo", "b4", "float32", test="A::test_op", op="foo"),
        _record("A::test_kept", "b5"),
    ]
    new = [
        _record("A::test_y", "b1", "float32"),
        _record("A::test_y", "b1", "float16"),
        _record("A::test_twin_3", "b3"),
        _record("A::test_other_body", ""),
        # Another definition, but it lists the old OpInfo among its aliases.
        _record("A::test_op_bar", "b9", "float32", test="A::test_op", op="bar", aliases=("foo",)),
        _record("A::test_kept", "b5"),
        _record("A::test_fresh", "b6"),
        _record("A::test_fails", "b7"),
        _record("A::test_hangs", "b8"),
    ]
    outcomes = {
        "s::t::A::test_fresh::none": Outcome("s::t::A::test_fresh::none", Status.PASSED),
        "s::t::A::test_fails::none": Outcome(
            "s::t::A::test_fails::none", Status.FAILED, message="E   RuntimeError: no kernel"
        ),
        "s::t::A::test_hangs::none": Outcome("s::t::A::test_hangs::none", Status.TIMEOUT),
    }
    found = find_renames(old, new, outcomes)
    by_old = {r.old: r for r in found.renamed}
    assert set(by_old) == {"A::test_x", "A::test_op_foo"}
    x = by_old["A::test_x"]
    assert x.kind == "test" and x.new == "A::test_y"
    assert "same body, digest b1" in x.evidence and "test test_x -> test_y" in x.evidence
    assert [a.split("::")[-1] for a, _ in x.variants] == ["float16", "float32"]
    op = by_old["A::test_op_foo"]
    assert op.kind == "opinfo" and (op.old_test, op.new_test) == ("foo", "bar")
    assert "bar lists foo among its aliases" in op.evidence
    # Two old tests with one body and one new: nothing carried, both stay removed.
    (twin,) = found.ambiguous
    assert twin.old == ("A::test_twin_1", "A::test_twin_2") and twin.new == ("A::test_twin_3",)
    assert found.removed == [
        "s::t::A::test_gone::none",
        "s::t::A::test_no_body::none",
        "s::t::A::test_twin_1::none",
        "s::t::A::test_twin_2::none",
    ]
    proposed = {n.id.split("::")[3]: (n.proposed, n.why) for n in found.new_exposed}
    assert proposed == {
        "test_fresh": ("pass", "passed"),
        "test_fails": ("xfail", "RuntimeError: no kernel"),
        "test_hangs": ("skip", "timeout"),
        "test_twin_3": ("unknown", "not run: run it"),
        "test_other_body": ("unknown", "not run: run it"),
    }
    assert found.pairs() == {b: a for r in found.renamed for a, b in r.variants}


def test_a_class_rename_is_one_finding_when_every_test_moved() -> None:
    old = [_record("Old::test_a", "a", test="Old::test_a"), _record("Old::test_b", "b")]
    new = [_record("New::test_a", "a", test="New::test_a"), _record("New::test_b", "b")]
    found = find_renames(old, new)
    assert {r.kind for r in found.renamed} == {"class"}
    (cls,) = found.classes
    assert (cls.old, cls.new, cls.tests) == ("Old", "New", 2)
    # One test left behind in the old class: no class rename, the moved test still is.
    found = find_renames([*old, _record("Old::test_c", "c")], new)
    assert not found.classes and len(found.renamed) == 2


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["suites", "audit", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_audit_since_root_carries_entries_and_the_patch_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCH_ROOT", str(RENAMED / "v2"))
    repo = tmp_path / "repo"
    repo.mkdir()
    spec = repo / "renamed.yaml"
    shutil.copy(RENAMED / "renamed.yaml", spec)
    results = tmp_path / "run.jsonl"
    arange = f"{PREFIX}TestShapes::test_arange_len::none"
    results.write_text(
        json.dumps({"event": "end", "id": arange, "status": "passed", "duration_s": 0.1}) + "\n"
    )
    patch = tmp_path / "renames.diff"
    code, report = _audit(
        capsys,
        "--specs",
        str(spec),
        "--since-root",
        str(RENAMED / "v1"),
        "--results",
        str(results),
        "--patch",
        str(patch),
    )
    assert code == 5  # findings to act on
    renamed = {f["subject"]: f for f in report["findings"] if f["kind"] == "renamed"}
    assert set(renamed) == {
        "TestShapes::test_ones_sum -> TestShapes::test_ones_total",
        "TestMathDeviceType::test_add -> TestMathDevice::test_add",
        "TestMathDeviceType::test_mul -> TestMathDevice::test_mul",
        "abs -> absolute",
        "neg -> negative",
        "class TestMathDeviceType -> TestMathDevice",
        "TestShapes::test_twin -> ?",
    }
    ones = renamed["TestShapes::test_ones_sum -> TestShapes::test_ones_total"]
    assert ones["patched"] and "same body, digest" in ones["detail"]
    assert "over the same OpInfo definition" in renamed["abs -> absolute"]["detail"]
    assert "negative lists neg among its aliases" in renamed["neg -> negative"]["detail"]
    twin = renamed["TestShapes::test_twin -> ?"]
    assert "ambiguous" in twin["detail"] and not twin["patched"]
    # The renamed test's old name is no orphan any more; the removed and the ambiguous are.
    orphans = {f["subject"] for f in report["findings"] if f["kind"] == "orphan"}
    assert orphans == {"TestShapes::test_zeros", "TestShapes::test_twin"}
    exposed = {f["subject"]: f for f in report["findings"] if f["kind"] == "new_exposed"}
    assert set(exposed) == {
        arange,
        f"{PREFIX}TestShapes::test_twin_left::none",
        f"{PREFIX}TestShapes::test_twin_right::none",
    }
    assert "proposed: pass (passed)" in exposed[arange]["detail"]
    assert "regression" not in json.dumps(report["counts"])
    assert report["renames"]["removed"] == [
        f"{PREFIX}TestShapes::test_twin::none",
        f"{PREFIX}TestShapes::test_zeros::none",
    ]

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    check = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=repo, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr + patch.read_text()
    subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True)
    text = spec.read_text()
    assert "- TestShapes::test_ones_sum" not in text and "- TestShapes::test_ones_total" in text
    assert "# upstream renamed: TestShapes::test_ones_sum -> TestShapes::test_ones_total" in text
    assert "      - name: absolute\n" in text and "      - name: negative\n" in text
    assert main(["suites", "lint", str(spec)]) == 0
    capsys.readouterr()
    # Over v2 the patched entries decide the renamed tests as the old ones did.
    assert main(["suites", "expand", "--specs", str(spec), "--json"]) == 0
    variants = {v["id"]: v for v in json.loads(capsys.readouterr().out)}
    ones_v = variants[f"{PREFIX}TestShapes::test_ones_total::none"]
    assert ones_v["expectation"] == "pass" and ones_v["rule"].startswith(f"{spec}:")
    add = variants[f"{PREFIX}TestMathDevice::test_add::float16"]
    assert (add["expectation"], add["reason"]) == ("xfail", "float16 math is not supported")
    assert variants[f"{PREFIX}TestUnary::test_unary_absolute::float32"]["expectation"] == "pass"
    assert f"{PREFIX}TestUnary::test_unary_negative::float32" in variants
    # Audited again, the carried names are settled: only what was never carried is left.
    code, again = _audit(
        capsys, "--specs", str(spec), "--since-root", str(RENAMED / "v1"), "--results", str(results)
    )
    assert not [f for f in again["findings"] if f["kind"] == "renamed" and f["patched"]]


def test_since_root_must_be_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "suites",
            "audit",
            "--specs",
            str(RENAMED / "renamed.yaml"),
            "--since-root",
            str(tmp_path / "nope"),
        ]
    )
    assert code == 2
    assert "--since-root" in capsys.readouterr().err
