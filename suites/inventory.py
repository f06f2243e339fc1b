"""Build the Inventory of the loaded suites for the installed torch (imports torch)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterable
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


def report_refused(path: str, why: str) -> None:
    """The default report of a refused spec file: on stderr, every error line."""
    print(
        f"spyre-ci: warning: {path}: refused, its suite is not in the Inventory:\n"
        + textwrap.indent(why, "  "),
        file=sys.stderr,
    )


def build_inventory(
    paths: Iterable[str | Path] | None = None,
    env: dict[str, str] | None = None,
    report: Callable[[str, str], None] | None = report_refused,
) -> Inventory:
    """Load, lint and expand the suites (bundled by default) into an Inventory.

    A spec file that does not lint or expand is refused on its own: `report(file, errors)`
    hears of it, the Inventory records it (`refused_specs`) and the other suites go on. Only
    when every spec file is refused is it a SpecError (listing them all).
    """
    import torch

    from suites.expand import Expansion, expand, load_suites_each
    from suites.loader import SpecError

    specs, refused = load_suites_each(paths, env)
    expansion = Expansion()
    accepted = 0
    for spec in specs:
        try:
            one = expand([spec], env=env)
        except SpecError as exc:
            refused[str(spec.path)] = str(exc)
            continue
        accepted += 1
        expansion.planned.extend(one.planned)
        expansion.unavailable.update(one.unavailable)
    if refused and not accepted:
        raise SpecError("no spec file loads:\n" + "\n".join(refused.values()))
    for path, why in refused.items():
        if report is not None:
            report(path, why)
    return Inventory(
        torch_version=torch.__version__.split("+")[0],
        torch_git_version=torch.version.git_version,
        variants=tuple(sorted(expansion.variants, key=lambda v: v.id)),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        api_surface=api_surface(),
        unavailable_suites=dict(sorted(expansion.unavailable.items())),
        refused_specs=dict(sorted(refused.items())),
    )
