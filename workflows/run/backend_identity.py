"""The backend under test as a run names it: its package, version, device and a digest of
its files, as a test process imports it (a backend edited without a new version is another
backend: its outcomes are another backend's)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from importlib.machinery import PathFinder
from importlib.util import find_spec
from pathlib import Path

from contracts.backend import BackendId
from suites.backend import BUNDLED_BACKEND, backend_package, device_name
from workflows.settings import child_environment


def backend(environ: Mapping[str, str] | None = None) -> BackendId:
    """The backend under test: its package, version, device name (`$SPYRE_CI_BACKEND`,
    `$SPYRE_CI_DEVICE`; the bundled emulated Spyre by default, `suites.backend`) and the
    digest of its files (`backend_digest`): a backend edited without a new version is
    another backend. As a test process sees them: in `environ`, default the environment it
    inherits."""
    environ = child_environment() if environ is None else environ
    package, device = backend_package(environ), device_name(environ)
    distribution = "spyre-ci" if package == BUNDLED_BACKEND else package.replace("_", "-")
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        version = "unknown"
    return BackendId(package, version, device, backend_digest(package, environ))


def backend_digest(package: str, environ: Mapping[str, str] | None = None) -> str:
    """sha256 (16 hex digits) over the paths and bytes of the files of the backend's package
    as a test process imports it (caches and bytecode left out); "" when it is not found or
    not a folder. A test process finds it on its PYTHONPATH first (that of `environ`,
    default the environment it inherits): this process's own working directory (first on its
    path under `python -m`) is not on the test's."""
    env = child_environment() if environ is None else environ
    top = package.split(".", 1)[0]
    entries = [str(Path(e).resolve()) for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    try:
        spec = PathFinder.find_spec(top, entries) if entries else None
        spec = spec or find_spec(top)
    except (ImportError, ValueError):
        return ""
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return _folder_digest(str(Path(locations[0]).resolve())) if locations else ""


def _folder_digest(folder: str) -> str:
    """The digest of `folder`'s files, computed again whenever one of them is added, removed
    or rewritten (a long-lived worker sees a backend edited under it): the files' paths,
    sizes and modification times key a cache of the digests already read."""
    root = Path(folder)
    files = []
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        if path.is_file():
            files.append((path.relative_to(root).as_posix(), stat.st_size, stat.st_mtime_ns))
    return _digest_of(folder, tuple(files))


@cache
def _digest_of(folder: str, files: tuple[tuple[str, int, int], ...]) -> str:
    root = Path(folder)
    digest = hashlib.sha256()
    for relative, _size, _mtime in files:
        try:
            data = (root / relative).read_bytes()
        except OSError:
            continue
        digest.update(relative.encode() + b"\0")
        digest.update(data)
    return digest.hexdigest()[:16]
