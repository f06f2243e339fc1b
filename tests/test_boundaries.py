"""DESIGN.md's package table, checked: what each top-level package may import.

Static rules parse every module with `ast` and count every import, module level or inside a
function (a lazy import still runs); imports under `if TYPE_CHECKING:` never run and do not
count. The runtime probes at the end import the control plane for real and look for torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.testing.paths import REPO_ROOT

# -- the rules: adjust these when DESIGN.md's table changes ----------------------------------

# Start fast, never pay for torch: nothing these import, directly or through another module
# of the repository, may import NEVER_IN_CONTROL_PLANE.
CONTROL_PLANE = ("contracts", "relay", "selector", "dashboard_export")
NEVER_IN_CONTROL_PLANE = ("torch", "numpy", "backend_under_test", "workflows")
# package -> top-level packages of this repository it must not import (beyond the above).
NOT_IMPORTED_BY = {
    "selector": ("relay", "dashboard_export"),
}
# contracts is plain data: the standard library and itself, nothing else.
STDLIB_ONLY = ("contracts",)
# Benchmark code (`benchmarks/`, the selection benchmark's engine included): no product module
# imports it. Its test processes load its overlay by a module name they are given
# (`SPYRE_CI_OVERLAY_MODULE`, read by workflows/runner/change_overlay/site/sitecustomize.py).
# A module name covers its submodules.
BENCHMARK_CODE = ("benchmarks",)
# Top-level folders that are not product packages.
NOT_PRODUCT = ("tests", "benchmarks", "docs", "examples")

# -- the import graph ----------------------------------------------------------------------


def _packages() -> tuple[str, ...]:
    return tuple(
        sorted(
            p.name
            for p in REPO_ROOT.iterdir()
            if (p / "__init__.py").is_file() and p.name not in NOT_PRODUCT
        )
    )


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    """Every product module: dotted name -> file."""
    return {
        _module_name(path): path
        for package in _packages()
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
    }


def _is_type_checking(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _import_nodes_of(child))
            continue
        yield from _import_nodes_of(node)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _import_nodes(node)


@cache
def _imports(module: str) -> frozenset[str]:
    """Every module name `module` imports, absolute, as written (`from a import b`: a, a.b)."""
    path = _modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_in(path.read_text(encoding="utf-8"), package)


def _imports_in(source: str, package: str) -> frozenset[str]:
    found: set[str] = set()
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        found.add(base)
        found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return frozenset(found)


def _top(name: str) -> str:
    return name.partition(".")[0]


def _covers(prefixes: tuple[str, ...], name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@cache
def _runs(module: str) -> frozenset[str]:
    """The product modules importing `module` runs: each import, with its parent packages."""
    modules = _modules()
    ran: set[str] = set()
    for name in _imports(module):
        parts = name.split(".")
        ran.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(m for m in ran if m in modules and m != module)


def _chain(start: str, bad: tuple[str, ...]) -> list[str] | None:
    """The shortest import chain from `start` to a module that imports one of `bad`."""
    seen = {start}
    queue = [[start]]
    while queue:
        path = queue.pop(0)
        hit = sorted(n for n in _imports(path[-1]) if _covers(bad, n))
        if hit:
            return [*path, hit[0]]
        for nxt in sorted(_runs(path[-1])):
            if nxt not in seen:
                seen.add(nxt)
                queue.append([*path, nxt])
    return None


def _package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> {imported package: the modules that import it}."""
    packages = set(_packages())
    graph: dict[str, dict[str, list[str]]] = {p: {} for p in packages}
    for module in _modules():
        for name in _imports(module):
            top = _top(name)
            if top in packages and top != _top(module):
                graph[_top(module)].setdefault(top, []).append(module)
    return graph


# -- the rules, checked --------------------------------------------------------------------


def test_the_walk_counts_lazy_and_relative_imports_but_not_type_checking_ones() -> None:
    source = (
        "import os.path\n"
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..other import thing\n"
        "if TYPE_CHECKING:\n"
        "    import torch\n"
        "else:\n"
        "    import numpy\n"
        "def f():\n"
        "    from workflows.cli.main import main\n"
        "class C:\n"
        "    def m(self):\n"
        "        import redis\n"
    )
    found = _imports_in(source, "pkg.sub")
    assert {
        "os.path",
        "pkg.sub.sibling",
        "pkg.other.thing",
        "numpy",
        "workflows.cli.main",
        "redis",
    } <= found
    assert not any(_top(n) == "torch" for n in found)


def test_the_rules_name_real_packages() -> None:
    packages = set(_packages())
    named = {
        *CONTROL_PLANE,
        *NOT_IMPORTED_BY,
        *STDLIB_ONLY,
        *(p for ps in NOT_IMPORTED_BY.values() for p in ps),
    }
    assert named <= packages, f"not packages of this repository: {sorted(named - packages)}"
    assert len(_modules()) > 100  # the walk found the code


def test_control_plane_never_reaches_torch_statically() -> None:
    chains = {
        module: chain
        for module in _modules()
        if _top(module) in CONTROL_PLANE
        and (chain := _chain(module, NEVER_IN_CONTROL_PLANE)) is not None
    }
    assert chains == {}, (
        "control-plane modules that import (or reach) "
        + ", ".join(NEVER_IN_CONTROL_PLANE)
        + ":\n"
        + "\n".join(" -> ".join(chain) for chain in chains.values())
    )


def test_packages_import_only_what_the_table_allows() -> None:
    graph = _package_graph()
    offenders = {
        f"{package} -> {target}": sorted(set(graph[package].get(target, ())))
        for package, targets in NOT_IMPORTED_BY.items()
        for target in targets
        if graph[package].get(target)
    }
    assert offenders == {}


def test_contracts_import_only_the_standard_library() -> None:
    offenders = {
        module: sorted(
            n
            for n in _imports(module)
            if _top(n) not in sys.stdlib_module_names
            and _top(n) not in STDLIB_ONLY
            and _top(n) != "__future__"
        )
        for module in _modules()
        if _top(module) in STDLIB_ONLY
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_no_cycle_between_packages() -> None:
    graph = _package_graph()
    cycles: list[str] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(package: str) -> None:
        state[package] = 1
        stack.append(package)
        for nxt in sorted(graph[package]):
            if state.get(nxt) == 1:
                loop = [*stack[stack.index(nxt) :], nxt]
                cycles.append(
                    " -> ".join(
                        f"{a} ({graph[a][b][0]})" for a, b in zip(loop, loop[1:], strict=False)
                    )
                    + f" -> {nxt}"
                )
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[package] = 2

    for package in sorted(graph):
        if package not in state:
            visit(package)
    assert cycles == []


def test_no_product_module_imports_benchmark_code() -> None:
    offenders = {
        module: sorted(n for n in _imports(module) if _covers(BENCHMARK_CODE, n))
        for module in _modules()
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_mypy_strict_covers_every_module_that_never_reaches_torch() -> None:
    """pyproject's [tool.mypy] files (what .ci/run type-checks) keep up with the code: every
    control-plane module, and every suites module that reaches no torch, numpy or workflows
    (model, loader, lint, ...), is in it; a new torch-free module of suites joins the list."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    files = config["tool"]["mypy"]["files"]
    checked = {
        module
        for module, path in _modules().items()
        if any(path == REPO_ROOT / f or path.is_relative_to(REPO_ROOT / f) for f in files)
    }
    torch_free = {
        module
        for module in _modules()
        if _top(module) in ("suites", *CONTROL_PLANE)
        and _chain(module, NEVER_IN_CONTROL_PLANE) is None
    }
    assert sorted(torch_free - checked) == []


# -- runtime probes ------------------------------------------------------------------------

_PROBE = """
import importlib, pkgutil, sys
for top in {packages!r}:
    package = importlib.import_module(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        importlib.import_module(info.name)
heavy = sorted(m for m in ("torch", "numpy") if m in sys.modules)
print(",".join(heavy))
"""


def test_control_plane_never_imports_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(packages=CONTROL_PLANE)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"control plane imported: {result.stdout.strip()}"


def test_cli_help_does_not_import_torch() -> None:
    probe = (
        "import sys\nfrom workflows.cli.main import build_parser\nbuild_parser()\n"
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
