"""Any PrivateUse1 backend: the suites run against a second backend registered under another
device name (`tests/backends/otherdev`), chosen by configuration alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.testing.cli import build_inventory, spyre_ci
from tests.testing.paths import GLU_PATCH, GLU_SPEC, REPO_ROOT

GLU = "glu::compare_cpu::nn.functional.glu::float32"


@pytest.mark.long
def test_a_run_against_another_backend_uses_its_device(tmp_path: Path) -> None:
    marker = tmp_path / "registered.txt"
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "SPYRE_CI_BACKEND": "otherdev",
        "SPYRE_CI_DEVICE": "otherdev",
        "OTHERDEV_MARKER": str(marker),
        "PYTHONPATH": os.pathsep.join(
            [str(REPO_ROOT / "tests" / "backends"), os.environ.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep),
    }
    inventory = build_inventory(GLU_SPEC, tmp_path / "glu.json.gz", env)
    done = spyre_ci(
        "run", "--diff", str(GLU_PATCH), "--inventory", str(inventory), "--specs", str(GLU_SPEC),
        "--holdout", "0", "--jobs", "1", "--no-progress", "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["environment"]["backend"] == "otherdev"
    assert record["environment"]["device"] == "otherdev"
    assert {r["id"]: r["classification"] for r in record["results"]}[GLU] == "new"
    assert "device 'otherdev'" in done.stdout
    # Every process that ran the tests registered the device under its own name, never spyre.
    names = {line.split()[1] for line in marker.read_text().splitlines()}
    assert names == {"otherdev"}
