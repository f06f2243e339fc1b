"""Where `workflows/` reads the environment: `settings.py`, and the entry points of the
processes it starts. Everything else is handed its settings (`workflows.run.context`)."""

from __future__ import annotations

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
    "workflows/drivers/distributed/celery_app.py",  # a Celery worker's start
    # Processes of their own, started by the tool with the environment it set for them:
    "workflows/runner/zygote_process.py",  # the warm runner
    "workflows/runner/impact_tracer.py",  # the tracer plugin in a test process
    "workflows/runner/change_overlay/site/sitecustomize.py",  # a test process's start
}

# Still reading the environment themselves: each should be handed what it reads. The list
# only shrinks: a module here that no longer reads it fails the test below until removed.
NOT_YET_HANDED_IN = {
    # SPYRE_CI_TORCH_BUILDS and the environments' cache, looked up wherever a shard runs
    # (`under_test.applied_change`, `build_for`, through `pipeline.execute_shard`, which no
    # caller hands a context yet).
    "workflows/runner/torch_builds.py",
}


def _readers(root: Path) -> set[str]:
    return {
        path.relative_to(root.parent).as_posix()
        for path in root.rglob("*.py")
        if READS.search(path.read_text(encoding="utf-8"))
    }


def test_only_settings_and_entry_points_read_the_environment() -> None:
    readers = _readers(WORKFLOWS)
    assert readers - ENTRY_POINTS - NOT_YET_HANDED_IN == set()
    # A module that was handed its settings leaves the list for good.
    assert NOT_YET_HANDED_IN - readers == set()
    # The run's steps are among the handed-in ones: planning, finishing, their stores.
    handed = (
        "cli/commands/run.py",
        "cli/commands/select.py",
        "runner/shard_runner.py",
        "run/pipeline.py",
        "run/planning.py",
        "run/base_outcomes.py",
        "drivers/intake_bridge.py",
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
