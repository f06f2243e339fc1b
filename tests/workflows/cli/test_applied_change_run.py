"""A run tests the change itself: the shipped upstream-style Python edit, applied to the real
installed torch in every test process (the warm runner on, as by default), through the CLI
as a user types it. Its failures are new on the changed torch with their base outcome beside
them; a no-op edit stays green; a C++-only change is never reported as tested; a diff that
does not apply is refused before anything is recorded."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.testing.cli import spyre_ci
from tests.testing.paths import GLU_PATCH, GLU_SPEC, SOFTMAX_PATCH

GLU = "glu::compare_cpu::nn.functional.glu::float32"


def run(
    patch: Path, inventory: Path, out: Path, state: Path
) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    env.pop("SPYRE_CI_ZYGOTE", None)  # the default path: the warm runner on
    done = spyre_ci(
        "run", "--diff", str(patch), "--inventory", str(inventory), "--specs", str(GLU_SPEC),
        "--holdout", "0", "--jobs", "1", "--no-progress", "--out", str(out), env=env,
    )  # fmt: skip
    record = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return done, record


@pytest.mark.long
def test_a_breaking_python_edit_fails_on_the_changed_torch_and_is_never_the_baseline(
    glu_inventory: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first, record = run(GLU_PATCH, glu_inventory, tmp_path / "out1", state)
    assert first.returncode == 1, first.stdout + first.stderr
    results = {r["id"]: r for r in record["results"]}
    assert results[GLU]["classification"] == "new"
    assert results[GLU]["base_status"] == "passed"  # A/B: it passes without the change
    assert "batch dimension" in results[GLU]["message"]
    env = record["environment"]
    assert env["tested"] == "tested"
    assert env["torch_git_version"] != "unknown"
    assert [f["path"] for f in env["change"]["applied"]] == ["torch/nn/functional.py"]
    callback = json.loads((tmp_path / "out1" / "callback.json").read_text())
    assert callback["workflow"]["conclusion"] == "failure"
    assert callback["workflow"]["environment"]["tested"] == "tested"
    failed = callback["workflow"]["failed_tests"]
    assert [(f["id"], f["base_status"]) for f in failed] == [(GLU, "passed")]
    row = json.loads((tmp_path / "out1" / "hud" / "crcr_workflow_job.json").read_text())
    assert json.loads(row["environment"])["change"]["applied"][0]["path"] == (
        "torch/nn/functional.py"
    )
    assert "change TESTED" in first.stdout
    assert "applied: torch/nn/functional.py" in first.stdout
    assert f"{GLU} [without the change: passed, run now]" in first.stdout
    report = (tmp_path / "out1" / "report.md").read_text()
    assert "Tested: the change ran on the torch under test." in report.splitlines()[4]
    [kept] = (state / "base-outcomes").glob("*.json")

    # The same change again: its base outcome is read, and says from which run; an entry
    # edited by hand fails its digest and is run again, never believed.
    entries = json.loads(kept.read_text())
    entries[GLU]["outcome"]["status"] = "failed"  # would make the break pre-existing
    kept.write_text(json.dumps(entries))
    again, record = run(GLU_PATCH, glu_inventory, tmp_path / "out2", state)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "do not match their digest" in again.stderr
    assert f"{GLU} [without the change: passed, run now]" in again.stdout
    third, record = run(GLU_PATCH, glu_inventory, tmp_path / "out3", state)
    assert third.returncode == 1, third.stdout + third.stderr
    second_id = json.loads((tmp_path / "out2" / "run.json").read_text())["run_id"]
    assert f"{GLU} [without the change: passed, read from run {second_id}]" in third.stdout
    assert {r["id"]: r for r in record["results"]}[GLU]["base_read"] == second_id

    # A tried patch is not upstream: History learned no baseline from it (a second run of it
    # would find the failure new again).
    from workflows.stores.history import open_history

    learned = open_history(state).snapshot().get(GLU)
    assert learned is not None and learned.baseline is None


@pytest.mark.long
def test_a_no_op_python_edit_stays_green(glu_inventory: Path, tmp_path: Path) -> None:
    text = GLU_PATCH.read_text()
    # The same place, the same behaviour: applied, selected, and nothing breaks.
    no_op = (
        text.split("@@ -1802")[0]
        + "@@ -1802,7 +1802,7 @@ def glu(input: Tensor, dim: int = -1) -> Tensor:\n"
        + '     """\n'
        + "     if has_torch_function_unary(input):\n"
        + "         return handle_torch_function(glu, (input,), input, dim=dim)\n"
        + "-    if input.dim() == 0:\n"
        + "+    if not input.dim():\n"
        + "         raise RuntimeError(\n"
        + '             "glu does not support scalars because halving size must be even"\n'
        + "         )\n"
    )
    patch = tmp_path / "no_op.patch"
    patch.write_text(no_op)
    done, record = run(patch, glu_inventory, tmp_path / "out", tmp_path / "state")
    assert done.returncode == 0, done.stdout + done.stderr
    assert record["environment"]["tested"] == "tested"
    assert record["environment"]["change"]["state"] == "applied"
    assert {r["id"]: r["status"] for r in record["results"]}[GLU] == "passed"
    assert all(r["status"] == "passed" for r in record["results"])
    callback = json.loads((tmp_path / "out" / "callback.json").read_text())
    assert callback["workflow"]["conclusion"] == "success"


def test_a_cpp_only_change_is_never_reported_as_tested(glu_inventory: Path, tmp_path: Path) -> None:
    done, record = run(SOFTMAX_PATCH, glu_inventory, tmp_path / "out", tmp_path / "state")
    assert done.returncode == 4, done.stdout + done.stderr  # not tested: no verdict
    env = record["environment"]
    assert env["tested"] == "not_tested"
    assert {f["path"] for f in env["change"]["not_applied"]} == {
        "aten/src/ATen/native/SoftMax.cpp",
        "aten/src/ATen/native/cpu/SoftMaxKernel.cpp",
    }
    callback = json.loads((tmp_path / "out" / "callback.json").read_text())
    assert callback["workflow"]["conclusion"] == "neutral"
    assert "change NOT TESTED" in done.stdout
    assert "NOT applied: aten/src/ATen/native/SoftMax.cpp" in done.stdout
    assert "NOT TESTED" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # Another torch version's text: the hunk's lines are not in the installed file.
        (
            lambda t: t.replace("-    if input.dim() == 0:", "-    if input.ndim == 0:"),
            r"torch/nn/functional.py: hunk 1 \(@@ -1802,9 @@\) does not apply",
        ),
        # A header that counts more lines than the hunk holds.
        (
            lambda t: t.replace("@@ -1802,9 +1802,10 @@", "@@ -1802,12 +1802,13 @@"),
            r"torch/nn/functional.py: hunk 1 .* the diff is cut",
        ),
        # A module the installed torch does not have.
        (
            lambda t: t.replace("torch/nn/functional.py", "torch/nn/functional_v2.py"),
            r"torch/nn/functional_v2.py: not in the installed torch",
        ),
    ],
)
def test_a_diff_that_does_not_apply_is_bad_input(
    edit: object, expected: str, glu_inventory: Path, tmp_path: Path
) -> None:
    import re

    patch = tmp_path / "bad.patch"
    patch.write_text(edit(GLU_PATCH.read_text()))  # type: ignore[operator]
    done, _record = run(patch, glu_inventory, tmp_path / "out", tmp_path / "state")
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(expected, done.stderr), done.stderr
    assert "the change cannot be applied" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was recorded


# In the default run, a change failing at import is `test_hostile_imports.py`'s
# `test_a_change_that_raises_at_import_is_its_failure_not_an_infrastructure_fault`.
@pytest.mark.long
def test_a_syntax_error_in_the_change_is_its_failure_not_an_infrastructure_fault(
    glu_inventory: Path, tmp_path: Path
) -> None:
    patch = tmp_path / "syntax.patch"
    patch.write_text(
        GLU_PATCH.read_text().replace('got {input.dim()}-D"\n', 'got {input.dim()}-D"(\n')
    )
    done, record = run(patch, glu_inventory, tmp_path / "out", tmp_path / "state")
    assert done.returncode == 1, done.stdout + done.stderr  # a new failure, not exit 3
    assert "INFRASTRUCTURE" not in done.stdout
    assert record["environment"]["change"]["broken"][0].startswith("torch/nn/functional.py:")
    result = {r["id"]: r for r in record["results"]}[GLU]
    assert result["status"] == "error" and result["classification"] == "new"
    assert "the change's failure, not the tool's" in result["message"]
    assert result["base_status"] == "passed"


def test_no_apply_runs_the_installed_torch_and_says_the_change_was_not_tested(
    glu_inventory: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    done = spyre_ci(
        "run", "--diff", str(GLU_PATCH), "--no-apply", "--inventory", str(glu_inventory),
        "--specs", str(GLU_SPEC), "--holdout", "0", "--jobs", "1", "--no-progress",
        "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr  # glu passes; nothing was tested
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["environment"]["tested"] == "not_tested"
    assert "--no-apply" in record["environment"]["notes"][0]
    callback = json.loads((tmp_path / "out" / "callback.json").read_text())
    assert callback["workflow"]["conclusion"] == "neutral"


def test_a_change_that_was_not_tested_is_never_red_nor_blamed(tmp_path: Path) -> None:
    """A C++-only change on a torch that fails a variant by itself (`__rpow__` on spyre, with
    no expectation in this suite): the failure is the torch's, shown as such; no NEW
    FAILURES, no regression window on the event, a neutral callback, exit 4 (not tested)."""
    spec = Path(__file__).resolve().parents[1] / "data" / "torch_fails.yaml"
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPYRE_CI_ZYGOTE", None)
    out = tmp_path / "out"
    # No --inventory: the run builds the Inventory of --specs itself, as a user's does.
    done = spyre_ci(
        "run", "--diff", str(SOFTMAX_PATCH), "--full", "--specs", str(spec), "--holdout", "0",
        "--jobs", "1", "--no-progress", "--out", str(out), env=env,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    assert "NEW FAILURES" not in done.stdout
    assert "ITSELF" in done.stdout and "the change was not applied" in done.stdout
    record = json.loads((out / "run.json").read_text())
    failing = [r for r in record["results"] if r["status"] in ("failed", "error")]
    assert failing, "the suite must hold a variant that fails on the torch itself"
    assert {r["classification"] for r in failing} == {"pre-existing"}
    callback = json.loads((out / "callback.json").read_text())
    assert callback["workflow"]["conclusion"] == "neutral"
    assert not callback.get("triage_verdict") or not callback["triage_verdict"].get("first_bad_sha")
    assert (
        "## New failures (0)" in (out / "report.md").read_text()
        or "0 new" in (out / "report.md").read_text()
    )
