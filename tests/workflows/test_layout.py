"""The layout of `workflows/`: its layers in order, only entry modules at its root, no import
cycles. (That no product module imports benchmark code is tests/test_boundaries.py's.)"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.testing.paths import REPO_ROOT

WORKFLOWS = REPO_ROOT / "workflows"
# The layers, top first: a module may import its own layer and the ones below it, never one
# above (docs/workflows.md, "Layout"). `settings` and `errors` sit under them all.
LAYERS = ("cli", "drivers", "run", "tracing", "runner", "stores")
ROOT_MODULES = {"__init__.py", "__main__.py", "errors.py", "settings.py"}


def _module(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, source: str | None = None) -> set[str]:
    """Every module `path` imports, at any depth (lazy imports count), relative imports
    resolved against its package; not those only a type checker reads (`if TYPE_CHECKING:`)."""
    found: set[str] = set()
    text = path.read_text(encoding="utf-8") if source is None else source
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    tree = ast.parse(text)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if not module:
                continue
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


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


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        return None
    return LAYERS.index(parts[1])


def _upward(graph: dict[str, set[str]]) -> set[str]:
    """The imports of `graph` that reach a layer above the importer's own."""
    return {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if (own := _layer(module)) is not None
        for target in targets
        if (their := _layer(target)) is not None and their < own
    }


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert _upward(_workflows_graph()) == set()


def test_the_layer_rule_sees_an_upward_import() -> None:
    # The check itself: the runner importing a run step, and the CLI (layer 0) imported.
    graph = {
        "workflows.runner.zygote": {"workflows.run.pipeline", "workflows.stores.history"},
        "workflows.stores.history": {"workflows.cli.main"},
        "workflows.cli.main": {"workflows.runner.zygote"},
    }
    assert _upward(graph) == {
        "workflows.runner.zygote -> workflows.run.pipeline",
        "workflows.stores.history -> workflows.cli.main",
    }


def test_relative_imports_are_read_too() -> None:
    path = WORKFLOWS / "runner" / "zygote.py"
    found = _imports(path, "from . import warm_share\nfrom ..run import pipeline\n")
    assert {"workflows.runner.warm_share", "workflows.run.pipeline"} <= found
    init = WORKFLOWS / "runner" / "__init__.py"
    assert "workflows.runner.zygote" in _imports(init, "from .zygote import Zygote\n")


def test_no_command_imports_another_command() -> None:
    # What two commands share lives below them (`workflows/cli/change_input.py`, `options.py`,
    # `summary.py`), so that a command can change without another.
    commands = "workflows.cli.commands."
    crossing = {
        f"{module} -> {target}"
        for module, targets in _workflows_graph().items()
        if module.startswith(commands)
        for target in targets
        if target.startswith(commands) and target != module
    }
    assert crossing == set()


def test_only_entry_modules_sit_at_the_root_of_workflows() -> None:
    loose = {p.name for p in WORKFLOWS.glob("*.py")} - ROOT_MODULES
    folders = {p.name for p in WORKFLOWS.iterdir() if (p / "__init__.py").is_file()}
    assert loose == set()
    assert folders == set(LAYERS)
