"""The Inventory of the installed torch and the bundled (or given) specs, built once and cached.

`cache_key` is the one key of a cached Inventory (`run`, the workers, `select` and the
upgrade diff's environments all use it). It covers everything that can change an
Inventory: the torch version; every spec file; every expectations file a spec references or
that lies next to it; the upstream test files and `${NAME}` variables the file suites use;
and the `suites/` package itself (its code, schema, recorded names and bundled specs).
Names and contents are hashed, not where the files lie, so a copy elsewhere has the same
key. Building imports torch and its OpInfo database (about half a minute here).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflows.settings import child_environment
from workflows.stores import kept

if TYPE_CHECKING:
    from suites.model import Inventory

# What a spec names that is read while its Inventory is built (a cheap look at the text:
# parsing a 5 MB spec for its key would cost seconds, and an extra file only costs a rebuild).
_EXPECTATIONS = re.compile(r"""expectations_file\s*:\s*["']?([^"'\s#,}]+)""")
_TEST_PATH = re.compile(r"""(?:^|[\s{,-])path\s*:\s*["']?([^"'\s#,}]+)""", re.M)
_TOKEN = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")
# Read while expanding: the device under test decides which upstream decorators apply.
_ENV_READ = ("TORCH_SPYRE_TEST_TYPE", "SPYRE_CI_BACKEND", "SPYRE_CI_DEVICE")


def cache_key(
    specs: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    torch_version: str | None = None,
) -> str:
    """The cache key of the Inventory of `specs` (bundled by default) for `torch_version`
    (default: the installed torch), expanded in `environ` (default: the environment a test
    process inherits, the one it expands the specs in)."""
    environ = child_environment() if environ is None else environ
    from suites.loader import is_expectations_file, resolve_test_path, spec_paths

    digest = hashlib.sha256()
    version = torch_version if torch_version is not None else metadata.version("torch")
    digest.update(f"torch {version}\0".encode())
    for rel, path in _package_files():
        _add(digest, f"suites/{rel}", path)
    names: set[str] = set(_ENV_READ)
    for spec in sorted(spec_paths(list(specs) or None)):
        _add(digest, f"spec {spec.name}", spec)
        text = _text(spec)
        folder = spec.parent
        extra: dict[str, Path] = {}
        if folder.is_dir():
            for near in sorted(folder.iterdir()):
                if is_expectations_file(near):
                    extra[near.name] = near
        for ref in _EXPECTATIONS.findall(text):
            extra.setdefault(ref, folder / ref)
        for raw in _TEST_PATH.findall(text):
            target, _missing = resolve_test_path(raw, spec)
            if target is not None:
                extra.setdefault(f"test {raw}", target)
        names.update(_TOKEN.findall(text))
        for name, path in sorted(extra.items()):
            _add(digest, f"{spec.name} -> {name}", path)
    for name in sorted(names):
        digest.update(f"env {name}={environ.get(name, '')}\0".encode())
    return digest.hexdigest()[:16]


def _package_files() -> Iterable[tuple[str, Path]]:
    import suites

    root = Path(suites.__file__).resolve().parent
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield str(path.relative_to(root)), path


def _add(digest: Any, label: str, path: Path) -> None:
    """A file's label and bytes; what stands in for them when it cannot be read (the build
    then says why)."""
    digest.update(label.encode("utf-8", "replace") + b"\0")
    try:
        if path.is_file():
            digest.update(path.read_bytes())
        else:
            digest.update(b"<missing>" if not path.exists() else b"<not a file>")
    except OSError as exc:
        digest.update(f"<unreadable: {exc.errno}>".encode())
    digest.update(b"\0")


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace") if path.is_file() else ""
    except OSError:
        return ""


# Inventories read in this process, by file and its modification: the cache checked, then
# the plan, the finish and a worker's every run read the same file. An Inventory is frozen,
# so sharing it is safe.
_read: dict[tuple[str, int, int], Inventory] = {}


def read_inventory(path: Path) -> Inventory:
    """The Inventory in the file at `path`, read once per process while the file is unchanged
    (its errors are Inventory.load's)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    inventory = _read.get(key)
    if inventory is None:
        inventory = _load_kept(path)
        if len(_read) >= 4:
            _read.pop(next(iter(_read)))
        _read[key] = inventory
    return inventory


def _load_kept(path: Path) -> Inventory:
    """The Inventory in `path`, from its kept form in the cache folder when there is one
    (`workflows.stores.kept`: a quarter of the time of its JSON), which its first read
    makes; named by a digest of the file's bytes, so a rebuilt Inventory is read anew."""
    from suites import model

    store = kept.store(
        "inventories",
        [Path(model.__file__)],
        "the Inventory",
        limit=8,
        valid=lambda value: isinstance(value, model.Inventory),
    )
    if store is None:
        return model.Inventory.load(path)
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).digest()
    inventory = store.load(digest)
    if isinstance(inventory, model.Inventory):
        return inventory
    # From the very bytes digested: a file replaced meanwhile is never kept under the
    # digest of the one before.
    inventory = model.Inventory.from_bytes(raw, compressed=path.suffix == ".gz")
    store.save(digest, inventory)
    return inventory


def read_cached(path: Path) -> Inventory | None:
    """The cached Inventory at `path`; None (said on stderr, the file removed) when it
    cannot be read: a truncated or corrupt file is rebuilt instead of failing every run."""
    import zlib

    try:
        return read_inventory(path)
    except (
        OSError,
        EOFError,
        zlib.error,
        UnicodeDecodeError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
    ) as exc:
        print(
            f"spyre-ci: the cached Inventory {path} is unreadable ({type(exc).__name__}: "
            f"{exc}); building it again",
            file=sys.stderr,
        )
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def default_inventory(state_dir: Path, specs: Sequence[str] = ()) -> Path:
    """The cached Inventory path, building it first when the cache has none (or an
    unreadable one). Spec files refused from it are said on stderr each time. Built here,
    with the specs expanded in the environment the test processes inherit (the key's)."""
    from suites.inventory import report_refused

    environ = child_environment()
    path = state_dir / "inventories" / f"inventory-{cache_key(specs, environ)}.json.gz"
    if path.exists():
        cached = read_cached(path)
        if cached is not None:
            for spec, why in cached.refused_specs.items():
                report_refused(spec, why)
            return path
    from suites.inventory import build_inventory

    print(f"building the Inventory of the installed torch into {path} ...", file=sys.stderr)
    inventory = build_inventory(list(specs) or None, environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".{os.getpid()}.tmp.gz")
    inventory.save(partial)
    partial.replace(path)  # atomic: a concurrent builder never sees half a file
    return path


def build_env_inventory(
    state_dir: Path,
    python: str,
    torch_version: str,
    label: str,
    specs: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> Path:
    """The cached Inventory of another torch environment (a build of the source, with the
    upstream drift in `extra_env`): built by that environment's interpreter
    (`python -m workflows inventory`), keyed by its torch version and `label` (the build's
    sha and drift), so its Inventory, and the traces that follow its torch version, are its
    own and never the installed torch's."""
    import subprocess

    environ = child_environment(dict(extra_env or {}))
    key = cache_key(specs, environ, torch_version=torch_version)
    path = state_dir / "inventories" / f"inventory-{key}-{label}.json.gz"
    if path.exists() and read_cached(path) is not None:
        return path
    print(
        f"building the Inventory of torch {torch_version} ({python}) into {path} ...",
        file=sys.stderr,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".{os.getpid()}.tmp.gz")
    spec_args = [a for spec in specs for a in ("--specs", str(Path(spec).resolve()))]
    done = subprocess.run(
        [python, "-m", "workflows", "inventory", "--out", str(partial), *spec_args],
        capture_output=True,
        text=True,
        check=False,
        env=environ,
    )
    if done.returncode != 0 or not partial.exists():
        from workflows.errors import InfrastructureError

        partial.unlink(missing_ok=True)
        raise InfrastructureError(
            f"the Inventory of torch {torch_version} ({python}) could not be built "
            f"(exit {done.returncode}): {done.stderr.strip()[-1500:]}"
        )
    partial.replace(path)
    return path
