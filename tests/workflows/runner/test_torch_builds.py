"""A prepared torch environment for the event's sha is where its tests run: found by the sha
of its torch (never by its folder's name), run with its own interpreter, named in the
verdict as tested, with nothing to apply."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.testing.cli import spyre_ci
from tests.testing.paths import GLU_SPEC, REPO_ROOT
from workflows.runner import torch_builds
from workflows.settings import Settings
from workflows.stores.sources import installed_torch

BUILD_SHA = "1234567890abcdef1234567890abcdef12345678"


def fake_build(folder: Path, sha: str) -> Path:
    """A venv that is this one but for its torch's git sha: every entry of site-packages
    linked in, torch's folder linked entry by entry with a `version.py` of its own."""
    venv = Path(sys.prefix)
    site, _version = installed_torch()
    assert site is not None
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (folder / "bin" / "python").symlink_to(Path(sys.executable))
    target = folder / site.relative_to(venv)
    target.mkdir(parents=True)
    for entry in site.iterdir():
        if entry.name != "torch":
            (target / entry.name).symlink_to(entry)
    (target / "torch").mkdir()
    for entry in (site / "torch").iterdir():
        if entry.name != "version.py":
            (target / "torch" / entry.name).symlink_to(entry)
    text = (site / "torch" / "version.py").read_text()
    real = torch_builds.read_build(venv)
    assert real is not None
    (target / "torch" / "version.py").write_text(text.replace(real.git_sha, sha))
    return folder


def test_a_build_is_found_by_its_torch_sha(tmp_path: Path) -> None:
    fake_build(tmp_path / "builds" / "any-name", BUILD_SHA)
    env = {"SPYRE_CI_TORCH_BUILDS": str(tmp_path / "builds"), "SPYRE_CI_ENV_CACHE": "/nowhere"}
    folders = torch_builds.roots(Settings.from_env(env))
    assert folders == (tmp_path / "builds", Path("/nowhere"))  # the builds first
    found = torch_builds.find(BUILD_SHA[:10], folders)
    assert found is not None and found.git_sha == BUILD_SHA
    assert torch_builds.find("fedcba9876543210", folders) is None
    assert torch_builds.find("12345", folders) is None  # too short to name a commit
    assert torch_builds.find(BUILD_SHA, ()) is None  # none configured: none found


@pytest.mark.long
def test_an_event_whose_sha_has_a_build_runs_there_and_is_tested(
    glu_inventory: Path,
    tmp_path: Path,
) -> None:
    fake_build(tmp_path / "builds" / "nightly", BUILD_SHA)
    event = json.loads((REPO_ROOT / "examples" / "events" / "push_softmax_kernel.json").read_text())
    event["payload"]["after"] = BUILD_SHA
    event["payload"]["head_commit"]["id"] = BUILD_SHA
    event_file = tmp_path / "push.json"  # no sibling .patch: the build holds the change
    event_file.write_text(json.dumps(event))
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "SPYRE_CI_TORCH_BUILDS": str(tmp_path / "builds"),
    }
    done = spyre_ci(
        "run", "--event", str(event_file), "--inventory", str(glu_inventory),
        "--specs", str(GLU_SPEC), "--full", "--holdout", "0", "--no-progress",
        "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    environment = record["environment"]
    assert environment["torch_git_version"] == BUILD_SHA
    assert environment["torch_source"].startswith("prepared environment")
    assert environment["tested"] == "tested"
    assert environment["change"]["applied"] == environment["change"]["not_applied"] == []
    assert {r["status"] for r in record["results"]} == {"passed"}
    assert "change TESTED" in done.stdout
