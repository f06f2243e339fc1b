"""Guarantees on the default path: the bundled Inventory, the shipped trace, the warm runner
on, the README's softmax push with its real shard sizes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selector.history import History
from tests.testing.cli import state_env
from tests.testing.paths import REPO_ROOT
from workflows.stores.history import RunState, SQLiteHistory

EVENT = REPO_ROOT / "examples" / "events" / "push_softmax_kernel.json"


def spyre_ci(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workflows", *args],
        cwd=REPO_ROOT,
        env=state_env(state),
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.long
def test_a_memory_limit_below_the_zygote_ends_the_run_as_infrastructure_and_teaches_nothing(
    seeded_state: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    shutil.copytree(seeded_state, state)
    fresh = tmp_path / "fresh"
    shutil.copytree(seeded_state, fresh)
    out = tmp_path / "out"
    # 300 MB: below what the warm zygote maps (torch loaded), above what a bare interpreter
    # needs. Forked warm, its tests would fail wherever an allocation lands.
    run = spyre_ci(state, "run", "--event", str(EVENT), "--memory-mb", "300", "--jobs", "2",
                   "--no-progress", "--out", str(out))  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    assert "NEW FAILURES" not in run.stdout
    record = json.loads((out / "run.json").read_text())
    assert [r for r in record["results"] if r["status"] != "passed"] == []
    callback = json.loads((out / "callback.json").read_text())["workflow"]
    assert callback["failed_tests"] == []
    history = SQLiteHistory(state / "history.sqlite3")
    assert history.snapshot() == History()
    assert history.get_run(record["run_id"]).state == RunState.INFRA_ERROR  # type: ignore[union-attr]
    # The next selection is the one a fresh History makes.
    plans = []
    for where in (state, fresh):
        plan = tmp_path / f"plan-{where.name}.json"
        chosen = spyre_ci(where, "select", "--event", str(EVENT), "--plan-out", str(plan))
        assert chosen.returncode == 0, chosen.stderr
        plans.append(sorted(s["id"] for s in json.loads(plan.read_text())["selected"]))
    assert plans[0] == plans[1]
