"""The simulated upstream PyTorch: relabelled wheels, their local index, the local history.

Quick checks on a tiny fake wheel; the relabel of the real 191 MB torch wheel is `slow`.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import http.client
import io
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
import requests

from relay.github import GitHubAdapter, GitHubRefused
from selector.diff import compare_patch_text
from tests.servers.github_api import GitHubAPIServer
from tests.servers.upstream_history import (
    UpstreamGitHubServer,
    UpstreamHistory,
    hunks,
    upstream_github,  # noqa: F401 - a fixture, used by name
)
from tests.servers.wheel_index import (
    WheelIndexServer,
    wheel_index,  # noqa: F401 - a fixture, used by name
)
from tests.testing.relabel import relabel_wheel, truncate_copy

REAL_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
REPO = "pytorch/pytorch"
VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'git_version']
__version__ = '2.99.0'
debug = False
git_version = '0000000000000000000000000000000000000000'
"""


# -- relabel --------------------------------------------------------------------------------------


def _fake_wheel(folder: Path) -> Path:
    """A tiny installable `torch` wheel: version.py, a module, its dist-info."""
    members = {
        "torch/__init__.py": "from torch.version import __version__ as __version__\n",
        "torch/version.py": VERSION_PY,
        "torch/nn/functional.py": "def relu(x):\n    return x\n",
        "torch-2.99.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\n"
        "Version: 2.99.0\nSummary: fake\n\nVersion: 2.99.0 in the body stays\n",
        "torch-2.99.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [(p, _digest(t.encode()), str(len(t.encode()))) for p, t in members.items()]
    rows.append(("torch-2.99.0.dist-info/RECORD", "", ""))
    record = io.StringIO()
    csv.writer(record, lineterminator="\n").writerows(rows)
    members["torch-2.99.0.dist-info/RECORD"] = record.getvalue()
    path = folder / "torch-2.99.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _check_record(wheel: Path, info: str) -> list[list[str]]:
    """Every member is in RECORD with its right hash and size; returns the rows."""
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None
        rows = list(csv.reader(io.StringIO(archive.read(f"{info}/RECORD").decode())))
        names = {i.filename for i in archive.infolist() if not i.is_dir()}
        assert {r[0] for r in rows} == names
        for path, digest, size in rows:
            if path == f"{info}/RECORD":
                assert (digest, size) == ("", "")
            elif len(names) < 100 or not path.endswith(".so"):  # the real wheel: skip 600 MB
                data = archive.read(path)
                assert (digest, size) == (_digest(data), str(len(data))), path
    return rows


def test_relabel_sets_the_labels_applies_the_edits_and_rebuilds_record(tmp_path: Path) -> None:
    source = _fake_wheel(tmp_path)
    out = relabel_wheel(
        source,
        tmp_path / "out",
        version="2.99.1.dev20261101+cpu",
        git_sha="a" * 40,
        edits={
            "torch/nn/functional.py": "def relu(x):\n    return -x\n",
            "torch/new.py": "X = 1\n",
        },
    )
    assert out.name == "torch-2.99.1.dev20261101+cpu-py3-none-any.whl"
    info = "torch-2.99.1.dev20261101+cpu.dist-info"
    rows = _check_record(out, info)
    assert rows[-1][0] == f"{info}/RECORD"
    with zipfile.ZipFile(out) as archive:
        version_py = archive.read("torch/version.py").decode()
        assert version_py == VERSION_PY.replace("'2.99.0'", "'2.99.1.dev20261101+cpu'").replace(
            "0" * 40, "a" * 40
        )
        metadata = archive.read(f"{info}/METADATA").decode()
        assert "Version: 2.99.1.dev20261101+cpu\n" in metadata
        assert "Version: 2.99.0 in the body stays" in metadata
        assert archive.read("torch/new.py") == b"X = 1\n"
        assert b"-x" in archive.read("torch/nn/functional.py")
        assert not any(n.startswith("torch-2.99.0.dist-info") for n in archive.namelist())
    unknown = relabel_wheel(  # removing a path the wheel does not have changes nothing
        source, tmp_path / "out", version="2.99.2", git_sha="b" * 40, edits={"torch/new.py": None}
    )
    with zipfile.ZipFile(unknown) as archive, zipfile.ZipFile(source) as original:
        assert len(archive.namelist()) == len(original.namelist())
    gone = relabel_wheel(
        source,
        tmp_path / "out",
        version="2.99.3",
        git_sha="c" * 40,
        edits={"torch/nn/functional.py": None},
    )
    with zipfile.ZipFile(gone) as archive:
        assert "torch/nn/functional.py" not in archive.namelist()
    _check_record(gone, "torch-2.99.3.dist-info")


def test_truncate_copy_keeps_the_first_bytes(tmp_path: Path) -> None:
    source = _fake_wheel(tmp_path)
    cut = truncate_copy(source, tmp_path / "cut.whl", 100)
    assert cut.read_bytes() == source.read_bytes()[:100]
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(cut)


@pytest.mark.slow
def test_relabel_of_the_real_torch_wheel_is_fast_and_installs(tmp_path: Path) -> None:
    if not REAL_WHEEL.is_file():
        pytest.skip(f"no {REAL_WHEEL}")
    started = time.perf_counter()
    out = relabel_wheel(
        REAL_WHEEL,
        tmp_path,
        version="2.14.0.dev20261101+cpu",
        git_sha="d" * 40,
        edits={"torch/_simulated_upstream.py": "CHANGE = 1\n"},
    )
    elapsed = time.perf_counter() - started
    print(f"relabel: {elapsed:.2f} s, {out.stat().st_size} bytes")
    assert elapsed < 30
    assert out.name == "torch-2.14.0.dev20261101+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    _check_record(out, "torch-2.14.0.dev20261101+cpu.dist-info")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, out],
        check=True,
        env=_pip_env(),
    )
    # torch's own dependencies come from this venv; the relabelled torch comes first.
    env = {**os.environ, "PYTHONPATH": str(target), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    code = "import torch, torch._simulated_upstream as s; print(torch.__version__, s.CHANGE)"
    shown = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert shown.stdout.split() == ["2.14.0.dev20261101+cpu", "1"]
    check = "import torch; print(torch.version.git_version, torch.__file__)"
    shown = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True
    )
    assert shown.stdout.split() == ["d" * 40, str(target / "torch" / "__init__.py")]


# -- the wheel index ------------------------------------------------------------------------------


def _pip_env() -> dict[str, str]:
    """pip with no configuration: only the index the command names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def test_pip_downloads_a_relabelled_wheel_from_the_index(
    tmp_path: Path,
    wheel_index: WheelIndexServer,  # noqa: F811
) -> None:
    source = _fake_wheel(tmp_path)
    relabel_wheel(source, wheel_index.folder, version="2.99.0", git_sha="0" * 40)
    wanted = relabel_wheel(source, wheel_index.folder, version="2.99.1+cpu", git_sha="e" * 40)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",
            "--index-url",
            wheel_index.url,
            "torch==2.99.1+cpu",
            "-d",
            tmp_path / "got",
        ],
        env=_pip_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "got" / wanted.name).read_bytes() == wanted.read_bytes()
    assert wheel_index.find(r"^/simple/torch/$")
    assert [r.path for r in wheel_index.find(r"^/files/")] == [
        "/files/torch-2.99.1%2Bcpu-py3-none-any.whl"
    ]


def test_the_index_pages_follow_pep_503(
    tmp_path: Path,
    wheel_index: WheelIndexServer,  # noqa: F811
) -> None:
    wheel = relabel_wheel(
        _fake_wheel(tmp_path), wheel_index.folder, version="2.99.1", git_sha="f" * 40
    )
    listing = urllib.request.urlopen(wheel_index.url).read().decode()
    assert '<a href="/simple/torch/">torch</a>' in listing
    with urllib.request.urlopen(wheel_index.url + "Torch") as answer:  # redirected
        assert answer.url.endswith("/simple/torch/")
        page = answer.read().decode()
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>' in page
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(wheel_index.url + "numpy/")
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as outside:
        urllib.request.urlopen(wheel_index.root + "/files/..%2F..%2Fetc%2Fpasswd")
    assert outside.value.code == 404


def test_the_index_faults(
    tmp_path: Path,
    wheel_index: WheelIndexServer,  # noqa: F811
) -> None:
    wheel = relabel_wheel(
        _fake_wheel(tmp_path), wheel_index.folder, version="2.99.1", git_sha="f" * 40
    )
    file_url = f"{wheel_index.root}/files/{wheel.name}"
    wheel_index.fail_next(r"^/simple/torch/$", status=503, times=2)
    for _ in range(2):
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(wheel_index.url + "torch/")
        assert failed.value.code == 503
    assert urllib.request.urlopen(wheel_index.url + "torch/").status == 200

    wheel_index.truncate(wheel.name, 50)
    with urllib.request.urlopen(file_url) as answer:
        assert answer.headers["Content-Length"] == str(wheel.stat().st_size)
        with pytest.raises(http.client.IncompleteRead) as cut:
            answer.read()
    assert cut.value.partial == wheel.read_bytes()[:50]

    wheel_index.delay_s = 0.3
    started = time.monotonic()
    urllib.request.urlopen(wheel_index.url).read()
    assert time.monotonic() - started >= 0.3


# -- the upstream history -------------------------------------------------------------------------

ROOT = {
    "torch/nn/functional.py": "".join(f"line {i}\n" for i in range(1, 30)),
    "torch/_refs/__init__.py": "a\nb\nc\n",
    "torch/no_newline.py": "x = 1\ny = 2",
}
SOFTMAX = "aten/src/ATen/native/SoftMax.cpp"


def _history() -> tuple[UpstreamHistory, list[str]]:
    history = UpstreamHistory(ROOT)
    functional = ROOT["torch/nn/functional.py"]
    shas = [history.root]
    shas.append(
        history.commit(
            "Change relu\n\nLonger body.",
            "2026-11-01T10:00:00Z",
            {"torch/nn/functional.py": functional.replace("line 5\n", "line five\n")},
            build_files=[SOFTMAX],
        )
    )
    shas.append(
        history.commit(
            "Add a module, drop another",
            "2026-11-02T10:00:00+02:00",
            {"torch/new_module.py": "NEW = 1\n", "torch/_refs/__init__.py": None},
        )
    )
    shas.append(
        history.commit(
            "Touch the end",
            "2026-11-03T00:00:00Z",
            {
                "torch/no_newline.py": "x = 1\ny = 3",
                "torch/nn/functional.py": history.text_at(shas[-1], "torch/nn/functional.py")
                + "line 30\n",
            },
            build_files=[SOFTMAX],
        )
    )
    shas.append(
        history.commit(
            "Revert the new module's line",
            "2026-11-04T00:00:00Z",
            {"torch/new_module.py": "NEW = 2\n"},
        )
    )
    return history, shas


def _git_apply(texts: dict[str, str], diff: str, folder: Path) -> dict[str, str]:
    """`git apply` of `diff` onto files with `texts`; the files after it."""
    for path, text in texts.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    (folder / "change.diff").write_text(diff)
    subprocess.run(["git", "apply", "change.diff"], cwd=folder, check=True, capture_output=True)
    (folder / "change.diff").unlink()
    return {
        p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()
    }


def test_every_compare_applies_to_the_base_snapshot(
    tmp_path: Path,
    upstream_github: UpstreamGitHubServer,  # noqa: F811
) -> None:
    history, shas = _history()
    history.register(upstream_github)
    adapter = GitHubAdapter(base_url=upstream_github.url, token=upstream_github.token)
    for i, base in enumerate(shas):
        for j in range(i + 1, len(shas)):
            found = adapter.comparison(REPO, base, shas[j])
            assert len(found.commit_messages) == j - i
            diff = compare_patch_text([dict(e) for e in found.entries])
            folder = tmp_path / f"{i}-{j}"
            folder.mkdir()
            after = _git_apply(history.snapshot(base), diff, folder)
            assert after == history.snapshot(shas[j]), (i, j)
    found = adapter.comparison(REPO, shas[0], shas[1])
    by_name = {e["filename"]: e for e in found.entries}
    assert by_name[SOFTMAX]["status"] == "modified"
    assert by_name["torch/nn/functional.py"]["patch"].startswith("@@ -2,7 +2,7 @@")
    assert "---" not in by_name["torch/nn/functional.py"]["patch"]


def test_compare_status_counts_commits_and_dates(
    upstream_github: UpstreamGitHubServer,  # noqa: F811
) -> None:
    history, shas = _history()
    history.register(upstream_github)
    api = f"{upstream_github.api_url}/repos/{REPO}"
    headers = {"Authorization": f"token {upstream_github.token}"}

    def compare(base: str, head: str) -> dict:
        answer = requests.get(f"{api}/compare/{base}...{head}", headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()

    ahead = compare(shas[1], shas[4])
    assert (ahead["status"], ahead["ahead_by"], ahead["behind_by"]) == ("ahead", 3, 0)
    assert ahead["total_commits"] == 3
    assert [c["sha"] for c in ahead["commits"]] == shas[2:]
    assert [c["commit"]["committer"]["date"] for c in ahead["commits"]] == [
        "2026-11-02T08:00:00Z",
        "2026-11-03T00:00:00Z",
        "2026-11-04T00:00:00Z",
    ]
    assert ahead["commits"][0]["parents"][0]["sha"] == shas[1]
    assert {f["filename"]: f["status"] for f in ahead["files"]} == {
        SOFTMAX: "modified",
        "torch/_refs/__init__.py": "removed",
        "torch/new_module.py": "added",
        "torch/nn/functional.py": "modified",
        "torch/no_newline.py": "modified",
    }
    behind = compare(shas[4], shas[1])
    assert (behind["status"], behind["ahead_by"], behind["behind_by"]) == ("behind", 0, 3)
    assert behind["commits"] == [] and behind["files"] == []
    assert behind["merge_base_commit"]["sha"] == shas[1]
    same = compare(shas[2], shas[2])
    assert (same["status"], same["total_commits"], same["files"]) == ("identical", 0, [])
    short = compare(shas[0][:7], "main")
    assert short["ahead_by"] == 4

    later = history.commit("One more", "2026-11-05T00:00:00Z", {"torch/late.py": "L\n"})
    assert compare(shas[4], later)["ahead_by"] == 1  # registered once, answers later commits

    missing = requests.get(f"{api}/compare/{'9' * 40}...{shas[1]}", headers=headers, timeout=10)
    assert missing.status_code == 404
    adapter = GitHubAdapter(base_url=upstream_github.url, token=upstream_github.token)
    with pytest.raises(GitHubRefused):
        adapter.comparison(REPO, shas[0], "9" * 40)


def test_commits_and_contents_of_the_history(
    upstream_github: UpstreamGitHubServer,  # noqa: F811
) -> None:
    history, shas = _history()
    history.register(upstream_github)
    adapter = GitHubAdapter(base_url=upstream_github.url, token=upstream_github.token)
    entries = adapter.commit_entries(REPO, shas[2])
    assert {e["filename"]: e["status"] for e in entries} == {
        "torch/_refs/__init__.py": "removed",
        "torch/new_module.py": "added",
    }
    root = adapter.commit_entries(REPO, shas[0])
    assert {e["status"] for e in root} == {"added"}
    assert SOFTMAX in {e["filename"] for e in root}  # a build file exists since the root
    window = adapter.window_commits(REPO, shas[0], shas[2])
    assert [(c.sha, c.message) for c in window] == [
        (shas[1], "Change relu\n\nLonger body."),
        (shas[2], "Add a module, drop another"),
    ]
    headers = {"Authorization": f"token {upstream_github.token}"}
    answer = requests.get(
        f"{upstream_github.api_url}/repos/{REPO}/commits/{shas[3]}", headers=headers, timeout=10
    ).json()
    assert answer["commit"]["committer"]["date"] == "2026-11-03T00:00:00Z"
    assert answer["stats"]["total"] == sum(f["changes"] for f in answer["files"])
    assert adapter.file_at(REPO, "torch/no_newline.py", shas[3]) == "x = 1\ny = 3"
    assert adapter.file_at(REPO, "torch/_refs/__init__.py", shas[2]) is None
    assert adapter.file_at(REPO, "torch/_refs/__init__.py", shas[1]) == "a\nb\nc\n"
    assert adapter.file_at(REPO, "torch/new_module.py", "main") == "NEW = 2\n"


def test_register_needs_the_history_server() -> None:
    history, _ = _history()
    with pytest.raises(TypeError):
        history.register(GitHubAPIServer())


def test_hunks_are_githubs_patch_form() -> None:
    assert hunks(None, "a\nb\n") == "@@ -0,0 +1,2 @@\n+a\n+b"
    assert hunks("a\n", None) == "@@ -1 +0,0 @@\n-a"
    assert hunks("x\ny", "x\nz") == (
        "@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+z\n\\ No newline at end of file"
    )
