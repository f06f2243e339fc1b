"""A run that stops part-way is explained by `runs show` and finished by `runs resume`,
without running again the tests that already reported."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from contracts.event import TriggerEvent
from tests.testing.cli import cli
from tests.testing.paths import TINY_SPEC
from tests.workflows.run_context import run_context
from workflows.run import pipeline, run_model
from workflows.stores.history import SQLiteHistory


@pytest.mark.slow  # fast twin: the interrupted-run test (SIGINT) resumes a stopped run
def test_stopped_run_is_explained_and_resumed(tiny_inventory: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    history = SQLiteHistory(state / "history.sqlite3")
    event = TriggerEvent(
        kind="nightly",
        delivery_id="a" * 40,
        repo="pytorch/pytorch",
        head_sha="a" * 40,
        files_complete=False,
        source="cli",
    )
    request = run_model.RunRequest(
        run_id="resume-me",
        event=event,
        out_dir=str(tmp_path / "out"),
        inventory=str(tiny_inventory),
        specs=(str(TINY_SPEC),),
        full=True,
        holdout=0.0,
        shards=2,
        expand=False,
    )
    ctx = run_context(history)
    planned = pipeline.plan(request, ctx)
    assert len(planned.shards) == 2
    # The run stops after its first shard: the second never ran, nothing was verified.
    pipeline.execute_shard(request, "shard-0", planned.shards[0], settings=ctx.settings)

    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    shown = cli("runs", "show", "resume-me", env=env)
    assert shown.returncode == 0
    assert "planned" in shown.stdout and "spyre-ci runs resume resume-me" in shown.stdout

    resumed = cli("runs", "resume", "resume-me", "--jobs", "2", env=env)
    # A nightly naming a commit the installed torch is not: its tests ran on the installed
    # torch, so the change was not tested (exit 4), and its failures are that torch's own.
    assert resumed.returncode == 4, resumed.stdout + resumed.stderr
    assert "change NOT TESTED" in resumed.stdout and "NEW FAILURES" not in resumed.stdout
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert len(record["results"]) == 16
    starts: Counter[str] = Counter()
    for path in (tmp_path / "out" / "work" / "resume-me").glob("shard-*/*.jsonl"):
        for line in path.read_text().splitlines():
            event_line = json.loads(line)
            if event_line["event"] == "start":
                starts[event_line["id"]] += 1
    assert set(starts) == {r["id"] for r in record["results"]}
    assert max(starts.values()) == 1  # shard-0's tests were not run again
    run = history.get_run("resume-me")
    assert run is not None and run.state == "completed"

    again = cli("runs", "resume", "resume-me", env=env)
    assert again.returncode == 2 and "already completed" in again.stderr
