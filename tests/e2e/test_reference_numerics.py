"""An edit that changes an op's numerics on the CPU and on spyre alike is caught.

`examples/changes/softsign_offset.patch` changes softsign's formula in the installed torch's
torch/nn/functional.py (`input / (input.abs() + 1)` to `+ 3`). Every CPU comparison runs the
edited formula on both sides and passes; the `numpy_ref` variants compare with the OpInfo's
NumPy reference, which the change does not touch. The run goes the default way: the bundled
Inventory, the shipped trace, the default selector.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing.cli import state_env
from tests.testing.paths import REPO_ROOT

PATCH = REPO_ROOT / "examples" / "changes" / "softsign_offset.patch"
SOFTSIGN_NUMPY_REF = {
    f"ops::numpy_ref::nn.functional.softsign::{dtype}"
    for dtype in ("float32", "float16", "bfloat16")
}


@pytest.mark.long
def test_a_numerics_edit_on_both_sides_fails_its_numpy_reference(
    seeded_state: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    shutil.copytree(seeded_state, state)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "workflows", "run", "--diff", str(PATCH), "--jobs", "2",
         "--no-progress", "--out", str(out)],
        cwd=REPO_ROOT,
        env=state_env(state),
        capture_output=True,
        text=True,
        timeout=1800,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "applied: torch/nn/functional.py" in done.stdout
    assert "change TESTED" in done.stdout
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    results = {r["id"]: r for r in record["results"]}
    new = {vid for vid, r in results.items() if r["classification"] == "new"}
    assert new >= SOFTSIGN_NUMPY_REF, sorted(new)
    assert all("softsign" in vid.lower() for vid in new), sorted(new)
    assert all(results[vid]["base_status"] == "passed" for vid in new)  # fine without it
    assert (
        "NumPy reference" in results["ops::numpy_ref::nn.functional.softsign::float32"]["message"]
    )
    # The CPU comparison ran the edited formula on both sides: green, the gap these close.
    compared = [
        r
        for vid, r in results.items()
        if vid.startswith("ops::compare_cpu::nn.functional.softsign::")
    ]
    assert compared and all(r["status"] == "passed" for r in compared), compared
