"""Environments of torch builds (`workflows.runner.build_envs`): made once per build by real
`python -m venv` and pip, shared by two runs that want the same build at once, refused for a
build that does not import, and bounded by least-recently-used eviction.

The wheels are small stand-ins that install a `torch` package with a `version.py` (a real
wheel takes a minute to install; `test_follow_upstream.py` makes one)."""

from __future__ import annotations

import json
import os
import threading
import time
import zipfile
from pathlib import Path

import pytest

from workflows.errors import InfrastructureError
from workflows.runner import build_envs
from workflows.runner.build_envs import MARKER, BuildEnvError, evict, provision

TAGS = "py3-none-any"
GOOD_SHA = "a" * 40
BROKEN_SHA = "b" * 40


def small_wheel(folder: Path, version: str, sha: str, init: str = "") -> Path:
    """An installable `torch` wheel: `torch/__init__.py` (`init`) and `torch/version.py`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torch-{version}-{TAGS}.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": init or f"__version__ = '{version}'\n",
        "torch/version.py": f"__version__ = '{version}'\ngit_version = '{sha}'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {TAGS}\n"
        ),
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(
            f"{info}/RECORD", "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
        )
    return path


@pytest.mark.slow  # three venvs with pip: about a minute on a quiet machine
def test_a_build_is_made_once_for_two_runs_at_once_and_a_broken_one_is_refused(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "envs"
    good = small_wheel(tmp_path / "w", "2.16.0.dev20261201", GOOD_SHA)
    broken = small_wheel(
        tmp_path / "w",
        "2.16.0.dev20261202",
        BROKEN_SHA,
        "raise ImportError('libtorch_cpu.so: cannot open')\n",
    )
    said: list[str] = []
    found: dict[str, object] = {}

    def make(name: str, wheel: Path, sha: str) -> None:
        try:
            found[name] = provision(wheel, sha, cache, max_bytes=10**12, log=said.append)
        except BuildEnvError as exc:
            found[name] = exc

    threads = [
        threading.Thread(target=make, args=("first", good, GOOD_SHA)),
        threading.Thread(target=make, args=("second", good, GOOD_SHA)),
        threading.Thread(target=make, args=("broken", broken, BROKEN_SHA)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)

    first, second = found["first"], found["second"]
    assert isinstance(first, build_envs.TorchBuild), first
    assert first == second
    assert first.git_sha == GOOD_SHA and first.version == "2.16.0.dev20261201"
    assert first.path == cache / "build-aaaaaaaaaaaa"
    assert sum("making" in line and "aaaaaaaaaaaa" in line for line in said) == 1
    marker = json.loads((first.path / MARKER).read_text())
    assert marker["sha"] == GOOD_SHA and marker["bytes"] > 0

    assert isinstance(found["broken"], BuildEnvError)
    assert "libtorch_cpu.so" in str(found["broken"])
    began = time.monotonic()
    with pytest.raises(BuildEnvError, match="found broken before"):
        provision(broken, BROKEN_SHA, cache, max_bytes=10**12)
    assert time.monotonic() - began < 5  # refused without pip

    # Reused as it is, its last use refreshed.
    os.utime(first.path / MARKER, (1, 1))
    again = provision(good, GOOD_SHA, cache, max_bytes=10**12, log=said.append)
    assert again == first
    assert (first.path / MARKER).stat().st_mtime > 1


def test_the_least_recently_used_environments_go_first_and_a_recent_one_stays(
    tmp_path: Path,
) -> None:
    now = time.time()
    ages = {"build-old": 10 * 86400, "torch-2.14.1": 5 * 86400, "build-recent": 60}
    for name, age in ages.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / MARKER).write_text(json.dumps({"bytes": 4 * 10**9}))
        os.utime(folder / MARKER, (now - age, now - age))
    (tmp_path / "downloads").mkdir()  # not an environment: never counted nor removed
    said: list[str] = []
    removed = evict(tmp_path, 5 * 10**9, said.append)
    assert [p.name for p in removed] == ["build-old", "torch-2.14.1"]
    assert (tmp_path / "build-recent").is_dir() and (tmp_path / "downloads").is_dir()
    assert "least recently used" in said[0]
    assert evict(tmp_path, 0, said.append) == []  # used within the hour: kept over the bound


def test_a_cache_without_room_for_the_build_is_an_outage_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """The disk under the environment cache cannot hold the build (a wheel that claims 1 TB,
    sparse): refused before anything is made, with the free space and the need named, as an
    infrastructure fault (exit 3: the event is tried again later), and no folder left."""
    wheel = tmp_path / "wheels" / f"torch-2.16.0.dev20261201-{TAGS}.whl"
    wheel.parent.mkdir()
    with wheel.open("wb") as handle:
        handle.truncate(2**40)  # 1 TB, sparse: more than the disk holds
    cache = tmp_path / "envs"
    with pytest.raises(BuildEnvError, match=r"GB free, the build .* needs about") as raised:
        provision(wheel, GOOD_SHA, cache, max_bytes=2**60)
    assert isinstance(raised.value, InfrastructureError)
    assert not build_envs.env_folder(cache, GOOD_SHA).exists()
