"""Build the Inventory of the loaded suites for the installed torch (imports torch)."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from suites.model import META_KEY, Inventory

# Where a torch keeps its native_functions.yaml, from the folder that holds `torch/`: a wheel
# ships it inside torchgen, a source checkout has it in aten/.
NATIVE_FUNCTIONS = (
    "torchgen/packaged/ATen/native/native_functions.yaml",
    "aten/src/ATen/native/native_functions.yaml",
)
# The kernel torchgen registers for an entry without `dispatch:` or `structured_delegate:`.
DEFAULT_KEY = "CompositeImplicitAutograd"
# Python namespaces whose ops the OpInfo database spells `<namespace>.<name>`.
_PYTHON_MODULES = ("special", "linalg", "fft", "sparse", "nested")
_OUT_ARGUMENT = re.compile(r"\*.*\(\w+!\)")


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


def native_functions_yaml(torch_file: str) -> Path | None:
    """The native_functions.yaml of the torch whose `torch/__init__.py` is `torch_file`."""
    root = Path(torch_file).resolve().parent.parent
    return next((root / rel for rel in NATIVE_FUNCTIONS if (root / rel).is_file()), None)


def kernel_table(text: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The kernel map of a native_functions.yaml: every C++ function its entries name ->
    (the dispatch keys it serves, the ops it implements). Ops are base names (overload and
    in-place `_` dropped), plus the Python spelling of a namespaced op (`special_ndtri` also
    as `special.ndtri`, `gelu` of `python_module: nn` also as `nn.functional.gelu`). Each
    entry adds its ops to the kernels its `dispatch:` names, to the kernels of the `_out`
    entry its `structured_delegate:` names (the body of `TORCH_IMPL_FUNC(x_out)`), to the
    default `CompositeImplicitAutograd` kernel when it has neither, and, for a structured
    entry, to its meta function (`TORCH_META_FUNC(x)`)."""
    import yaml

    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(text, Loader=loader) or []
    by_func: dict[str, list[str]] = {}  # "sqrt.out" -> the kernels its dispatch names
    keys: dict[str, dict[str, None]] = {}
    ops: dict[str, dict[str, None]] = {}

    def add(kernel: str, key: str, names: Iterable[str]) -> None:
        keys.setdefault(kernel, {})[key] = None
        ops.setdefault(kernel, {}).update(dict.fromkeys(names))

    delegated: list[tuple[str, list[str]]] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("func"), str):
            continue
        func = entry["func"]
        full, _, arguments = func.partition("(")
        full = full.strip()
        names = _op_names(full, entry.get("python_module"))
        dispatch = entry.get("dispatch")
        delegate = entry.get("structured_delegate")
        kernels: list[str] = []
        if isinstance(dispatch, Mapping):
            for key, kernel in dispatch.items():
                if isinstance(kernel, str) and kernel:
                    add(kernel, str(key), names)
                    kernels.append(kernel)
        if isinstance(delegate, str):
            delegated.append((delegate, names))
        elif not kernels:
            base = full.split(".", 1)[0]
            out = "_out" if _OUT_ARGUMENT.search(arguments.rsplit("->", 1)[0]) else ""
            add(base + out, DEFAULT_KEY, names)
        by_func[full] = kernels
        if entry.get("structured") is True:
            add(names[0], META_KEY, names)
    for delegate, names in delegated:
        for kernel in by_func.get(delegate, ()):
            ops[kernel].update(dict.fromkeys(names))
    return {k: (", ".join(keys[k]), tuple(ops[k])) for k in sorted(ops)}


def _op_names(full: str, module: object) -> list[str]:
    """`sqrt_.out` -> [sqrt]; `special_ndtri` (python_module special) -> [special_ndtri,
    special.ndtri]; `gelu` (python_module nn) -> [gelu, nn.functional.gelu]."""
    base = full.split(".", 1)[0]
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    names = [base]
    if module == "nn":
        names.append(f"nn.functional.{base}")
    elif isinstance(module, str) and module in _PYTHON_MODULES and base.startswith(module + "_"):
        names.append(f"{module}.{base[len(module) + 1 :]}")
    return names


def installed_kernels(torch_file: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The kernel map of the torch at `torch_file`; empty (said on stderr when the file is
    there but unreadable) when it has no native_functions.yaml to read: the Scout then names
    C++ changes by their names alone, and says so."""
    import yaml

    path = native_functions_yaml(torch_file)
    if path is None:
        return {}
    try:
        return kernel_table(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        print(f"spyre-ci: warning: {path}: no kernel map from it: {exc}", file=sys.stderr)
        return {}


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
        kernels=installed_kernels(torch.__file__),
    )
