"""The Inventory of each environment, and the details the diff names changes with.

`describe` runs INSIDE an environment (`python -m workflows.drivers.upgrade describe --out FILE`):
per-subject field digests, per-variant decorators and precision, template digests, from the
suites' own fingerprint functions. Inventories are read with the pipeline's `load_inventory`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites.backend import device_name
from suites.model import Inventory
from workflows.drivers.upgrade.environments import (
    PROJECT_ROOT,
    EnvironmentFault,
    Log,
    TorchEnv,
    UpgradeError,
    stderr_log,
)
from workflows.run.pipeline import load_inventory

DETAILS_FORMAT = 1


def specs_key(specs: Sequence[str] = (), torch_version: str = "") -> str:
    """The Inventory cache key (`workflows.stores.inventory_cache.cache_key`, the one every cache
    of Inventories uses) of `specs` for `torch_version`."""
    from workflows.stores.inventory_cache import cache_key

    return cache_key(specs, torch_version=torch_version)


@dataclass(frozen=True)
class BuiltInventory:
    inventory: Inventory
    path: Path
    details: dict[str, Any] | None
    details_path: Path | None
    seconds: float


def build_inventory(
    env: TorchEnv, specs: Sequence[str] = (), *, log: Log = stderr_log, reuse: bool = True
) -> BuiltInventory:
    """The Inventory (and details) of `env`, built by the environment's own python."""
    key = specs_key(specs, env.version)
    path = env.path / f"inventory-{key}.json.gz"
    details_path = env.path / f"inventory-{key}.details.json.gz"
    started = time.monotonic()
    spec_args = [a for s in specs for a in ("--specs", str(Path(s).resolve()))]
    if reuse and path.exists() and details_path.exists():
        from workflows.stores.inventory_cache import read_cached

        try:
            load_details(details_path)
        except UpgradeError as exc:
            log(f"torch {env.version}: {exc}; building it again")
            reuse = False
        if read_cached(path) is None:  # says so on stderr
            reuse = False
    if not (reuse and path.exists() and details_path.exists()):
        log(f"torch {env.version}: building the Inventory ({env.python} -m workflows inventory)")
        for command in (
            [env.python, "-m", "workflows", "inventory", "--out", str(path), *spec_args],
            [
                env.python,
                "-m",
                "workflows.drivers.upgrade",
                "describe",
                "--out",
                str(details_path),
                *spec_args,
            ],
        ):
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, cwd=PROJECT_ROOT
            )
            if done.returncode != 0:
                message = (
                    f"torch {env.version}: `{' '.join(command)}` exited "
                    f"{done.returncode}:\n{done.stderr.strip()[-2000:]}"
                )
                # 2 is the CLI's bad input (specs that do not load), in any environment.
                raise (UpgradeError if done.returncode == 2 else EnvironmentFault)(message)
            if done.stdout.strip():
                log(f"  {done.stdout.strip()}")
    else:
        log(f"torch {env.version}: reusing {path}")
    inventory = load_inventory(path)
    if inventory.torch_version != env.version:
        raise UpgradeError(f"{path}: built for torch {inventory.torch_version}, not {env.version}")
    return BuiltInventory(
        inventory, path, load_details(details_path), details_path, time.monotonic() - started
    )


def details_path_for(inventory_path: str | Path) -> Path:
    """Where an Inventory's details live: `X.json.gz` -> `X.details.json.gz`."""
    path = Path(inventory_path)
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ".details.json.gz")
    return path.with_name(name + ".details.json.gz")


def load_details(path: str | Path | None) -> dict[str, Any] | None:
    """Details written by `describe`, or None when the file is absent."""
    if path is None or not Path(path).is_file():
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UpgradeError(
            f"{path}: not readable details ({exc}); delete it to diff on "
            "fingerprints alone, or build it again"
        ) from None
    if not isinstance(data, dict):
        raise UpgradeError(f"{path}: details must be a JSON object")
    return data


def describe(specs: Sequence[str] = ()) -> dict[str, Any]:
    """Per-subject field digests, per-variant decorators and precision, template digests.

    Imports torch: run it in the environment being described. The texts come from the suites'
    fingerprint functions, so the diff compares exactly what the fingerprints hash, field by
    field.
    """
    import torch

    from suites.expand import expand, load_suites, rename_records
    from suites.fingerprint import (
        applicable_decorators,
        callable_digest,
        definition_text,
        describe_decorator,
    )
    from suites.template_names import TEMPLATE_UPSTREAM
    from suites.templates import get_template

    expansion = expand(load_suites(list(specs) or None))
    subjects: dict[str, dict[str, str]] = {}
    templates: dict[str, str] = {}
    variants: dict[str, dict[str, Any]] = {}
    for planned in expansion.planned:
        v = planned.variant
        if planned.kind != "opinfo" or planned.info is None:
            continue
        key = f"{planned.db}:{v.subject}"
        if key not in subjects:
            fields: dict[str, str] = {}
            for line in definition_text(planned.info).split("\n"):
                name, _, value = line.partition("=")
                fields[name] = hashlib.sha256(value.encode()).hexdigest()[:16]
            subjects[key] = fields
        if v.template not in templates:
            templates[v.template] = callable_digest(get_template(v.template))
        cls, test = TEMPLATE_UPSTREAM[v.template]
        decorators = applicable_decorators(planned.info, cls, test, device_name(), planned.dtype)
        variants[v.id] = {
            "subject": key,
            "decorators": sorted(describe_decorator(d) for d in decorators),
            "precision": repr(planned.precision),
        }
    return {
        "format": DETAILS_FORMAT,
        "torch_version": torch.__version__.split("+")[0],
        "subjects": subjects,
        "templates": templates,
        "variants": variants,
        # Every variant (and every upstream test a file suite excludes) as rename matching
        # sees it: `selector.upgrade` finds what upstream renamed (`suites.renames`).
        "renames": [r.to_json() for r in rename_records(expansion)],
    }
