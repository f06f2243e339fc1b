"""`spyre-ci select` end to end: the real CLI entry point on the example events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selector import History, VariantHistory
from suites.model import Inventory, Status
from tests.testing.paths import EVENTS, REPO_ROOT
from workflows.cli.main import main


@pytest.fixture(scope="module")
def inventory_file(tmp_path_factory: pytest.TempPathFactory, inventory: Inventory) -> Path:
    path = tmp_path_factory.mktemp("inv") / "inventory.json.gz"
    inventory.save(path)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["select", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_softmax_push_explained(
    capsys: pytest.CaptureFixture[str], inventory_file: Path, tmp_path: Path
) -> None:
    plan_file = tmp_path / "plan.json"
    code, out, _ = run_cli(
        capsys,
        "--event",
        str(EVENTS / "push_softmax_kernel.json"),
        "--inventory",
        str(inventory_file),
        "--explain",
        "--plan-out",
        str(plan_file),
    )
    assert code == 0
    assert "decision: targeted" in out
    assert "ops touched: softmax, log_softmax, _log_softmax" in out
    subjects_line = next(line for line in out.splitlines() if line.startswith("selected subj"))
    assert "softmax" in subjects_line and "abs" not in subjects_line.split()
    assert "holdout" in out and "no heuristic matched" in out
    plan = json.loads(plan_file.read_text())
    assert plan["fallback"] is None and plan["holdout"]
    ids = {s["id"] for s in plan["selected"]}
    assert "ops::compare_cpu::softmax::float16" in ids
    assert not any("::abs::" in i or "::matmul::" in i for i in ids)


def test_why_tells_one_variant(capsys: pytest.CaptureFixture[str], inventory_file: Path) -> None:
    event = str(EVENTS / "push_softmax_kernel.json")
    _, out, _ = run_cli(
        capsys,
        "--event",
        event,
        "--inventory",
        str(inventory_file),
        "--why",
        "ops::out::nn.functional.softmax::bfloat16",
    )
    assert "SELECTED with score +0.60" in out
    assert "same op family 'softmax'" in out
    _, out, _ = run_cli(
        capsys,
        "--event",
        event,
        "--inventory",
        str(inventory_file),
        "--why",
        "ops::compare_cpu::abs::float32",
    )
    assert "NOT RUN: no heuristic matched" in out
    _, out, _ = run_cli(
        capsys,
        "--event",
        event,
        "--inventory",
        str(inventory_file),
        "--why",
        "ops::compare_cpu::nn.functional.dropout::float64",
    )
    assert "declared skip" in out and "test_ops.yaml:12" in out


def test_docs_only_and_build(capsys: pytest.CaptureFixture[str], inventory_file: Path) -> None:
    code, out, _ = run_cli(
        capsys, "--event", str(EVENTS / "push_docs_only.json"), "--inventory", str(inventory_file)
    )
    assert code == 0 and out.startswith("decision: none")
    assert "selected 0 of" in out
    code, out, _ = run_cli(
        capsys,
        "--diff",
        str(EVENTS / "push_build_cmake.patch"),
        "--inventory",
        str(inventory_file),
        "--budget",
        "3",
    )
    assert code == 0 and out.startswith("decision: full (change reaches every op")


def test_history_budget_and_trial_options(
    capsys: pytest.CaptureFixture[str], inventory_file: Path, tmp_path: Path
) -> None:
    history = History(
        variants={"ops::errors::cat::float32": VariantHistory(recent=(Status.FAILED,))}
    )
    hist_file = tmp_path / "history.json"
    hist_file.write_text(json.dumps(history.to_json()))
    plan_file = tmp_path / "p.json"
    code, _, _ = run_cli(
        capsys,
        "--event",
        str(EVENTS / "dispatch_crcr_push.json"),
        "--inventory",
        str(inventory_file),
        "--history",
        str(hist_file),
        "--budget",
        "5",
        "--trial",
        "watch",
        "--shards",
        "2",
        "--plan-out",
        str(plan_file),
    )
    assert code == 0
    plan = json.loads(plan_file.read_text())
    assert len(plan["selected"]) == 5
    assert "ops::errors::cat::float32" in {s["id"] for s in plan["selected"]}
    assert plan["budget"]["kind"] == "count" and "watch" in plan["trial"]
    assert len(plan["shards"]) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--event", "missing.json"], "missing.json: no such event file"),
        (["--diff", "missing.patch"], "missing.patch: cannot read the diff"),
        (
            ["--event", str(EVENTS / "push_softmax_kernel.json"), "--inventory", "nope.json.gz"],
            "spyre-ci inventory --out nope.json.gz",
        ),
        (
            ["--event", str(EVENTS / "push_softmax_kernel.json"), "--trial", "nope"],
            "unknown heuristic",
        ),
    ],
)
def test_clear_errors(
    capsys: pytest.CaptureFixture[str], inventory_file: Path, argv: list[str], message: str
) -> None:
    if "--inventory" not in argv:
        argv = [*argv, "--inventory", str(inventory_file)]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err


def test_ignored_delivery_is_an_error(
    capsys: pytest.CaptureFixture[str], inventory_file: Path, tmp_path: Path
) -> None:
    data = json.loads((EVENTS / "push_docs_only.json").read_text())
    data["payload"]["ref"] = "refs/heads/feature"
    event = tmp_path / "feature.json"
    event.write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "--event", str(event), "--inventory", str(inventory_file))
    assert code == 2 and "triggers no run" in err and "feature" in err


def test_installed_command_runs_without_torch(inventory_file: Path) -> None:
    probe = (
        "import sys\nfrom workflows.cli.main import main\n"
        f"code = main(['select', '--event', {str(EVENTS / 'nightly.json')!r}, "
        f"'--inventory', {str(inventory_file)!r}])\n"
        "print('torch' in sys.modules, code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "decision: full (nightly run" in result.stdout
    assert result.stdout.strip().endswith("False 0")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"variants": {"a::b::c::d": {"recent": ["exploded"]}}}', "variants.a::b::c::d.recent.0"),
        ('{"co_failures": []}', "co_failures: expected an object, not a list"),
        ('{"variants": ', "history.json:1:14: invalid JSON"),
    ],
)
def test_bad_history_file_names_file_and_field(
    capsys: pytest.CaptureFixture[str],
    inventory_file: Path,
    tmp_path: Path,
    content: str,
    message: str,
) -> None:
    bad = tmp_path / "history.json"
    bad.write_text(content)
    code, _, err = run_cli(
        capsys,
        "--event",
        str(EVENTS / "push_softmax_kernel.json"),
        "--inventory",
        str(inventory_file),
        "--history",
        str(bad),
    )
    assert code == 2
    assert str(bad) in err and message in err


def test_a_miscounted_diff_is_refused_as_run_refuses_it(
    capsys: pytest.CaptureFixture[str], inventory_file: Path, tmp_path: Path
) -> None:
    """A hunk header that counts more lines than the hunk holds (a cut or hand-edited diff)
    is bad input, never a silent full run of the whole Inventory."""
    text = (REPO_ROOT / "examples" / "changes" / "glu_batch_check.patch").read_text()
    patch = tmp_path / "miscounted.patch"
    patch.write_text(text.replace("@@ -1802,9 +1802,10 @@", "@@ -1802,12 +1802,13 @@"))
    code, out, err = run_cli(capsys, "--diff", str(patch), "--inventory", str(inventory_file))
    assert code == 2 and "miscounted.patch: a hunk counts more lines" in err
    assert "selected" not in out
