"""`spyre-ci suites audit`: xfails that pass, other failures, stale skips, orphans, the patch."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from selector.history import HistoryUpdate, OutcomeRecord
from suites.audit import same_failure, version_condition
from suites.model import Status
from suites.spec_patch import removal_patch
from tests.testing.paths import REPO_ROOT
from tests.testing.processes import free_port
from workflows.cli.main import main
from workflows.settings import Settings
from workflows.stores.history import open_history

UPSTREAM_LIKE = REPO_ROOT / "tests" / "suites" / "upstream_like"

SPEC = """\
# A tiny suite for the audit tests.
test_suite_config:
  name: mini
  opinfo:
    - db: op_db
      templates: [compare_cpu]
      ops:
        include: [{name: add}, {name: mul}]
      dtypes: [float32, bfloat16]
      unlisted_test_mode: mandatory_success
      tests:
        - ops: [mul]
          dtypes: [bfloat16]
          mode: skip
          reason: not supported on torch < 2.5
      expectations_file: mini.expectations.yaml
"""

EXPECTATIONS = """\
# Generated, then edited by hand.
version: 1
expectations:
# add: bf16 rounding
- id: mini::compare_cpu::add::bfloat16
  mode: xfail
  reason: 'AssertionError: Tensor-likes are not close! max abs diff: 0.5'
- id: mini::compare_cpu::add::float32
  mode: xfail
  reason: 'AssertionError: Tensor-likes are not close! max abs diff: 0.1'
- id: mini::compare_cpu::no_such_op::float32
  mode: xfail
  reason: 'RuntimeError: gone upstream'
- id: mini::compare_cpu::mul::float8
  mode: skip
  reason: 'timeout: hung'
# mul: known
- id: mini::compare_cpu::mul::float32
  mode: xfail
  reason: 'AssertionError: Tensor-likes are not close! max abs diff: 0.25'
"""

XPASS = "mini::compare_cpu::add::bfloat16"


def _end(vid: str, status: str, message: str = "") -> str:
    record = {"event": "end", "id": vid, "status": status, "duration_s": 0.1, "message": message}
    return json.dumps(record) + "\n"


RESULTS = (
    json.dumps({"event": "start", "id": XPASS})
    + "\n"
    + _end(XPASS, "xpassed", "AssertionError")
    + _end("mini::compare_cpu::add::float32", "xfailed", "E   RuntimeError: cannot lower aten::add")
    + _end(
        "mini::compare_cpu::mul::float32",
        "xfailed",
        "E   AssertionError: Tensor-likes are not close!\nGreatest absolute difference: 0.3",
    )
)


@pytest.fixture()
def spec_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "mini.yaml").write_text(SPEC, encoding="utf-8")
    (folder / "mini.expectations.yaml").write_text(EXPECTATIONS, encoding="utf-8")
    return folder


def _audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["suites", "audit", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def _by_kind(report: dict) -> dict[str, dict[str, dict]]:  # type: ignore[type-arg]
    out: dict[str, dict[str, dict]] = {}  # type: ignore[type-arg]
    for f in report["findings"]:
        out.setdefault(f["kind"], {})[f["subject"]] = f
    return out


def test_results_audit_finds_each_and_the_patch_applies_and_lints(
    spec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "run.jsonl"
    results.write_text(RESULTS, encoding="utf-8")
    patch = tmp_path / "audit.diff"
    code, report = _audit(
        capsys, "--specs", str(spec_dir), "--results", str(results), "--patch", str(patch)
    )
    assert code == 5  # findings to act on: a check that answered "no" (1 is new failures)
    found = _by_kind(report)
    exp = spec_dir / "mini.expectations.yaml"
    assert found["xpass"][XPASS]["where"] == f"{exp}:5" and found["xpass"][XPASS]["patched"]
    assert set(found["other_failure"]) == {"mini::compare_cpu::add::float32"}  # mul matches
    orphan = found["orphan"]["mini::compare_cpu::no_such_op::float32"]
    assert orphan["where"] == f"{exp}:11" and orphan["patched"]
    assert "'no_such_op' is not in op_db" in orphan["detail"]
    skip = found["stale_skip"]["mini::compare_cpu::mul::float8"]
    assert "no dtype 'float8'" in skip["detail"] and skip["patched"]
    (version_skip,) = [f for f in found["stale_skip"].values() if not f["patched"]]
    assert version_skip["where"] == f"{spec_dir / 'mini.yaml'}:12"
    assert "'torch < 2.5' no longer holds" in version_skip["detail"]
    assert "op_db sub" in found["uncovered"]  # not selected by the one suite

    # The patch goes to a copy of the spec folder, a git repository of its own.
    repo = tmp_path / "repo"
    shutil.copytree(spec_dir, repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    check = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=repo, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr + patch.read_text()
    subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True)
    patched = (repo / "mini.expectations.yaml").read_text()
    assert "no_such_op" not in patched and "float8" not in patched and XPASS not in patched
    assert "# add: bf16 rounding\n" in patched and "# mul: known\n" in patched  # comments stay
    assert "mini::compare_cpu::add::float32" in patched
    assert main(["suites", "lint", str(repo)]) == 0
    capsys.readouterr()
    code, again = _audit(capsys, "--specs", str(repo), "--results", str(results))
    assert code == 5  # the version skip, the other failure and uncovered ops stay
    assert {"xpass", "orphan"}.isdisjoint(_by_kind(again))


def test_history_xpass_and_text_report(spec_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings.from_env()
    history = open_history(settings.state_dir, settings.redis_url)
    for run, status in (("r1", Status.XFAILED), ("r2", Status.XPASSED)):
        history.apply(run, HistoryUpdate(outcomes=(OutcomeRecord(XPASS, status, 0.1),)))
    assert main(["suites", "audit", "--specs", str(spec_dir)]) == 5
    out = capsys.readouterr().out
    assert out.startswith("audit: 1 xpass, 0 other_failure, 2 stale_skip, ")
    assert "History (" in out
    exp = spec_dir / "mini.expectations.yaml"
    assert f"  {exp}:5: {XPASS} [patch removes]" in out
    assert "passed in 1 of the last 2 run(s)" in out
    assert "... and " in out and "more (--json lists every one)" in out


def test_exit_codes(
    spec_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["suites", "audit", "--specs", str(tmp_path / "nope")]) == 2
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not results\n")
    assert main(["suites", "audit", "--specs", str(spec_dir), "--results", str(junk)]) == 2
    assert "no results in it" in capsys.readouterr().err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.yaml").write_text(
        "test_suite_config:\n  opinfo:\n    - db: nope_db\n      templates: [compare_cpu]\n"
    )
    assert main(["suites", "audit", "--specs", str(broken)]) == 2
    monkeypatch.setenv("SPYRE_CI_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    assert main(["suites", "audit", "--specs", str(spec_dir)]) == 3
    assert "infrastructure error" in capsys.readouterr().err
    monkeypatch.delenv("SPYRE_CI_REDIS_URL")
    # The bundled specs with an empty History: only information (int-only OpInfos).
    code, report = _audit(capsys)
    assert code == 0, [f for f in report["findings"] if f["acts"]]
    assert report["actionable"] == 0


def test_file_suite_names_and_run_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCH_ROOT", str(UPSTREAM_LIKE))
    text = (
        (UPSTREAM_LIKE / "tiny.yaml")
        .read_text()
        .replace(
            "        - names: [TestTiny::test_wrong]\n",
            "        - names: [TestTiny::test_renamed_upstream]\n"
            "          mode: skip\n"
            "          reason: hangs\n"
            "        - names: [TestTiny::test_wrong]\n",
        )
    )
    spec = tmp_path / "tiny.yaml"
    spec.write_text(text)
    run_json = tmp_path / "run.json"
    vid = "tiny::test_tiny_ops::TestTiny::test_wrong::float32"
    run_json.write_text(json.dumps({"results": [{"id": vid, "status": "passed"}]}))
    code, report = _audit(capsys, "--specs", str(spec), "--results", str(run_json))
    assert code == 5
    found = _by_kind(report)
    assert found["xpass"][vid]["where"] == f"{spec}:20" and not found["xpass"][vid]["patched"]
    stale = found["stale_skip"]["TestTiny::test_renamed_upstream"]
    assert stale["where"] == f"{spec}:17" and "names no test" in stale["detail"]


def test_loose_failure_comparison_and_version_conditions() -> None:
    reason = "AssertionError: Tensor-likes are not close! max abs diff: 0.5 at index (1,)"
    assert same_failure(reason, "E  AssertionError: Tensor-likes are not close! max abs diff: 9")
    assert same_failure(reason, "RuntimeError: spyre cannot lower aten::add") is False
    assert same_failure(reason, "AssertionError: shapes differ: torch.Size([2]) vs [3]") is False
    assert same_failure("bf16 rounding of quotients", "AssertionError: x") is None
    assert version_condition("not supported on torch < 2.5", "2.13.0")
    assert version_condition("needs torch 2.14+", "2.13.0") is None
    assert version_condition("fixed in torch 2.13", "2.13.0")
    assert version_condition("broken on torch<=2.13", "2.13.0") is None
    assert version_condition("timeout: hung", "2.13.0") is None


def test_patch_of_every_entry_leaves_an_empty_list(tmp_path: Path) -> None:
    path = tmp_path / "x.expectations.yaml"
    path.write_text(
        "version: 1\nexpectations:  # all of them\n- id: a::b::c::d\n  mode: xfail\n"
        "  reason: r\n- id: a::b::e::d\n  mode: xfail\n  reason: r"
    )
    diff, refused = removal_patch({path: {0, 1}}, tmp_path)
    assert refused == [] and "+expectations: []  # all of them\n" in diff
    assert "\\ No newline at end of file" in diff
    flow = tmp_path / "y.expectations.yaml"
    flow.write_text("version: 1\nexpectations: [{id: a::b::c::d, mode: xfail, reason: r}]\n")
    diff, refused = removal_patch({flow: {0}}, tmp_path)
    assert diff == "" and "not a block-style list item" in refused[0]


def test_a_pass_of_a_variant_that_depends_on_the_cpu_removes_nothing() -> None:
    """An xfail whose reason says it depends on the CPU passes on some CPUs by design: one
    CPU's pass is no `xpass` finding (its entry stays for the CPUs it fails on)."""
    from suites.audit import CPU_DEPENDENT, AuditRule, Observed, xpasses
    from suites.model import Expectation, Status, Variant

    def variant(vid: str, reason: str) -> Variant:
        return Variant(vid, "ops", "numpy_ref", "x", "float16", Expectation.XFAIL, reason, "f:1")

    cpu = variant("ops::numpy_ref::a::float16", f"{CPU_DEPENDENT}: passes with oneDNN fp16")
    plain = variant("ops::numpy_ref::b::float16", "AssertionError: off by 0.25")
    seen = {v.id: Observed((Status.PASSED, Status.PASSED)) for v in (cpu, plain)}
    rules = {"f:1": AuditRule("f:1", Path("f"), 1, "expectations", "ops", Expectation.XFAIL, "r")}
    found = xpasses([cpu, plain], seen, rules)
    assert [f.subject for f in found] == [plain.id]
