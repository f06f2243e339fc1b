"""The Inventory of the installed torch and the bundled (or given) specs, built once and cached.

The cache key covers what can change the Inventory: the torch version and every spec file's
bytes. Building imports torch and its OpInfo database (about half a minute here).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path


def cache_key(specs: Sequence[str] = ()) -> str:
    from suites.loader import spec_paths

    digest = hashlib.sha256()
    digest.update(metadata.version("torch").encode())
    for path in sorted(spec_paths(list(specs) or None)):
        digest.update(str(path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def default_inventory(state_dir: Path, specs: Sequence[str] = ()) -> Path:
    """The cached Inventory path, building it first when the cache has none."""
    path = state_dir / "inventories" / f"inventory-{cache_key(specs)}.json.gz"
    if path.exists():
        return path
    from suites.inventory import build_inventory

    print(f"building the Inventory of the installed torch into {path} ...", file=sys.stderr)
    inventory = build_inventory(list(specs) or None)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".{os.getpid()}.tmp.gz")
    inventory.save(partial)
    partial.replace(path)  # atomic: a concurrent builder never sees half a file
    return path
