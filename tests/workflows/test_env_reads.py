"""Where `workflows/` reads the environment: `settings.py`, and the entry points of the
processes it starts. Everything else is handed its settings (`workflows.run.context`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.testing.paths import REPO_ROOT

WORKFLOWS = REPO_ROOT / "workflows"
READS = re.compile(
    r"os\.environ|os\.getenv|\bgetenv\(|Settings\.from_env"
    r"|from os import [^\n]*\b(?:environ|getenv)\b"  # an alias is a read too
)

ENTRY_POINTS = {
    # Every SPYRE_CI_* variable, read here; and `child_environment(extra)`, the one copy of
    # this process's environment for a process the tool starts (a shard's pytest, the
    # zygote), which the runner asks what such a process will see.
    "workflows/settings.py",
    "workflows/cli/main.py",  # the `spyre-ci` process
    "workflows/cli/options.py",  # its options' defaults from their variables, at parsing
    # The `spyre-ci` process again, before anything is imported: what a warm fork would
    # inherit (its key), and the environment it hands the fork that runs it.
    "workflows/cli/warm_cli.py",
    "workflows/drivers/distributed/celery_app.py",  # a Celery worker's start
    # Processes of their own, started by the tool with the environment it set for them:
    "workflows/runner/zygote_process.py",  # the warm runner
    "workflows/cli/warm_process.py",  # the warm `spyre-ci` process, and each fork's start
    "workflows/runner/impact_tracer.py",  # the tracer plugin in a test process
    "workflows/runner/change_overlay/site/sitecustomize.py",  # a test process's start
}

# The functions of settings.py that may read this process's environment: the settings, and
# the copy a child process inherits. Any other (a `zygote_enabled()` asked where a shard
# runs) would read it for its caller: a module that calls one reads the environment.
SETTINGS_READS = {"Settings.from_env", "child_environment"}


def _environment_readers(source: str) -> set[str]:
    """The functions (`Class.method` for a method) of a module that read `os.environ` or
    `os.getenv` (through any alias of `os` or of those names)."""
    tree = ast.parse(source)
    modules, names = {"os"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            names |= {a.asname or a.name for a in node.names if a.name in ("environ", "getenv")}

    def reads(node: ast.AST) -> bool:
        for inner in ast.walk(node):
            if (
                isinstance(inner, ast.Attribute)
                and inner.attr in ("environ", "getenv")
                and isinstance(inner.value, ast.Name)
                and inner.value.id in modules
            ):
                return True
            if isinstance(inner, ast.Name) and inner.id in names:
                return True
        return False

    found = set()
    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) and reads(top):
            found.add(top.name)
        elif isinstance(top, ast.ClassDef):
            for item in top.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and reads(item):
                    found.add(f"{top.name}.{item.name}")
    return found


def _readers(root: Path) -> set[str]:
    """The modules under `root` that read the environment: directly, or by calling a
    function of `root/settings.py` that reads it for them (one not in SETTINGS_READS)."""
    settings = root / "settings.py"
    helpers = (
        _environment_readers(settings.read_text(encoding="utf-8")) - SETTINGS_READS
        if settings.is_file()
        else set()
    )
    reads = READS
    if helpers:
        called = "|".join(re.escape(h.rpartition(".")[2]) for h in sorted(helpers))
        reads = re.compile(f"{READS.pattern}|\\b(?:{called})\\b")
    return {
        path.relative_to(root.parent).as_posix()
        for path in root.rglob("*.py")
        if reads.search(path.read_text(encoding="utf-8"))
    }


def test_only_settings_and_entry_points_read_the_environment() -> None:
    readers = _readers(WORKFLOWS)
    assert readers - ENTRY_POINTS == set()
    # settings.py reads it in `Settings.from_env` and `child_environment` only: a helper
    # that reads it for a caller below the entry points is not a setting handed in.
    settings = (WORKFLOWS / "settings.py").read_text(encoding="utf-8")
    assert _environment_readers(settings) == SETTINGS_READS
    # The run's steps are among the handed-in ones: planning, finishing, their stores.
    handed = (
        "cli/commands/run.py",
        "cli/commands/select.py",
        "runner/shard_runner.py",
        "run/pipeline.py",
        "run/planning.py",
        "run/base_outcomes.py",
        "drivers/intake_bridge.py",
        # Where a shard runs: its prepared torch environments and its zygote, handed in.
        "runner/torch_builds.py",
        "run/under_test.py",
        "drivers/embedded.py",
        "drivers/distributed/shard.py",
    )
    for module in handed:
        assert f"workflows/{module}" not in readers
    assert "workflows/stores/sources.py" not in readers


def test_the_check_sees_each_way_of_reading_it(tmp_path: Path) -> None:
    root = tmp_path / "workflows"
    root.mkdir()
    lines = [
        "x = os.environ['A']",
        "x = os.getenv('A')",
        "x = getenv('A')",
        "x = Settings.from_env()",
        "from os import environ as env",
        "x = settings.state_dir",
    ]
    for i, line in enumerate(lines):
        (root / f"m{i}.py").write_text(line + "\n", encoding="utf-8")
    assert _readers(root) == {f"workflows/m{i}.py" for i in range(5)}


def test_a_settings_helper_that_reads_the_environment_makes_its_callers_readers(
    tmp_path: Path,
) -> None:
    root = tmp_path / "workflows"
    root.mkdir()
    (root / "settings.py").write_text(
        "import os as _os\n"
        "from os import environ as E\n"
        "class Settings:\n"
        "    @classmethod\n"
        "    def from_env(cls, environ=None):\n"
        "        env = _os.environ if environ is None else environ\n"
        "def child_environment(extra=None):\n"
        "    return {**E, **(extra or {})}\n"
        "def zygote_enabled(environ=None):\n"
        "    env = _os.environ if environ is None else environ\n"
        "    return env.get('SPYRE_CI_ZYGOTE') != '0'\n"
        "def absolute(path):\n"
        "    return path\n",
        encoding="utf-8",
    )
    assert _environment_readers((root / "settings.py").read_text()) == {
        "Settings.from_env",
        "child_environment",
        "zygote_enabled",
    }
    lines = {
        "calls": "from workflows.settings import zygote_enabled\nwarm = zygote_enabled()",
        "child": "from workflows.settings import child_environment\nenv = child_environment()",
        "handed": "warm = settings.zygote\npath = absolute(p)",
    }
    for name, text in lines.items():
        (root / f"{name}.py").write_text(text + "\n", encoding="utf-8")
    assert _readers(root) == {"workflows/settings.py", "workflows/calls.py"}
