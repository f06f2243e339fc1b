"""`spyre-ci bump`: what it refuses before any environment is made, and its file edits.

The whole bump (two torch environments, an upgrade run, a trace and a full run of the new
torch) is measured in `benchmarks/results/bump.json`; here are the parts that decide what it
edits and what it refuses.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workflows.drivers.upgrade.bump import (
    BumpError,
    check_checkout,
    pinned_torch,
    repin,
    still_naming,
)

PYPROJECT = """[project]
name = "x"
dependencies = [
    "torch==2.13.0",  # pinned: pip takes the CPU wheel
    "torchvision>=0.1",
]
"""


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "README.md").write_text("torch==2.13.0 is pinned\nnothing else\n")
    (repo / "data.json").write_text('{"torch": "2.13.0"}\n')
    for args in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    return repo


def test_the_pin_is_read_and_moved_and_nothing_else_changes(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    assert pinned_torch(repo) == "2.13.0"
    repin(repo, "2.13.0", "2.14.1")
    text = (repo / "pyproject.toml").read_text()
    assert text == PYPROJECT.replace("torch==2.13.0", "torch==2.14.1")
    assert pinned_torch(repo) == "2.14.1"


def test_no_pin_or_two_pins_is_named(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('dependencies = ["torch>=2"]\n')
    with pytest.raises(BumpError, match="expected one torch==VERSION pin, found none"):
        pinned_torch(tmp_path)
    (tmp_path / "pyproject.toml").write_text('a = ["torch==2.13.0"]\nb = ["torch==2.14.1"]\n')
    with pytest.raises(BumpError, match="found 2.13.0, 2.14.1"):
        pinned_torch(tmp_path)


def test_a_checkout_with_uncommitted_changes_is_refused_by_name(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    check_checkout(repo)  # clean: no error
    (repo / "README.md").write_text("edited\n")
    with pytest.raises(BumpError, match=r"uncommitted changes \(M README.md\): commit or stash"):
        check_checkout(repo)


def test_what_still_names_the_old_version_leaves_data_out(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    assert still_naming(repo, "2.13.0") == [
        "README.md:1:torch==2.13.0 is pinned",
        'pyproject.toml:4:    "torch==2.13.0",  # pinned: pip takes the CPU wheel',
    ]


def test_the_command_refuses_a_version_already_pinned(tmp_path: Path) -> None:
    from workflows.drivers.upgrade.bump import pinned_torch as pinned

    done = subprocess.run(
        [sys.executable, "-m", "workflows", "bump", "--to", pinned(), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"torch is pinned at {pinned()} already" in done.stderr


# What an upgrade environment holds: torch, the project (--no-deps) and EXTRA_PACKAGES. The
# modules that run there (the Inventory, `describe`, the trace, a full run, the shards) must
# import nothing else: `describe` once reached the relay's GitHub client through the pipeline
# and failed in every new environment.
_IN_ENV = (
    "workflows.drivers.upgrade.__main__",
    "workflows.cli.main",
    "workflows.cli.commands.run",
    "workflows.cli.commands.impact_map",
    "workflows.cli.commands.inventory",
    "workflows.run.pipeline",
    "workflows.drivers.embedded",
    "workflows.tracing.impact_recorder",
    "suites.pytest_plugin",
)
_BLOCKER = """
import importlib.abc, sys
from importlib import metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as name

allowed, todo = set(), [Requirement(r) for r in sys.argv[1].split("|")]
while todo:  # what the listed packages need with their extras, as their metadata says (pip's)
    req = todo.pop()
    key = (name(req.name), frozenset(req.extras))
    if key in allowed:
        continue
    allowed.add(key)
    try:
        listed = [Requirement(r) for r in metadata.requires(req.name) or ()]
    except metadata.PackageNotFoundError:
        continue
    for extra in ("", *req.extras):
        todo += [r for r in listed if r.marker is None or r.marker.evaluate({"extra": extra})]
allowed = {dist for dist, _ in allowed}
owners = metadata.packages_distributions()
refused = []

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if "." in fullname:
            return None
        dists = {name(d) for d in owners.get(fullname, ())} - {"spyre-ci"}
        if dists and not dists & allowed:
            refused.append(f"{fullname} ({', '.join(sorted(dists))})")
            raise ImportError(f"{fullname}: not in an upgrade environment")
        return None

sys.meta_path.insert(0, Blocker())
import importlib
for module in sys.argv[2:]:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        print(f"{module}: {exc}")
print("refused:", sorted(set(refused)))
"""


def test_what_runs_in_an_upgrade_environment_imports_only_what_it_is_given() -> None:
    from workflows.drivers.upgrade.environments import EXTRA_PACKAGES

    given = "|".join(["torch", *EXTRA_PACKAGES])
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKER, given, *_IN_ENV],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "refused: []", done.stdout
    # The check can fail: without the project's own requirements, the schema validator the
    # exports use is refused. (The GitHub client is no longer imported by these modules: the
    # code that only catches its errors imports them apart from it.)
    bare = "|".join(["torch", "expecttest", "numpy", "pyyaml", "pytest"])
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKER, bare, *_IN_ENV],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "jsonschema (jsonschema)" in done.stdout, done.stdout
    assert "github3" not in done.stdout, done.stdout


def test_the_full_run_is_a_nightly_at_the_new_torch_s_own_sha(tmp_path: Path) -> None:
    import json

    from workflows.drivers.upgrade.bump import nightly_event
    from workflows.drivers.upgrade.environments import EnvironmentFault, TorchEnv

    env = TorchEnv("2.14.1", tmp_path / "torch-2.14.1")
    version = env.path / "lib" / "python3.11" / "site-packages" / "torch" / "version.py"
    version.parent.mkdir(parents=True)
    sha = "5c48869085841234567890abcdef1234567890ab"
    version.write_text(f"__version__ = '2.14.1+cu130'\ngit_version = '{sha}'\n")
    event = json.loads(nightly_event(env, tmp_path / "out").read_text())
    assert event["event"] == "nightly" and event["delivery_id"] == "bump-5c4886908584"
    assert event["payload"]["head_sha"] == sha
    assert event["payload"]["version"] == "2.14.1+cu130"
    # The run is of that torch as it is: `run` calls it tested only at its own sha.
    version.write_text("__version__ = '2.14.1'\ngit_version = 'Unknown'\n")
    with pytest.raises(EnvironmentFault, match="names no git sha"):
        nightly_event(env, tmp_path / "out")
