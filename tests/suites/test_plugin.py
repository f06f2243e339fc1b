"""The pytest plugin contract, in real pytest subprocesses on the spyre device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.testing.paths import REPO_ROOT

UPSTREAM_LIKE = REPO_ROOT / "tests" / "suites" / "upstream_like"

SPEC = """\
test_suite_config:
  name: plug
  opinfo:
    - db: op_db
      templates: [compare_cpu]
      ops: {include: [{name: add}, {name: mul}, {name: sub}]}
      dtypes: [float32]
      tests:
        - ops: [mul]
          mode: xfail_strict
          reason: strict xfail that passes -> the run is red
        - ops: [sub]
          mode: skip
          reason: not today
"""

IDS = [
    "plug::compare_cpu::add::float32",
    "plug::compare_cpu::mul::float32",
    "plug::compare_cpu::sub::float32",
    "tiny::test_tiny_ops::TestTiny::test_ones::none",
    "tiny::test_tiny_ops::TestTiny::test_wrong::float32",
    "tiny::test_tiny_ops::TestTiny::test_device_compare::float32",
    "tiny::test_tiny_ops::TestTiny::test_hangs::none",
    "tiny::test_tiny_ops::TestTiny::test_vs_cpu_add::float32",
]


def _pytest(
    tmp_path: Path, ids: list[str], *extra: str, torch_root: str | None = str(UPSTREAM_LIKE)
) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "plug.yaml"
    spec.write_text(SPEC)
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("\n".join(ids) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_ROOT"}
    if torch_root:
        env["TORCH_ROOT"] = torch_root
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "suites.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--spyre-ids",
            str(ids_file),
            "--spyre-specs",
            str(spec),
            "--spyre-specs",
            str(UPSTREAM_LIKE / "tiny.yaml"),
            "--spyre-results",
            str(tmp_path / "out.jsonl"),
            "--junitxml",
            str(tmp_path / "out.xml"),
            "-q",
            "-o",
            "addopts=",
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_selected_variants_run_with_results_and_junit(tmp_path: Path) -> None:
    result = _pytest(tmp_path, IDS)
    assert result.returncode == 1, result.stdout + result.stderr  # strict xpass + timeout
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # Starts in the order of the ids file; each id's end after its start. A failure's end
    # may come later (the device-fault guard holds it until a test passes or the device's
    # probe does), never lost.
    starts = [r["id"] for r in lines if r["event"] == "start"]
    assert starts == IDS
    ends = [r["id"] for r in lines if r["event"] == "end"]
    assert sorted(ends) == sorted(IDS)
    order = [(r["event"], r["id"]) for r in lines]
    assert all(order.index(("start", v)) < order.index(("end", v)) for v in IDS)
    status = {r["id"]: r["status"] for r in lines if r["event"] == "end"}
    assert status == {
        "plug::compare_cpu::add::float32": "passed",
        "plug::compare_cpu::mul::float32": "failed",  # XPASS(strict)
        "plug::compare_cpu::sub::float32": "skipped",
        "tiny::test_tiny_ops::TestTiny::test_ones::none": "passed",
        "tiny::test_tiny_ops::TestTiny::test_wrong::float32": "xfailed",
        "tiny::test_tiny_ops::TestTiny::test_device_compare::float32": "passed",  # cpu_move
        "tiny::test_tiny_ops::TestTiny::test_hangs::none": "timeout",
        "tiny::test_tiny_ops::TestTiny::test_vs_cpu_add::float32": "passed",
    }
    ends = {r["id"]: r for r in lines if r["event"] == "end"}
    assert (
        "no result after 2 s" in ends["tiny::test_tiny_ops::TestTiny::test_hangs::none"]["message"]
    )
    assert ends["plug::compare_cpu::sub::float32"]["message"] == "not today"
    cases = ET.parse(tmp_path / "out.xml").getroot().iter("testcase")
    names = {case.get("name"): case for case in cases}
    assert set(names) == set(IDS)
    assert names["plug::compare_cpu::add::float32"].get("classname") == "plug"
    assert names["tiny::test_tiny_ops::TestTiny::test_hangs::none"].find("failure") is not None


@pytest.mark.long
def test_ids_of_unavailable_or_unloaded_suites_are_a_clear_error(tmp_path: Path) -> None:
    # The environment is wrong (no TORCH_ROOT, a suite that is not loaded): not "removed".
    ids = ["plug::compare_cpu::addd::float32", IDS[3], "nosuch::compare_cpu::add::float32"]
    result = _pytest(tmp_path, ids, torch_root=None)
    assert result.returncode == 4
    assert "2 unknown variant id(s)" in result.stderr
    assert "suite unavailable:" in result.stderr and "${TORCH_ROOT}" in result.stderr
    assert "  nosuch::compare_cpu::add::float32  (suite 'nosuch' not loaded)" in result.stderr
    assert "plug::compare_cpu::addd::float32" not in result.stderr  # that one is removed


@pytest.mark.long
def test_an_id_the_specs_no_longer_have_is_removed_and_the_rest_runs(tmp_path: Path) -> None:
    gone = "plug::compare_cpu::add::float64"  # the spec lists float32 only
    result = _pytest(tmp_path, [IDS[0], gone, IDS[2]], torch_root=None)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # The removed id: one `end` line, no `start`, before the first test.
    assert lines[0]["event"] == "end" and lines[0]["id"] == gone
    assert lines[0]["status"] == "removed" and "no longer exists" in lines[0]["message"]
    assert [(r["event"], r["id"]) for r in lines[1:]] == [
        (event, vid) for vid in (IDS[0], IDS[2]) for event in ("start", "end")
    ]
    assert f"1 variant id(s) removed (not in the loaded specs, not run): {gone}" in result.stdout
    cases = ET.parse(tmp_path / "out.xml").getroot().iter("testcase")
    assert {case.get("name") for case in cases} == {IDS[0], IDS[2]}  # no JUnit row for it


@pytest.mark.long
def test_collect_only_counts_the_variants(tmp_path: Path) -> None:
    result = _pytest(tmp_path, IDS[:3], "--collect-only")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 tests collected" in result.stdout
    assert "plug::plug::compare_cpu::mul::float32" in result.stdout
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()


@pytest.mark.parametrize(
    ("suite", "expected"),
    [
        ("opinfo:\n  - {db: op_db, templates: [compare_cpu, out]}\n", False),
        ("opinfo:\n  - {db: op_db, templates: [compare_cpu]}\n"
         "  - {db: op_db, templates: [compile]}\n", True),
    ],
)  # fmt: skip
def test_a_zygote_preloads_torch_compile_only_for_suites_that_may_compile(
    tmp_path: Path, suite: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suites import pytest_plugin

    spec = tmp_path / "s.yaml"
    body = "version: 1\nname: s\n" + suite
    spec.write_text(
        "test_suite_config:\n" + "".join("  " + line + "\n" for line in body.splitlines())
    )
    assert pytest_plugin.compiles([str(spec)]) is expected
    assert pytest_plugin.compiles(None) is True  # the bundled suites include compile.yaml
    # A file suite's tests are upstream's, which may compile.
    monkeypatch.setenv("TORCH_ROOT", str(UPSTREAM_LIKE))
    assert pytest_plugin.compiles([str(UPSTREAM_LIKE / "tiny.yaml")]) is True
