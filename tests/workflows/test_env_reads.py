"""Where `workflows/` reads the environment: `settings.py`, and the entry points of the
processes it starts. Everything else is handed its settings (`workflows.run.context`)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.testing.paths import REPO_ROOT

WORKFLOWS = REPO_ROOT / "workflows"
READS = re.compile(r"os\.environ|os\.getenv|\bgetenv\(|Settings\.from_env")

ENTRY_POINTS = {
    "workflows/settings.py",  # every SPYRE_CI_* variable, read here
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
    "workflows/run/under_test.py",
    "workflows/runner/change_overlay/finder.py",
    "workflows/runner/change_overlay/prepare.py",
    "workflows/runner/shard_runner.py",
    "workflows/runner/torch_builds.py",
    "workflows/runner/zygote.py",
    "workflows/stores/inventory_cache.py",
    "workflows/tracing/trace_store.py",
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
        "x = settings.state_dir",
    ]
    for i, line in enumerate(lines):
        (root / f"m{i}.py").write_text(line + "\n", encoding="utf-8")
    assert _readers(root) == {f"workflows/m{i}.py" for i in range(4)}
