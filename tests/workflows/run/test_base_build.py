"""Which build a change is tested on (`workflows.run.base_build.choose`): the newest build of
the source whose git sha, read from the wheel's `torch/version.py`, is the base or an ancestor
of it, asked of a local GitHub serving a linear upstream history through the product's
client; the source a local PEP 503 index (pip downloads) or a folder of wheels.

The wheels here carry only their labels (choosing reads nothing else); making an environment
of a real build is `test_build_run.py`'s."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from relay.github import GitHubAdapter
from tests.servers.upstream_history import UpstreamGitHubServer, UpstreamHistory
from tests.servers.wheel_index import WheelIndexServer
from tests.testing.cli import cli
from workflows.run.base_build import NoBuild, choose
from workflows.runner.build_source import (
    BuildSource,
    BuildSourceError,
    BuildsUnavailable,
    wheel_label,
)

REPO = "pytorch/pytorch"
TAGS = "cp311-cp311-manylinux_2_28_x86_64"


def label_wheel(folder: Path, version: str, sha: str | None) -> Path:
    """A wheel that holds a torch/version.py with these labels (no sha: `git_version` unknown)."""
    path = folder / f"torch-{version}-{TAGS}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            "torch/version.py",
            f"__version__ = '{version}'\ndebug = False\ncuda = None\n"
            f"git_version = '{sha or 'Unknown'}'\n",
        )
        info = f"torch-{version}.dist-info"
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
        )
        archive.writestr(
            f"{info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {TAGS}\n",
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture()
def upstream() -> tuple[UpstreamGitHubServer, UpstreamHistory, list[str]]:
    """A history root (12-01) -> c1 (12-02) -> c2 (12-03) -> c3 (12-04) -> c4 (12-05)."""
    history = UpstreamHistory({"torch/x.py": "a = 1\n"}, root_date="2026-12-01T01:00:00Z")
    shas = [history.root]
    for day in (2, 3, 4, 5):
        shas.append(
            history.commit(
                f"change {day}", f"2026-12-0{day}T12:00:00Z", {"torch/x.py": f"a = {day}\n"}
            )
        )
    server = UpstreamGitHubServer().start()
    history.register(server, REPO)
    yield server, history, shas
    server.stop()


def adapter(server: UpstreamGitHubServer) -> GitHubAdapter:
    return GitHubAdapter(base_url=server.url, token=server.token)


def test_the_newest_ancestor_of_the_base_is_chosen_by_its_sha_not_its_name(
    upstream: tuple[UpstreamGitHubServer, UpstreamHistory, list[str]], tmp_path: Path
) -> None:
    server, _history, shas = upstream
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    label_wheel(wheels, "2.16.0.dev20261202", shas[0])
    # Named for the 3rd, built from c2; the 5th's holds c4, a commit after the base.
    label_wheel(wheels, "2.16.0.dev20261203", shas[2])
    label_wheel(wheels, "2.16.0.dev20261205", shas[4])
    label_wheel(wheels, "2.16.0.dev20261204", None)  # no git sha: never taken
    source = BuildSource(str(wheels), tmp_path / "downloads")

    chosen = choose(shas[3], REPO, source, adapter(server))
    assert (chosen.sha, chosen.relation) == (shas[2], "behind")
    assert chosen.candidate.version == "2.16.0.dev20261203"
    said = " | ".join(chosen.skipped)
    assert "2.16.0.dev20261205" in said and "ahead" in said
    assert "2.16.0.dev20261204" in said and "no git sha" in said

    same = choose(shas[2], REPO, source, adapter(server))
    assert (same.sha, same.relation) == (shas[2], "identical")
    # Older than every build but the root's: the root's build.
    assert choose(shas[1], REPO, source, adapter(server)).sha == shas[0]


def test_no_build_at_or_before_the_base_and_builds_off_the_history(
    upstream: tuple[UpstreamGitHubServer, UpstreamHistory, list[str]], tmp_path: Path
) -> None:
    server, _history, shas = upstream
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    label_wheel(wheels, "2.16.0.dev20261205", shas[4])
    label_wheel(wheels, "2.16.0.dev20261201", "f" * 40)  # a sha GitHub does not know
    (wheels / f"torch-2.16.0.dev20261130-{TAGS}.whl").write_bytes(b"PK\x03\x04 cut")  # corrupt
    source = BuildSource(str(wheels), tmp_path / "downloads")
    with pytest.raises(NoBuild) as caught:
        choose(shas[1], REPO, source, adapter(server))
    message = str(caught.value)
    assert shas[1][:12] in message
    assert "ffffffffffff" in message and "does not know" in message
    assert "20261130" in message and "not a readable wheel" in message


def test_an_index_is_read_through_pip_once_per_wheel(
    upstream: tuple[UpstreamGitHubServer, UpstreamHistory, list[str]], tmp_path: Path
) -> None:
    server, _history, shas = upstream
    with WheelIndexServer(tmp_path / "served") as index:
        index.folder.mkdir(exist_ok=True)
        label_wheel(index.folder, "2.16.0.dev20261203", shas[2])
        source = BuildSource(index.url, tmp_path / "downloads")
        chosen = choose(shas[3], REPO, source, adapter(server))
        assert chosen.sha == shas[2]
        assert chosen.wheel.parent == tmp_path / "downloads"
        assert wheel_label(chosen.wheel) == ("2.16.0.dev20261203", shas[2])
        downloads = [r for r in index.requests if r.path.startswith("/files/")]
        choose(shas[3], REPO, source, adapter(server))
        assert [r for r in index.requests if r.path.startswith("/files/")] == downloads


def test_an_unreachable_or_failing_index_is_an_outage(tmp_path: Path) -> None:
    with WheelIndexServer(tmp_path) as index:
        url = index.url
        index.fail_next(r"/simple/torch/", 503)
        with pytest.raises(BuildsUnavailable, match="cannot be read"):
            BuildSource(url, tmp_path / "d").candidates()
    with pytest.raises(BuildsUnavailable, match=r"127\.0\.0\.1"):
        BuildSource(url, tmp_path / "d", timeout=2).candidates()
    with pytest.raises(BuildSourceError, match="no such folder"):
        BuildSource(str(tmp_path / "nowhere"), tmp_path / "d")
    with pytest.raises(BuildSourceError, match="want an http"):
        BuildSource("ftp://example.invalid/simple", tmp_path / "d")


def test_a_download_cut_short_is_an_outage_and_a_diverged_build_is_passed_over(
    upstream: tuple[UpstreamGitHubServer, UpstreamHistory, list[str]], tmp_path: Path
) -> None:
    server, _history, shas = upstream
    with WheelIndexServer(tmp_path / "served") as index:
        index.folder.mkdir(exist_ok=True)
        wheel = label_wheel(index.folder, "2.16.0.dev20261203", shas[2])
        index.truncate(wheel.name, 100)
        source = BuildSource(index.url, tmp_path / "downloads")
        with pytest.raises(BuildsUnavailable, match="pip could not download"):
            choose(shas[3], REPO, source, adapter(server))
        assert not list((tmp_path / "downloads").glob("*.whl"))  # nothing half-kept

    # A build from another branch: GitHub says `diverged`; the older ancestor is taken.
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    other = "d" * 40
    label_wheel(wheels, "2.16.0.dev20261204", other)
    label_wheel(wheels, "2.16.0.dev20261202", shas[0])
    server.add_comparison(REPO, shas[3], other, [])
    server._comparisons[(REPO, shas[3], other)].status = "diverged"  # a fork's build
    chosen = choose(shas[3], REPO, BuildSource(str(wheels), tmp_path / "d2"), adapter(server))
    assert chosen.sha == shas[0]
    assert any("diverged" in note for note in chosen.skipped)


def test_a_run_names_a_source_it_cannot_use_before_anything_is_recorded(
    upstream: tuple[UpstreamGitHubServer, UpstreamHistory, list[str]], tmp_path: Path
) -> None:
    """Exit 2 for a source that is not one, 3 for one that cannot be read or has no build at
    or before the base: `spyre-ci run` stops before the Inventory and History."""
    server, _history, shas = upstream
    event = tmp_path / "push.json"
    event.write_text(
        json.dumps(
            {
                "event": "push",
                "delivery_id": "d-1",
                "payload": {
                    "ref": "refs/heads/main",
                    "before": shas[2],
                    "after": shas[3],
                    "repository": {"full_name": REPO},
                    "commits": [{"id": shas[3], "message": "m", "modified": ["torch/x.py"]}],
                },
            }
        )
    )
    state = tmp_path / "state"
    env = {
        "SPYRE_CI_STATE_DIR": str(state),
        "SPYRE_CI_ENV_CACHE": str(tmp_path / "envs"),
        "SPYRE_CI_GITHUB_URL": server.url,
        "SPYRE_CI_GITHUB_TOKEN": server.token,
    }
    out = str(tmp_path / "out")
    missing = cli(
        "run",
        "--event",
        str(event),
        "--out",
        out,
        env={**env, "SPYRE_CI_BUILD_INDEX": str(tmp_path / "nowhere")},
    )
    assert missing.returncode == 2, missing.stderr
    assert "no such folder" in missing.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    none = cli(
        "run", "--event", str(event), "--out", out, env={**env, "SPYRE_CI_BUILD_INDEX": str(empty)}
    )
    assert none.returncode == 3, none.stderr
    assert "no torch build" in none.stderr and shas[2][:12] in none.stderr

    down = cli(
        "run",
        "--event",
        str(event),
        "--out",
        out,
        env={**env, "SPYRE_CI_BUILD_INDEX": "http://127.0.0.1:9/simple/"},
    )
    assert down.returncode == 3, down.stderr
    assert "cannot be read" in down.stderr
    assert not (state / "inventories").exists()  # stopped before the Inventory was built


def test_a_drift_of_more_files_than_one_compare_lists_is_read_commit_by_commit() -> None:
    """GitHub cuts a compare's file list at 300: a drift of 2 commits over 320 files is read
    one commit at a time, every file in it, in order, and said to be paged; never cut."""
    from workflows.run.base_build import _drift

    texts = {f"torch/m{i:03}.py": "x = 0\n" for i in range(320)}
    history = UpstreamHistory(texts, root_date="2026-12-01T01:00:00Z")
    build = history.root
    first = history.commit(
        "first 200", "2026-12-02T12:00:00Z", {p: "x = 1\n" for p in list(texts)[:200]}
    )
    base = history.commit(
        "last 120 and one again",
        "2026-12-03T12:00:00Z",
        {**{p: "x = 2\n" for p in list(texts)[200:]}, "torch/m000.py": "x = 3\n"},
    )
    server = UpstreamGitHubServer().start()
    try:
        history.register(server, REPO)
        drift = _drift(adapter(server), REPO, build, base)
    finally:
        server.stop()
    assert drift.paged and drift.commits == 2
    assert [label for label, _ in drift.diffs] == [
        f"drift commit {first[:12]}",
        f"drift commit {base[:12]}",
    ]
    touched = [
        line[len("+++ b/") :]
        for _label, text in drift.diffs
        for line in text.splitlines()
        if line.startswith("+++ b/")
    ]
    assert set(touched) == set(texts) and len(touched) == 321  # m000 in both, in order
    last = drift.diffs[-1][1]
    assert "+x = 3" in last.split("+++ b/torch/m000.py", 1)[1].split("diff --git", 1)[0]
