"""The verdict first: the selected variants, their reruns and their A/B base decide a run's
verdict; the holdout runs after it, never changes it, and completes the selector's metrics.

Pure split of the stored plan (`phases`), and the two finishes over a real plan of the tiny
suite, with History and every export written (`finishing.finish(holdout_after=True)`,
`finishing.finish_holdout`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from suites.model import Outcome, Status
from tests.workflows.run.test_infra_faults import _request
from tests.workflows.run_context import run_context
from workflows.drivers.distributed import phases
from workflows.run import finishing, pipeline
from workflows.run.run_model import PlannedRun
from workflows.runner.shard_runner import ShardRun
from workflows.stores.history import RunState, SQLiteHistory

POW = "tiny::compare_cpu::pow::float32"  # fails on spyre


def _with_holdout(planned: PlannedRun, holdout: Sequence[str]) -> PlannedRun:
    """`planned` (a full run) with `holdout` drawn as its holdout sample, as the selector
    would have drawn it: in the plan and in the shards, mixed with the selection."""
    plan = replace(
        planned.plan,
        selected=tuple(s for s in planned.plan.selected if s.id not in holdout),
        holdout=tuple(sorted(holdout)),
    )
    return replace(planned, plan=plan, holdout=sorted(holdout))


def test_the_split_puts_the_selection_first_and_every_id_once() -> None:
    shards = [["a", "h1", "b"], ["h2", "c", "h3"], ["h4"]]
    split, verdict = phases.split(shards, ["h1", "h2", "h3", "h4"])
    assert verdict == 2
    assert split[:verdict] == [["a", "b"], ["c"]]
    assert all(set(s) <= {"h1", "h2", "h3", "h4"} for s in split[verdict:])
    ids = [v for s in split for v in s]
    assert sorted(ids) == ["a", "b", "c", "h1", "h2", "h3", "h4"] and len(ids) == len(set(ids))
    assert len(split) - verdict == 2  # as many holdout shards as the verdict's

    for one_phase, holdout in (([["a", "b"]], []), ([["h1"], ["h2"]], ["h1", "h2"])):
        same, count = phases.split(one_phase, holdout)
        assert same is one_phase and count == len(one_phase)  # one phase, as planned


def test_a_stored_plan_keeps_its_phases_and_an_older_one_is_one_phase(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    planned = pipeline.plan(_request(tiny_inventory, tmp_path / "out", "p-1"), run_context(history))
    ids = [v for s in planned.shards for v in s]
    planned = _with_holdout(planned, ids[: len(ids) // 2])
    split, verdict = phases.verdict_first(planned)
    assert 0 < verdict < len(split.shards)
    again, count = phases.loads(phases.dumps(split, verdict))
    assert (again.shards, count) == (split.shards, verdict)
    older = json.dumps(split.to_json())  # stored by a version without phases
    assert phases.loads(older)[1] == len(split.shards)
    for bad in (0, -1, len(split.shards) + 1, True, "2"):
        body = json.loads(phases.dumps(split, verdict))
        body[phases.VERDICT_SHARDS] = bad
        assert phases.loads(json.dumps(body))[1] == len(split.shards)


def _failing_again(name: str, ids: Sequence[str]) -> ShardRun:
    """Reruns: what failed fails again (pow on spyre); nothing else is asked for."""
    assert name == "rerun", f"{name} ran {ids}: only reruns are expected"
    return ShardRun([Outcome(v, Status.FAILED, 0.1, "AssertionError: pow differs") for v in ids])


def test_the_verdict_goes_out_on_the_selection_and_the_holdout_only_measures(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    ctx = run_context(history)
    out = tmp_path / "out"
    planned = pipeline.plan(_request(tiny_inventory, out, "vf-1", baseline=True), ctx)
    ids = sorted(v for s in planned.shards for v in s)
    holdout = [POW, *[v for v in ids if "sin" in v]]
    planned = _with_holdout(planned, holdout)
    selected = [v for v in ids if v not in holdout]
    outcome = {v: Outcome(v, Status.FAILED if v == POW else Status.PASSED, 0.1) for v in ids}

    finished = finishing.finish(
        planned, [outcome[v] for v in selected], ctx, _failing_again, holdout_after=True
    )
    # The verdict: the selection's alone, green, exported and learned as such.
    assert finished.exit_code == 0 and not finished.new_failures
    assert sorted(finished.outcomes) == selected
    callback = json.loads((out / "callback.json").read_text())
    assert callback["workflow"]["test_results"]["total"] == len(selected)
    assert callback["workflow"]["test_results"]["failed"] == 0
    record = json.loads((out / "run.json").read_text())
    assert sorted(r["id"] for r in record["results"]) == selected
    run = history.get_run("vf-1")
    assert run is not None and run.state is RunState.COMPLETED and run.summary.results
    assert run.summary.results.metrics["holdout_after_verdict"] == len(holdout)
    assert not (out / finishing.HOLDOUT_FILE).exists()
    assert set(history.snapshot().variants) == set(selected)

    # The holdout, after it: a selector miss, counted and learned; the verdict stands.
    body = finishing.finish_holdout(planned, [outcome[v] for v in holdout], ctx, _failing_again)
    assert body["misses"] == [POW] and body["learned"] is True
    assert body["metrics"]["holdout"] == len(holdout)
    assert body["metrics"]["false_green"] is True  # the selection was green, the holdout not
    assert body["metrics"]["selected_new_failures"] == 0
    assert json.loads((out / finishing.HOLDOUT_FILE).read_text()) == body
    learned = history.snapshot().variants
    assert set(learned) == set(ids) and learned[POW].baseline is Status.FAILED
    after = history.get_run("vf-1")
    assert after is not None and after.state is RunState.COMPLETED and after.summary.results
    metrics = after.summary.results.metrics
    assert metrics["false_green"] is True and metrics["holdout"] == len(holdout)
    assert after.summary.plan is not None and after.summary.plan.holdout == len(holdout)
    assert after.summary.results.new_failures == 0  # the verdict that went out is kept
    assert json.loads((out / "callback.json").read_text()) == callback


@pytest.mark.parametrize("state", [RunState.HELD, RunState.INFRA_ERROR])
def test_a_holdout_teaches_history_nothing_when_the_verdict_was_not_learned(
    tiny_inventory: Path, tmp_path: Path, state: RunState
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    ctx = run_context(history)
    planned = pipeline.plan(_request(tiny_inventory, tmp_path / "out", "vf-2"), ctx)
    ids = sorted(v for s in planned.shards for v in s)
    planned = _with_holdout(planned, [POW])
    run = history.get_run("vf-2")
    assert run is not None
    history.save_run(replace(run, state=state))
    body = finishing.finish_holdout(
        planned, [Outcome(POW, Status.FAILED, 0.1, "x")], ctx, _failing_again
    )
    assert body["misses"] == [POW] and body["learned"] is False
    assert POW not in history.snapshot().variants and len(ids) > 1


def test_a_verdict_that_is_an_infrastructure_error_runs_no_holdout() -> None:
    from contracts.run_summary import RunResults, RunSummary
    from workflows.drivers.distributed import tasks

    faulted = RunSummary(results=RunResults(infrastructure=("shard-0: no zygote",)))
    assert tasks.holdout_skipped(faulted.to_json())
    assert not tasks.holdout_skipped(RunSummary(results=RunResults(ran=3)).to_json())
