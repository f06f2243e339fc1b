"""Build the Inventory of the loaded suites for the installed torch (imports torch)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from suites.model import Inventory


def api_surface() -> dict[str, str]:
    """Every aten overload -> its schema string, for the upgrade diff."""
    import torch

    surface: dict[str, str] = {}
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        surface[name] = str(schema)
    return dict(sorted(surface.items()))


def build_inventory(paths: Iterable[str | Path] | None = None,
                    env: dict[str, str] | None = None) -> Inventory:
    """Load, lint and expand the suites (bundled by default) into an Inventory."""
    import torch

    from suites.expand import expand, load_suites

    expansion = expand(load_suites(paths, env), env=env)
    return Inventory(
        torch_version=torch.__version__.split("+")[0],
        torch_git_version=torch.version.git_version,
        variants=tuple(sorted(expansion.variants, key=lambda v: v.id)),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        api_surface=api_surface(),
        unavailable_suites=dict(sorted(expansion.unavailable.items())),
    )
