"""Regression forensics: a new failure's last good and first bad sha, from History's runs;
shown in forensics.json, the report and `spyre-ci runs show`."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from contracts.event import TriggerEvent
from selector.history import HistoryUpdate, OutcomeRecord
from suites.model import Outcome, Status
from tests.testing.cli import cli
from tests.testing.paths import SOFTMAX_PATCH, TINY_SPEC
from workflows.run import forensics, pipeline
from workflows.stores.history import HistoryStore, RedisHistory, RunRecord, RunState, SQLiteHistory

A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)
VID = "tiny::compare_cpu::softmax.with_dtype::float32"
OTHER = "tiny::compare_cpu::exp::float32"


def _record(
    history: HistoryStore,
    run_id: str,
    at: float,
    kind: str,
    sha: str,
    statuses: dict[str, Status],
    *,
    legacy: bool = False,
    state: RunState = RunState.COMPLETED,
) -> None:
    """One run written as the pipeline writes it: its record, then its outcomes."""
    summary = {"event": f"{kind} {sha[:12]}"}
    if not legacy:  # runs recorded before head_sha was kept have only the event label
        summary.update(kind=kind, head_sha=sha)
    history.save_run(RunRecord(run_id, state, created_at=at, summary=summary))
    outcomes = tuple(OutcomeRecord(v, s, 0.1) for v, s in statuses.items())
    history.apply(run_id, HistoryUpdate(outcomes=outcomes))


def _current(run_id: str, at: float, sha: str, kind: str = "push") -> forensics.RunPoint:
    return forensics.RunPoint(run_id, at, kind, sha)


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> HistoryStore:
    if request.param == "sqlite":
        return SQLiteHistory(tmp_path / "history.sqlite3")
    return RedisHistory(request.getfixturevalue("redis_server"))


def test_passed_at_a_and_b_failed_at_c_last_good_is_b(store: HistoryStore) -> None:
    _record(store, "r1", 1.0, "push", A, {VID: Status.PASSED})
    _record(store, "r2", 2.0, "push", B, {VID: Status.PASSED})
    _record(store, "r3", 3.0, "push", C, {VID: Status.FAILED})
    found = forensics.windows(store, _current("r3", 3.0, C), [VID])
    window = found[VID]
    assert (window.last_good, window.first_bad) == (B, C)
    assert (window.last_good_run, window.first_bad_run) == ("r2", "r3")
    assert window.compare_url == f"https://github.com/pytorch/pytorch/compare/{B}...{C}"


def test_consecutive_failures_move_first_bad_back_and_gaps_widen_the_window(
    store: HistoryStore,
) -> None:
    # A nightly passed; pushes in between did not run the variant (a narrow selection);
    # the next nightly failed, and so does this one: first bad is the earlier nightly.
    _record(store, "n1", 1.0, "nightly", A, {VID: Status.PASSED})
    _record(store, "p1", 2.0, "push", B, {OTHER: Status.PASSED})
    _record(store, "n2", 3.0, "nightly", C, {VID: Status.FAILED})
    _record(store, "pr", 3.5, "pull_request", "e" * 40, {VID: Status.PASSED})  # not main line
    _record(store, "held", 3.7, "push", "f" * 40, {VID: Status.PASSED}, state=RunState.HELD)
    window = forensics.windows(store, _current("n3", 4.0, D, "nightly"), [VID])[VID]
    assert (window.last_good, window.first_bad, window.first_bad_run) == (A, C, "n2")
    assert window.compare_url is not None and window.compare_url.endswith(f"/{A}...{C}")


def test_a_variant_never_seen_passing_has_no_last_good(store: HistoryStore) -> None:
    _record(store, "r1", 1.0, "push", A, {VID: Status.SKIPPED})
    _record(store, "r2", 2.0, "push", B, {VID: Status.ERROR})
    window = forensics.windows(store, _current("r3", 3.0, C), [VID, OTHER])
    assert (window[VID].last_good, window[VID].first_bad) == (None, B)
    assert window[VID].compare_url is None
    assert (window[OTHER].last_good, window[OTHER].first_bad) == (None, C)  # new to History


def test_runs_recorded_before_head_sha_was_kept_are_read_from_their_event_label(
    tmp_path: Path,
) -> None:
    history = SQLiteHistory(tmp_path / "history.sqlite3")
    _record(history, "old", 1.0, "push", A, {VID: Status.PASSED}, legacy=True)
    window = forensics.windows(history, _current("new", 2.0, C), [VID])[VID]
    assert window.last_good == A[:12] and window.first_bad == C
    assert window.compare_url == f"https://github.com/pytorch/pytorch/compare/{A[:12]}...{C}"


def _request(inventory: Path, out: Path, run_id: str, sha: str) -> pipeline.RunRequest:
    event = TriggerEvent(
        kind="push", delivery_id=run_id, repo="pytorch/pytorch", head_sha=sha, source="cli"
    )
    return pipeline.RunRequest(
        run_id=run_id,
        event=event.to_json(),
        out_dir=str(out),
        inventory=str(inventory),
        specs=(str(TINY_SPEC),),
        full=True,
        holdout=0.0,
        expand=False,
    )


PRECISION = (
    "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 1 / 9 (11.1%)\n"
    "Greatest absolute difference: 0.0032 at index (2, 0) (up to 0.001 allowed)"
)


def _finish(
    history: HistoryStore, request: pipeline.RunRequest, failing: str | None
) -> pipeline.FinishedRun:
    """Plan and finish one run whose variants pass, but `failing` misses a tolerance."""
    planned = pipeline.plan(request, history)
    ids = [v for shard in planned.shards for v in shard]
    assert failing is None or failing in ids

    def outcome(vid: str) -> Outcome:
        if vid == failing:
            return Outcome(vid, Status.FAILED, 0.1, PRECISION)
        return Outcome(vid, Status.PASSED, 0.1, "")

    def rerun(name: str, rerun_ids: Sequence[str]) -> pipeline.ShardRun:
        return pipeline.ShardRun([outcome(v) for v in rerun_ids])

    return pipeline.finish(planned, [outcome(v) for v in ids], history, rerun)


def test_a_run_sequence_through_the_pipeline_shows_the_window_everywhere(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    history = SQLiteHistory(state / "history.sqlite3")

    def run(run_id: str, sha: str, failing: str | None) -> pipeline.FinishedRun:
        return _finish(history, _request(tiny_inventory, tmp_path / run_id, run_id, sha), failing)

    run("push-a", A, None)
    run("push-b", B, None)
    finished = run("push-c", C, VID)
    assert finished.new_failures == [VID]

    out = tmp_path / "push-c"
    found = json.loads((out / "forensics.json").read_text())
    entry = found["failures"][VID]
    assert (entry["last_good_sha"], entry["first_bad_sha"]) == (B, C)
    assert entry["last_good_run"] == "push-b"
    assert entry["compare_url"] == f"https://github.com/pytorch/pytorch/compare/{B}...{C}"
    # A full run has no op_match/impact_map reasons: a tolerance miss it cannot tie to the
    # change is the backend's.
    assert (entry["class"], entry["category"], entry["related"]) == ("precision", "backend", False)
    verdict = found["triage_verdict"]
    assert verdict["category"] == "backend" and verdict["confidence"] == "high"
    assert "suspected_upstream" not in verdict
    assert verdict["evidence"][0]["test"] == VID

    line = f"last good {B} / first bad {C}"
    assert line in (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert line in html and f'href="https://github.com/pytorch/pytorch/compare/{B}...{C}"' in html

    record = history.get_run("push-c")
    assert record is not None
    assert record.summary["head_sha"] == C and record.summary["kind"] == "push"
    assert record.summary["forensics"]["triage"] == "backend"
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    shown = cli("runs", "show", "push-c", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "triage: backend (high confidence)" in shown.stdout
    assert f"{VID}: {line}" in shown.stdout and "triage: precision (backend)" in shown.stdout
    # A green run writes no forensics.
    assert not (tmp_path / "push-b" / "forensics.json").exists()


def test_a_real_run_refused_by_a_spyre_rule_is_the_backends(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    # The softmax change selects the softmax family by op_match; its `with_dtype` samples
    # ask for float64, which the Spyre rules refuse: related, but a device rule (ours).
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    out = tmp_path / "out"
    first = cli(
        "run",
        "--diff",
        str(SOFTMAX_PATCH),
        "--inventory",
        str(tiny_inventory),
        "--specs",
        str(TINY_SPEC),
        "--jobs",
        "1",
        "--holdout",
        "0",
        "--no-progress",
        "--out",
        str(out),
        env=env,
    )
    assert first.returncode == 1, first.stdout + first.stderr
    found = json.loads((out / "forensics.json").read_text())
    assert found["failures"], found
    for entry in found["failures"].values():
        assert (entry["class"], entry["category"], entry["related"]) == (
            "device-rule",
            "backend",
            True,
        )
        assert entry["last_good_sha"] is None and entry["compare_url"] is None  # first run
    assert found["triage_verdict"]["category"] == "backend"
    assert "spyre does not support dtype" in found["triage_verdict"]["evidence"][0]["excerpt"]
    assert "triage: device-rule (backend)" in (out / "report.md").read_text()


def test_a_related_precision_miss_goes_on_the_wire_and_a_re_export_keeps_it(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    # Passed at A and B (full runs); the softmax change at C selects VID by op_match and
    # misses a tolerance there: the change's numerics, so upstream, first bad C.
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")

    def run(run_id: str, sha: str, failing: str | None, diff: str | None) -> pipeline.FinishedRun:
        request = _request(tiny_inventory, tmp_path / run_id, run_id, sha)
        return _finish(
            history, dataclasses.replace(request, diff_text=diff, full=diff is None), failing
        )

    run("push-a", A, None, None)
    run("push-b", B, None, None)
    assert run("push-c", C, VID, SOFTMAX_PATCH.read_text()).new_failures == [VID]

    out = tmp_path / "push-c"
    workflow = json.loads((out / "callback.json").read_text())["workflow"]
    verdict = workflow["triage_verdict"]
    assert (verdict["category"], verdict["confidence"]) == ("upstream", "high")
    assert verdict["suspected_upstream"]["commit"] == C
    entry = {e["id"]: e for e in workflow["failed_tests"]}[VID]
    assert (entry["last_good_sha"], entry["first_bad_sha"]) == (B, C)
    row = json.loads((out / "hud" / "crcr_workflow_job.json").read_text())
    assert VID in {e["name"] for e in json.loads(row["failed_tests_json"])}
    assert json.loads(row["triage_verdict_json"])["suspected_upstream"]["commit"] == C
    found = json.loads((out / "forensics.json").read_text())
    assert found["triage_verdict"] == {k: v for k, v in verdict.items() if k != "analyzed_at"}
    assert found["failures"][VID]["category"] == "upstream"
    record = json.loads((out / "run.json").read_text())
    assert record["forensics"][VID]["first_bad_sha"] == C

    # `spyre-ci export out/` from run.json writes the same report, forensics lines included.
    line = f"last good {B} / first bad {C}"
    before = {n: (out / n).read_bytes() for n in ("report.md", "report.html", "forensics.json")}
    assert line in before["report.md"].decode() and line in before["report.html"].decode()
    for name in before:
        (out / name).unlink()
    exported = cli("export", str(out))
    assert exported.returncode == 0, exported.stderr
    assert {n: (out / n).read_bytes() for n in before} == before
