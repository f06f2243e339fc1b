"""A scheduled run (a nightly) on another torch than the installed one is judged against the
installed torch, the one the bundled expectations and History's baseline were written for:
a variant that fails on the build and passes on the installed torch is the build's
regression (new, shown beside its outcome there); one that fails on both is no regression
of the build. The build's own outcomes are kept as its base outcomes, what fails on that
torch itself, for the next run on it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.servers.upstream_history import UpstreamGitHubServer, UpstreamHistory
from tests.servers.upstream_history import upstream_github as upstream_github  # fixture
from tests.testing.cli import build_inventory, spyre_ci
from tests.testing.paths import GLU_PATCH, REPO_ROOT
from tests.workflows.runner.test_torch_builds import BUILD_SHA, fake_build

SPEC = Path(__file__).resolve().parents[1] / "data" / "torch_fails.yaml"
GLU = "torchfails::compare_cpu::nn.functional.glu::float32"
RPOW = "torchfails::compare_cpu::__rpow__::float32"


def break_glu(build: Path) -> None:
    """The build's `torch/nn/functional.py` made a file of its own, with the glu edit of
    examples/changes applied: the build fails glu where the installed torch passes it."""
    [nn] = build.glob("lib/python*/site-packages/torch/nn")
    real = nn.resolve()
    nn.unlink()
    nn.mkdir()
    for entry in real.iterdir():
        if entry.name != "functional.py":
            (nn / entry.name).symlink_to(entry)
    text = (real / "functional.py").read_text(encoding="utf-8")
    lines = GLU_PATCH.read_text(encoding="utf-8").splitlines()
    old = "\n".join(
        ln[1:] for ln in lines if ln.startswith((" ", "-")) and not ln.startswith("---")
    )
    new = "\n".join(
        ln[1:] for ln in lines if ln.startswith((" ", "+")) and not ln.startswith("+++")
    )
    assert old in text
    (nn / "functional.py").write_text(text.replace(old, new), encoding="utf-8")
    shutil.rmtree(nn / "__pycache__", ignore_errors=True)


@pytest.mark.long
def test_a_nightly_on_a_build_is_judged_against_the_installed_torch(tmp_path: Path) -> None:
    build = fake_build(tmp_path / "builds" / "nightly", BUILD_SHA)
    break_glu(build)
    inventory = build_inventory(SPEC, tmp_path / "inventory.json.gz")
    event = json.loads((REPO_ROOT / "examples" / "events" / "nightly.json").read_text())
    event["delivery_id"] = event["payload"]["head_sha"] = BUILD_SHA
    event_file = tmp_path / "nightly.json"
    event_file.write_text(json.dumps(event))
    state = tmp_path / "state"
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state), "SPYRE_CI_TORCH_BUILDS": str(build)}
    env.pop("SPYRE_CI_ZYGOTE", None)  # the default path: the warm runner on
    out = tmp_path / "out"
    done = spyre_ci(
        "run", "--event", str(event_file), "--inventory", str(inventory), "--specs", str(SPEC),
        "--full", "--holdout", "0", "--jobs", "1", "--no-progress", "--out", str(out), env=env,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    record = json.loads((out / "run.json").read_text())
    assert record["environment"]["tested"] == "tested"
    assert record["environment"]["torch_git_version"] == BUILD_SHA
    results = {r["id"]: r for r in record["results"]}
    assert results[GLU]["classification"] == "new"  # fails on the build only
    assert results[RPOW]["classification"] == "pre-existing"  # fails on both torches
    assert "NEW FAILURES (1)" in done.stdout
    assert f"{GLU} [on torch " in done.stdout, done.stdout
    assert "installed): passed, run now]" in done.stdout, done.stdout
    # The reference ran in a shard of its own, on the installed torch.
    assert [p for p in (out / "work").glob(f"{record['run_id']}/reference") if p.is_dir()]
    # The build's own outcomes are kept: what fails on it, for the next run on it.
    kept = {}
    for path in (state / "base-outcomes").glob(f"{BUILD_SHA}*.json"):
        kept.update(json.loads(path.read_text()))
    assert kept[GLU]["outcome"]["status"] == "failed"
    assert kept[RPOW]["outcome"]["status"] in ("failed", "error")

    # What fails on the build itself is shown, and written as an expectations file.
    listed = spyre_ci("builds", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith(BUILD_SHA[:12]))
    assert "2 outcome(s), 2 failing" in line and "nothing applied" in line
    written = spyre_ci(
        "builds", "expectations", BUILD_SHA[:10], "--out", str(tmp_path / "b.yaml"), env=env
    )
    assert written.returncode == 0, written.stderr
    import yaml

    rules = yaml.safe_load((tmp_path / "b.yaml").read_text())["expectations"]
    assert {r["id"] for r in rules} == {GLU, RPOW}
    assert "batch dimension" in next(r["reason"] for r in rules if r["id"] == GLU)
    unknown = spyre_ci("builds", "expectations", "0" * 12, "--out", str(tmp_path / "x"), env=env)
    assert unknown.returncode == 2 and "no kept outcomes" in unknown.stderr
    folder = spyre_ci("builds", "expectations", BUILD_SHA, "--out", str(tmp_path), env=env)
    assert folder.returncode == 2 and "is a folder" in folder.stderr


@pytest.mark.long
def test_a_nightly_is_judged_first_against_the_nearest_earlier_build(
    tmp_path: Path, upstream_github: UpstreamGitHubServer
) -> None:
    """Two nightlies, A then B (A an ancestor of B, as the local GitHub says), both failing
    glu where the installed torch passes it. A's nightly is judged against the installed
    torch: glu is A's regression. B's is judged against A's kept outcomes, read and not run
    again: glu failed on A too, so it is no regression of B."""
    history = UpstreamHistory({"README.md": "a\n"}, root_date="2026-12-01T01:00:00Z")
    a = history.root
    b = history.commit("docs", "2026-12-02T01:00:00Z", {"README.md": "b\n"})
    history.register(upstream_github)
    builds = tmp_path / "builds"
    for sha in (a, b):
        break_glu(fake_build(builds / sha[:12], sha))
    inventory = build_inventory(SPEC, tmp_path / "inventory.json.gz")
    state = tmp_path / "state"
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(state),
        "SPYRE_CI_TORCH_BUILDS": str(builds),
        "SPYRE_CI_GITHUB_URL": upstream_github.url,
        "SPYRE_CI_GITHUB_TOKEN": upstream_github.token,
    }
    env.pop("SPYRE_CI_ZYGOTE", None)  # the default path: the warm runner on
    records = {}
    for name, sha in (("a", a), ("b", b)):
        event = json.loads((REPO_ROOT / "examples" / "events" / "nightly.json").read_text())
        event["delivery_id"] = event["payload"]["head_sha"] = sha
        event_file = tmp_path / f"nightly-{name}.json"
        event_file.write_text(json.dumps(event))
        out = tmp_path / f"out-{name}"
        done = spyre_ci(
            "run", "--event", str(event_file), "--inventory", str(inventory), "--specs",
            str(SPEC), "--full", "--holdout", "0", "--jobs", "1", "--no-progress", "--out",
            str(out), env=env,
        )  # fmt: skip
        record = json.loads((out / "run.json").read_text())
        records[name] = (done, record, out)
    done, record, out = records["a"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert {r["id"]: r["classification"] for r in record["results"]}[GLU] == "new"
    assert "judged first against" not in done.stderr  # nothing earlier is kept
    done, record, out = records["b"]
    assert done.returncode == 0, done.stdout + done.stderr
    results = {r["id"]: r for r in record["results"]}
    assert results[GLU]["classification"] == "pre-existing", results[GLU]
    assert results[RPOW]["classification"] == "pre-existing"
    run_a = records["a"][1]["run_id"]
    earlier = f"({a[:12]}, its 1 commit(s) earlier nightly or periodic run {run_a})"
    assert f"judged first against torch {record['environment']['torch_version']} {earlier}" in (
        done.stderr
    ), done.stderr
    # Read from A's kept outcomes: no shard ran on the installed torch.
    assert not [p for p in (out / "work").glob(f"{record['run_id']}/reference") if p.is_dir()]
