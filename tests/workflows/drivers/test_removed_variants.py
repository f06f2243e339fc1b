"""Variants that appear and disappear upstream: an id the specs no longer have is reported
removed (never a failure, never an infrastructure fault) and the rest of its shard runs;
an id new to History is counted as new. Real pytest subprocesses on the spyre device."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dashboard_export.layout import read_json_lines
from suites.model import Inventory, Outcome, Status
from tests.testing.paths import TINY_SPEC
from tests.workflows.run.test_infra_faults import _request
from tests.workflows.run_context import run_context
from workflows.drivers import embedded
from workflows.run import finishing, pipeline
from workflows.runner.shard_runner import Limits, ShardRun, run_shard
from workflows.stores.history import RunState, SQLiteHistory

ADD = "tiny::compare_cpu::add::float32"
MUL = "tiny::compare_cpu::mul::float32"
SIN = "tiny::compare_cpu::sin::float32"
GONE = "tiny::compare_cpu::add::float64"  # the tiny spec lists float32 and float16 only


def test_a_shard_runs_its_other_ids_and_reports_the_missing_one_removed(tmp_path: Path) -> None:
    seen: list[Outcome] = []
    result = run_shard(
        "s0",
        [ADD, GONE, MUL],
        tmp_path / "work",
        limits=Limits(memory_mb=None),
        specs=[str(TINY_SPEC)],
        progress=seen.append,
    )
    assert result.fault is None  # not an infrastructure error
    assert result.subprocesses == 1  # and no second process spent on it
    status = {o.id: o.status for o in result.outcomes}
    assert status == {GONE: Status.REMOVED, ADD: Status.PASSED, MUL: Status.PASSED}
    assert [o.id for o in seen] == [GONE, ADD, MUL]  # reported before the first test
    assert not Status.REMOVED.is_failure


def test_a_shard_whose_ids_are_all_removed_is_not_a_fault(tmp_path: Path) -> None:
    result = run_shard(
        "s0", [GONE], tmp_path / "work", limits=Limits(memory_mb=None), specs=[str(TINY_SPEC)]
    )
    assert result.fault is None and result.subprocesses == 1
    assert [(o.id, o.status) for o in result.outcomes] == [(GONE, Status.REMOVED)]


def _stale(tiny_inventory: Path, path: Path, ids: Sequence[str], gone: bool) -> Path:
    """The tiny Inventory cut to `ids`, plus (with `gone`) a variant the specs no longer have:
    what an Inventory built before upstream dropped a dtype looks like."""
    inventory = Inventory.load(tiny_inventory)
    by_id = inventory.by_id()
    variants = [by_id[v] for v in ids]
    if gone:
        variants.append(replace(by_id[ADD], id=GONE, dtype="float64"))
    replace(inventory, variants=tuple(variants)).save(path)
    return path


def test_a_run_reports_removed_ids_and_learns_nothing_from_them(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    inventory = _stale(tiny_inventory, tmp_path / "stale.json", [ADD, MUL], gone=True)
    out = tmp_path / "out"
    request = replace(
        _request(tiny_inventory, out, "removed-1"), inventory=str(inventory), baseline=True
    )
    finished = embedded.run(request, run_context(history), jobs=1, show_progress=False)

    assert finished.exit_code == 0  # not 3 (a fault), not 1 (a failure)
    assert not finished.faults and not finished.new_failures
    assert set(finished.outcomes) == {ADD, MUL}  # the removed id is no result of the run
    s = finished.summary.results
    assert s is not None and s.removed == 1 and s.removed_ids == (GONE,)
    assert s.failed == 0 and s.counts == {"passed": 2, "removed": 1} and s.ran == 2
    run = history.get_run("removed-1")
    assert run is not None and run.state == RunState.COMPLETED and run.summary.results == s
    learned = history.snapshot()
    assert GONE not in learned.variants and {ADD, MUL} <= set(learned.variants)

    record = json.loads((out / "run.json").read_text())
    assert {r["id"] for r in record["results"]} == {ADD, MUL}
    assert "removed: no longer in the specs" in (out / "report.md").read_text()
    assert GONE in (out / "report.html").read_text()
    workflow = json.loads((out / "callback.json").read_text())["workflow"]
    assert workflow["test_results"] == {"passed": 2, "failed": 0, "skipped": 0, "total": 2}
    rows = [
        row
        for path in (out / "hud" / "test_run").rglob("*")
        if path.is_file()
        for row in read_json_lines(path)
    ]
    assert GONE not in {row["name"] for row in rows} and len(rows) == 2

    # The next run's Inventory has a variant History never saw: the summary counts it new.
    newer = _stale(tiny_inventory, tmp_path / "newer.json", [ADD, MUL, SIN], gone=False)
    request = replace(
        _request(tiny_inventory, tmp_path / "out2", "removed-2"), inventory=str(newer)
    )
    planned = pipeline.plan(request, run_context(history))
    ids = [v for shard in planned.shards for v in shard]
    assert sorted(ids) == sorted([ADD, MUL, SIN])

    def no_reruns(name: str, rerun_ids: Sequence[str]) -> ShardRun:
        raise AssertionError(f"nothing failed, yet {name} ran {rerun_ids}")

    passed = [Outcome(v, Status.PASSED, 0.1) for v in ids]
    again = finishing.finish(planned, passed, run_context(history), no_reruns)
    assert again.exit_code == 0
    assert again.summary.results is not None
    assert again.summary.results.new_variants == 1 and again.summary.results.removed == 0
