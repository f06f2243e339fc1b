"""The upgrade diff over a file suite whose upstream file renamed things between two trees
(tests/suites/upstream_renamed v1 -> v2): renamed variants carry their expectation, new ones
are new-exposed, never regressions; upgrade.patch renames the entries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selector.upgrade import classify
from suites.model import Outcome, Status
from tests.testing.paths import REPO_ROOT
from workflows.cli.main import main

RENAMED = REPO_ROOT / "tests" / "suites" / "upstream_renamed"
PREFIX = "renamed::test_renamed_ops::"


def test_classify_compares_a_renamed_variant_with_its_old_id() -> None:
    old_id, new_id, fresh = "s::t::A::test_x::none", "s::t::A::test_y::none", "s::t::A::new::none"
    rows = classify(
        [old_id],
        [new_id, fresh],
        {old_id: Outcome(old_id, Status.PASSED)},
        {
            new_id: Outcome(new_id, Status.FAILED, message="boom"),
            fresh: Outcome(fresh, Status.FAILED, message="boom"),
        },
        removed=[old_id],
        added=[new_id, fresh],
        renamed={new_id: old_id},
    )
    by_id = {r.id: r for r in rows}
    assert set(by_id) == {new_id, fresh}  # the old id has no row of its own
    assert by_id[new_id].category == "regressed" and by_id[new_id].renamed_from == old_id
    assert by_id[fresh].category == "new-failing"  # new-exposed: never a regression


def _build(version: str, out: Path, spec: Path) -> Path:
    env = {**os.environ, "TORCH_ROOT": str(RENAMED / version), "PYTHONPATH": str(REPO_ROOT)}
    inventory = out / f"{version}.json.gz"
    for command in (
        ["-m", "workflows", "inventory", "--out", str(inventory)],
        [
            "-m",
            "workflows.drivers.upgrade",
            "describe",
            "--out",
            str(out / f"{version}.details.json.gz"),
        ],
    ):
        done = subprocess.run(
            [sys.executable, *command, "--specs", str(spec)],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    return inventory


@pytest.mark.long
def test_offline_upgrade_diff_carries_renames_and_writes_the_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    spec = repo / "renamed.yaml"
    shutil.copy(RENAMED / "renamed.yaml", spec)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    old, new = _build("v1", tmp_path, spec), _build("v2", tmp_path, spec)
    monkeypatch.setenv("TORCH_ROOT", str(RENAMED / "v2"))
    out = tmp_path / "out"
    code = main(
        [
            "upgrade-diff",
            "--from-inventory",
            str(old),
            "--to-inventory",
            str(new),
            "--specs",
            str(spec),
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    data = json.loads((out / "upgrade.json").read_text())
    lines = {r["line"].split(" (")[0] for r in data["renamed"]}
    assert lines == {
        "renamed: TestShapes::test_ones_sum -> TestShapes::test_ones_total",
        "renamed: TestMathDeviceType::test_add -> TestMathDevice::test_add",
        "renamed: TestMathDeviceType::test_mul -> TestMathDevice::test_mul",
        "renamed: abs -> absolute",
        "renamed: neg -> negative",
    }
    assert "renamed: TestShapes::test_ones_sum -> TestShapes::test_ones_total (same body" in printed
    assert data["renamed_classes"] == [
        {
            "suite": "renamed",
            "template": "test_renamed_ops",
            "old": "TestMathDeviceType",
            "new": "TestMathDevice",
            "tests": 2,
        }
    ]
    # Renamed variants are neither removed nor added; only what nothing explains is.
    assert data["removed"] == [
        f"{PREFIX}TestShapes::test_twin::none",
        f"{PREFIX}TestShapes::test_zeros::none",
    ]
    assert data["added"] == []
    (ambiguous,) = data["ambiguous"]
    assert ambiguous["old"] == ["TestShapes::test_twin"]
    exposed = {n["id"]: n["proposed"] for n in data["new_exposed"]}
    assert exposed == {
        f"{PREFIX}TestShapes::test_arange_len::none": "unknown",
        f"{PREFIX}TestShapes::test_twin_left::none": "unknown",
        f"{PREFIX}TestShapes::test_twin_right::none": "unknown",
    }
    reasons = {s["id"]: s["reasons"] for s in data["selected"]}
    add = f"{PREFIX}TestMathDevice::test_add::float32"
    assert reasons[add][0].startswith(f"renamed: {PREFIX}TestMathDeviceType::test_add::float32")
    # The patch renames the entries; applied, the suite lints and decides v2's tests as before.
    patch = out / "upgrade.patch"
    assert data["patch"] == str(patch) and "renames 5 name(s)" in printed
    subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True)
    text = spec.read_text()
    assert "# upstream renamed: neg -> negative (negative lists neg among its aliases" in text
    assert main(["suites", "lint", str(spec)]) == 0
    capsys.readouterr()
    assert main(["suites", "expand", "--specs", str(spec), "--json"]) == 0
    variants = {v["id"]: v["expectation"] for v in json.loads(capsys.readouterr().out)}
    assert variants[add] == "xfail"
    assert variants[f"{PREFIX}TestShapes::test_ones_total::none"] == "pass"
    assert variants[f"{PREFIX}TestUnary::test_unary_negative::float32"] == "pass"
