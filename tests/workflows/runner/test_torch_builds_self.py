"""`SPYRE_CI_TORCH_BUILDS` may name one prepared environment itself, not only the folder
holding them: the environment is found by its torch's sha either way, and a run whose sha it
has runs there instead of falling back to the installed torch."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.testing.cli import spyre_ci
from tests.testing.paths import GLU_SPEC, REPO_ROOT
from tests.workflows.runner.test_torch_builds import BUILD_SHA, fake_build
from workflows.runner import torch_builds
from workflows.settings import Settings

SHA = "89abcdef0123456789abcdef0123456789abcdef"


def venv_shaped(folder: Path, sha: str, version: str = "2.14.0a0+git89abcde") -> Path:
    """A folder laid out as a venv whose torch is at `sha` (nothing in it runs)."""
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n", encoding="utf-8")
    (folder / "bin" / "python").symlink_to(Path(sys.executable))
    torch = folder / "lib" / "python3.11" / "site-packages" / "torch"
    torch.mkdir(parents=True)
    (torch / "version.py").write_text(
        f"__version__ = '{version}'\ndebug = False\ncuda: Optional[str] = None\n"
        f"git_version = '{sha}'\n",
        encoding="utf-8",
    )
    return folder


def test_a_root_that_is_a_venv_is_found_as_its_parent_finds_it(tmp_path: Path) -> None:
    venv = venv_shaped(tmp_path / "builds" / "nightly", SHA)
    for root in (venv, venv.parent):
        found = torch_builds.find(SHA[:12], [root])
        assert found is not None, root
        assert (found.path, found.git_sha, found.version) == (venv, SHA, "2.14.0a0+git89abcde")
        assert found.python == str(venv / "bin" / "python")
        assert torch_builds.find("0123456789abc", [root]) is None  # another commit
    # As the setting names it: the variable pointing at the environment, then the cache.
    settings = Settings.from_env({"SPYRE_CI_TORCH_BUILDS": str(venv), "SPYRE_CI_ENV_CACHE": "/x"})
    found = torch_builds.find(SHA, torch_builds.roots(settings))
    assert found is not None and found.path == venv


def test_a_venv_root_is_not_searched_for_venvs_inside_it(tmp_path: Path) -> None:
    """A venv's own folders are never taken for environments, even venv-shaped ones."""
    outer = venv_shaped(tmp_path / "outer", "1111111111111111111111111111111111111111")
    venv_shaped(outer / "inner", SHA)
    assert torch_builds.find(SHA, [outer]) is None
    found = torch_builds.find("1111111", [outer])
    assert found is not None and found.path == outer


def test_a_half_made_venv_root_is_not_one(tmp_path: Path) -> None:
    venv = venv_shaped(tmp_path / "half", SHA)
    (venv / "bin" / "python").unlink()
    assert torch_builds.find(SHA, [venv]) is None
    assert torch_builds.find(SHA, [tmp_path]) is None


def test_this_interpreters_own_venv_is_found_when_named(tmp_path: Path) -> None:
    """A real venv (the one running the tests), named as the root, by its torch's sha."""
    real = torch_builds.read_build(Path(sys.prefix))
    assert real is not None
    found = torch_builds.find(real.git_sha, [Path(sys.prefix)])
    assert found is not None and found.path == Path(sys.prefix)
    assert found.git_sha == real.git_sha


@pytest.mark.long
def test_a_run_with_the_variable_naming_the_venv_runs_there(
    glu_inventory: Path, tmp_path: Path
) -> None:
    """The symptom: the run found nothing and tested the installed torch instead."""
    venv = fake_build(tmp_path / "nightly", BUILD_SHA)
    event = json.loads((REPO_ROOT / "examples" / "events" / "push_softmax_kernel.json").read_text())
    event["payload"]["after"] = BUILD_SHA
    event["payload"]["head_commit"]["id"] = BUILD_SHA
    event_file = tmp_path / "push.json"  # no sibling .patch: the build holds the change
    event_file.write_text(json.dumps(event))
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "SPYRE_CI_TORCH_BUILDS": str(venv),  # the environment itself, not its parent
    }
    done = spyre_ci(
        "run", "--event", str(event_file), "--inventory", str(glu_inventory),
        "--specs", str(GLU_SPEC), "--full", "--holdout", "0", "--no-progress",
        "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    environment = json.loads((tmp_path / "out" / "run.json").read_text())["environment"]
    assert environment["torch_git_version"] == BUILD_SHA
    assert environment["torch_source"].startswith("prepared environment")
    assert environment["tested"] == "tested"
