"""An event's change comes from GitHub's compare of `base...head`, through the same client the
Scout uses (a local server that implements the REST contract): applied when GitHub sends its
patches, named as not applied when the compare answers 404 or leaves a file's patch out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.servers.github_api import GitHubAPIServer
from tests.testing.cli import spyre_ci
from tests.testing.paths import GLU_PATCH, GLU_SPEC, REPO_ROOT

BASE = "0e5bc7d4a106b7827070c51f385b31b3487c01da"
HEAD = "b5d1c0de00000000000000000000000000000001"
GLU = "glu::compare_cpu::nn.functional.glu::float32"


def push_event(tmp_path: Path, files: list[str]) -> Path:
    event = json.loads((REPO_ROOT / "examples" / "events" / "push_softmax_kernel.json").read_text())
    payload = event["payload"]
    payload["before"], payload["after"] = BASE, HEAD
    commit = {**payload["head_commit"], "id": HEAD, "added": [], "removed": [], "modified": files}
    payload["commits"], payload["head_commit"] = [commit], commit
    path = tmp_path / "push.json"  # no sibling .patch: the diff comes from GitHub
    path.write_text(json.dumps(event))
    return path


def run_event(
    event: Path, github: GitHubAPIServer, inventory: Path, tmp_path: Path
) -> tuple[Any, dict[str, Any]]:
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "SPYRE_CI_GITHUB_URL": github.url,
        "SPYRE_CI_GITHUB_TOKEN": github.token,
    }
    done = spyre_ci(
        "run", "--event", str(event), "--inventory", str(inventory), "--specs", str(GLU_SPEC),
        "--holdout", "0", "--jobs", "1", "--no-progress", "--out", str(tmp_path / "out"), env=env,
    )  # fmt: skip
    out = tmp_path / "out" / "run.json"
    return done, json.loads(out.read_text()) if out.exists() else {}


@pytest.fixture()
def github() -> Any:
    with GitHubAPIServer() as server:
        yield server


def glu_hunks() -> str:
    text = GLU_PATCH.read_text()
    return text[text.index("@@ -1802") :]


@pytest.mark.long
def test_the_compare_diff_is_applied_and_a_file_github_sent_no_patch_for_is_named(
    github: GitHubAPIServer, glu_inventory: Path, tmp_path: Path
) -> None:
    """The push's diff comes from GitHub's compare: its patch is applied on the installed
    torch, and a file GitHub sent without a patch (too large) is named as not applied."""
    files = ["torch/nn/functional.py", "torch/_refs/__init__.py"]
    github.add_comparison(
        "pytorch/pytorch",
        BASE,
        HEAD,
        [
            {"filename": files[0], "patch": glu_hunks()},
            {"filename": files[1], "patch": None},  # too large: GitHub leaves the patch out
        ],
    )
    done, record = run_event(push_event(tmp_path, files), github, glu_inventory, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert github.find("GET", r"/compare/")
    environment = record["environment"]
    change = environment["change"]
    assert [f["path"] for f in change["applied"]] == [files[0]]
    assert [f["path"] for f in change["not_applied"]] == [files[1]]
    # Applied on the installed torch, which is not the change's base, and not all of it:
    # tested in part.
    assert environment["tested"] == "partial"
    assert any(BASE[:12] in note for note in environment["notes"])
    assert {r["id"]: r["classification"] for r in record["results"]}[GLU] == "new"


def test_a_compare_404_leaves_the_change_not_tested(
    github: GitHubAPIServer, glu_inventory: Path, tmp_path: Path
) -> None:
    # No comparison registered: GitHub answers 404.
    done, record = run_event(
        push_event(tmp_path, ["torch/nn/functional.py"]), github, glu_inventory, tmp_path
    )
    assert done.returncode == 4, done.stdout + done.stderr  # not tested: no verdict
    environment = record["environment"]
    assert environment["tested"] == "not_tested"
    assert environment["change"]["not_applied"][0]["path"] == "torch/nn/functional.py"
    assert "no diff" in environment["change"]["not_applied"][0]["why"]
    callback = json.loads((tmp_path / "out" / "callback.json").read_text())
    assert callback["workflow"]["conclusion"] == "neutral"
