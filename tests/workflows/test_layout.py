"""The layout of `workflows/`: benchmark code apart from the product, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

WORKFLOWS = REPO_ROOT / "workflows"
BENCH = WORKFLOWS / "bench"
# The one product module allowed to reach the benchmark engines (lazily, inside the command).
BENCH_ENTRY = WORKFLOWS / "commands" / "bench.py"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _product_files() -> list[Path]:
    return [
        p
        for p in sorted(WORKFLOWS.rglob("*.py"))
        if not p.is_relative_to(BENCH) and p != BENCH_ENTRY
    ]


def test_no_product_module_imports_benchmark_code() -> None:
    offenders = {
        _module(path): sorted(m for m in _imports(path) if m.startswith("workflows.bench"))
        for path in _product_files()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def _workflows_graph() -> dict[str, set[str]]:
    """Module -> the workflows modules it imports (module level or lazily)."""
    files = {_module(p): p for p in sorted(WORKFLOWS.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for imported in _imports(path):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and imported != "workflows":
                targets.add(imported)
        graph[name] = targets
    return graph


def test_no_import_cycle_between_workflows_modules() -> None:
    graph = _workflows_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []
