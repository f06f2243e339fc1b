"""Prepared torch environments by git sha: where a run finds the torch an event names.

Looked up, first match wins, among the virtual environments (a folder with `pyvenv.cfg` and
`bin/python`, the project installed in it) at or directly under:

1. `Settings.torch_builds` (`$SPYRE_CI_TORCH_BUILDS`): a folder a team fills with one
   environment per upstream commit it builds (nightlies, a CI's own builds), named as it likes,
   or one such environment itself;
2. the upgrade run's environment cache (`Settings.env_cache_dir`, `$SPYRE_CI_ENV_CACHE`,
   `torch-<version>` folders).

The process that looks is handed those folders (`roots(settings)`): a shard looks where it
runs, with the settings of its process (the command's, or the Celery worker's).

An environment is the event's when the git sha of its torch (`torch/version.py`, read without
running it) is the sha asked for; the folder's name is never trusted. When none has it, the
run applies the change's Python files to the installed torch (`workflows.runner.change_overlay`),
and
when that cannot hold the change either, the verdict says so (`workflows.run.under_test`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from workflows.settings import Settings


@dataclass(frozen=True)
class TorchBuild:
    path: Path  # the environment's folder
    version: str
    git_sha: str

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")


def roots(settings: Settings) -> tuple[Path, ...]:
    """The folders prepared environments are looked up in, in order: the torch builds, then
    the upgrade run's environment cache (those the settings name)."""
    return tuple(p for p in (settings.torch_builds, settings.env_cache_dir) if p is not None)


def find(sha: str, folders: Sequence[Path]) -> TorchBuild | None:
    """The prepared environment under `folders` (`roots(settings)`) whose torch is at `sha`
    (7 characters at least), or None."""
    sha = sha.strip().lower()
    if len(sha) < 7:
        return None
    for folder in _candidates(folders):
        build = read_build(folder)
        if build is not None and build.git_sha[: len(sha)] == sha[: len(build.git_sha)]:
            return build
    return None


def _candidates(folders: Sequence[Path]) -> Iterator[Path]:
    """The environments the roots hold, or are (a root that is one environment itself)."""
    for root in folders:
        if not root.is_dir():
            continue
        itself = (root / "pyvenv.cfg").is_file()
        for folder in (root,) if itself else sorted(root.iterdir()):
            if (folder / "pyvenv.cfg").is_file() and (folder / "bin" / "python").exists():
                yield folder


@lru_cache(maxsize=64)
def read_build(folder: Path) -> TorchBuild | None:
    """The torch of the environment at `folder` (version and git sha), or None."""
    for version_file in sorted(folder.glob("lib/python3*/site-packages/torch/version.py")):
        version, sha = read_version(version_file)
        if sha:
            return TorchBuild(folder, version or "unknown", sha)
    return None


def read_version(version_file: Path) -> tuple[str, str]:
    """(`__version__`, `git_version`) of a torch's `version.py`, read without importing it;
    "" for what it does not say (or says is unknown)."""
    try:
        text = version_file.read_text(encoding="utf-8")
    except OSError:
        return "", ""
    return parse_version_text(text)


def parse_version_text(text: str) -> tuple[str, str]:
    """(`__version__`, `git_version`) of the text of a torch's `version.py`; "" for what it
    does not say (or says is unknown)."""
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        key = name.split(":", 1)[0].strip()  # `cuda: Optional[str] = None` too
        if key in ("__version__", "git_version"):
            values[key] = value.split("#", 1)[0].strip().strip("'\"")
    sha = values.get("git_version", "").lower()
    return values.get("__version__", ""), "" if len(sha) < 7 or sha == "unknown" else sha
