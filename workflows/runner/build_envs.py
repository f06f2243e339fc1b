"""One isolated environment per torch build, in the environment cache the upgrade run shares
(`Settings.env_cache_dir`): `build-<sha12>/`, a venv with the build's wheel, what the test
processes need, and this project (`--no-deps`: the project pins another torch).

    build = provision(wheel, sha, settings.env_cache_dir, max_bytes=settings.env_cache_max_bytes)
    build.python                                  # runs the tests on that torch

Provisioned once: a lock per build makes a second run wait for the first and then reuse its
environment; a half-made one (no marker) is made again. The marker's time is the last use;
before a new environment is made, the least recently used ones are removed until the cache
fits `max_bytes` (an environment used within `IN_USE_S` is never removed: a run may be on
it). A build whose `import torch` fails is marked broken and not provisioned again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from workflows.errors import InfrastructureError
from workflows.runner.build_source import locked
from workflows.runner.torch_builds import TorchBuild, read_build
from workflows.settings import child_environment

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MARKER = ".spyre-ci-env.json"  # the upgrade run's marker name too: one cache, one rule
BROKEN = ".spyre-ci-broken.json"
# What a test process needs beside torch and the project (the upgrade run's list).
EXTRA_PACKAGES = ("expecttest", "numpy", "pyyaml", "jsonschema", "pytest")
IN_USE_S = 3600.0

Log = Callable[[str], None]


class BuildEnvError(InfrastructureError):
    """A build's environment could not be made (disk, pip, a build that does not import):
    exit 3, the event is retried later."""


def env_folder(cache_dir: Path, sha: str) -> Path:
    return cache_dir / f"build-{sha[:12]}"


def provision(
    wheel: Path,
    sha: str,
    cache_dir: Path,
    *,
    max_bytes: int,
    log: Log = lambda _text: None,
    project: Path = PROJECT_ROOT,
) -> TorchBuild:
    """The environment of the build in `wheel` (git sha `sha`), made once under `cache_dir`."""
    folder = env_folder(cache_dir, sha)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with locked(cache_dir / f".{folder.name}.lock"):
        broken = folder / BROKEN
        if broken.is_file():
            raise BuildEnvError(
                f"torch build {sha[:12]} ({wheel.name}) was found broken before: "
                f"{_read_json(broken).get('why', '')} (remove {folder} to try again)"
            )
        build = _ready(folder, sha, project)
        if build is not None:
            touch(folder)
            return build
        if folder.exists():
            log(f"torch build {sha[:12]}: {folder} is incomplete; making it again")
            shutil.rmtree(folder, ignore_errors=True)
        wanted = wheel.stat().st_size * 5  # unpacked, with the packages beside it
        evict(cache_dir, max_bytes - wanted, log, keep=folder)
        free = shutil.disk_usage(cache_dir).free
        if free < wanted:
            raise BuildEnvError(
                f"environment cache {cache_dir}: {free / 1e9:.1f} GB free, the build "
                f"{wheel.name} needs about {wanted / 1e9:.1f} GB"
            )
        started = time.monotonic()
        log(f"torch build {sha[:12]}: making {folder} from {wheel.name}")
        try:
            _make(folder, wheel, project)
        except BuildEnvError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        why = _import_error(folder)
        if why:
            _write_json(broken, {"sha": sha, "wheel": wheel.name, "why": why})
            raise BuildEnvError(
                f"torch build {sha[:12]} ({wheel.name}): `import torch` fails in it: {why}"
            )
        found = read_build(folder)
        if found is None or found.git_sha[:12] != sha[:12]:
            shutil.rmtree(folder, ignore_errors=True)
            raise BuildEnvError(
                f"torch build {sha[:12]}: the environment made from {wheel.name} does not "
                f"have that torch (it has {found.git_sha[:12] if found else 'none'})"
            )
        _write_json(
            folder / MARKER,
            {
                "sha": sha,
                "torch": found.version,
                "wheel": wheel.name,
                "project": str(project),
                "packages": list(EXTRA_PACKAGES),
                "created_s": round(time.monotonic() - started, 1),
                "bytes": folder_bytes(folder),
            },
        )
        log(f"torch build {sha[:12]}: ready in {time.monotonic() - started:.0f} s")
        read_build.cache_clear()
        return found


def _ready(folder: Path, sha: str, project: Path) -> TorchBuild | None:
    marker = _read_json(folder / MARKER)
    if marker.get("sha") != sha or marker.get("project") != str(project):
        return None
    read_build.cache_clear()
    build = read_build(folder)
    return build if build is not None and build.git_sha[:12] == sha[:12] else None


def _make(folder: Path, wheel: Path, project: Path) -> None:
    log_file = folder.with_name(f"{folder.name}.log")
    python = str(folder / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    # The build is the wheel asked for: a local version cap (a pip constraint) does not apply
    # to it; torch's own dependencies come from the configured indexes as usual.
    env = child_environment({"PIP_CONSTRAINT": os.devnull})
    steps = (
        [sys.executable, "-m", "venv", str(folder)],
        [*pip, str(wheel), *EXTRA_PACKAGES],
        [*pip, "--no-deps", "-e", str(project)],
    )
    with open(log_file, "w", encoding="utf-8") as out:
        for command in steps:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
            if done.returncode != 0:
                tail = log_file.read_text(encoding="utf-8", errors="replace")[-1200:]
                raise BuildEnvError(
                    f"{folder.name}: `{' '.join(command[:6])} ...` exited {done.returncode} "
                    f"(whole output in {log_file}):\n{tail}"
                )


def _import_error(folder: Path) -> str:
    probe = "import torch, sys; sys.stdout.write(torch.__version__)"
    try:
        done = subprocess.run(
            [str(folder / "bin" / "python"), "-c", probe],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=folder,
        )
    except subprocess.TimeoutExpired:
        return "it did not finish within 300 s"
    if done.returncode == 0:
        return ""
    lines = (done.stderr or "").strip().splitlines()
    return lines[-1][:300] if lines else f"exit code {done.returncode}"


def touch(folder: Path) -> None:
    """Mark `folder`'s environment as just used (least-recently-used eviction)."""
    with contextlib.suppress(OSError):
        os.utime(folder / MARKER)


def evict(cache_dir: Path, budget: int, log: Log, *, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used environments until the rest take `budget` bytes at
    most; never `keep`, nor one used within `IN_USE_S`. The removed folders."""
    envs = []
    for folder in cache_dir.iterdir() if cache_dir.is_dir() else ():
        marker = folder / MARKER
        if folder == keep or not marker.is_file():
            continue
        size = _read_json(marker).get("bytes")
        envs.append((marker.stat().st_mtime, folder, size if isinstance(size, int) else None))
    total = sum(s if s is not None else folder_bytes(f) for _m, f, s in envs)
    removed = []
    now = time.time()
    for used, folder, size in sorted(envs, key=lambda e: e[0]):
        if total <= budget:
            break
        if now - used < IN_USE_S:
            continue
        size = size if size is not None else folder_bytes(folder)
        log(f"environment cache: removing {folder.name} ({size / 1e9:.1f} GB, least recently used)")
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        removed.append(folder)
    return removed


def folder_bytes(path: Path) -> int:
    """The bytes of the files under `path` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, object]) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
