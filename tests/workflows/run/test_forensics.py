"""Regression forensics: a new failure's last good and first bad sha, from History's runs;
shown in forensics.json, the report and `spyre-ci runs show`."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.backend import BackendId
from contracts.event import TriggerEvent
from contracts.run_summary import RunSummary
from selector.history import HistoryUpdate, OutcomeRecord
from suites.model import Outcome, Status
from tests.testing.cli import cli
from tests.testing.paths import SOFTMAX_PATCH, TINY_SPEC
from tests.workflows.run_context import run_context
from workflows.run import backend_identity, exporting, finishing, forensics, pipeline, run_model
from workflows.run.backend_identity import backend
from workflows.run.layout import BASE_SHARD
from workflows.run.on_build import torch_git_sha
from workflows.runner.shard_runner import ShardRun
from workflows.stores.history import HistoryStore, RedisHistory, RunRecord, RunState, SQLiteHistory
from workflows.stores.sources import installed_torch

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
    backend: Mapping[str, str] | None = None,
    torch_sha: str = "",
) -> None:
    """One run written as the pipeline writes it: its record, then its outcomes."""
    summary: dict[str, object] = {"event": f"{kind} {sha[:12]}"}
    if not legacy:  # runs recorded before head_sha was kept have only the event label
        summary.update(kind=kind, head_sha=sha)
    if backend is not None:
        summary.update(backend=backend, torch_sha=torch_sha)
    row = RunSummary.from_json(summary)  # as History reads a stored row
    history.save_run(RunRecord(run_id, state, created_at=at, summary=row))
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


SPYRE = BackendId("backend_under_test", "0.4.0", "spyre")


def test_the_window_names_the_backend_and_torch_it_passed_with(store: HistoryStore) -> None:
    _record(store, "r1", 1.0, "push", A, {VID: Status.PASSED}, backend=SPYRE, torch_sha=A)
    _record(store, "r2", 2.0, "push", B, {VID: Status.FAILED}, backend=SPYRE, torch_sha=B)
    window = forensics.windows(store, _current("r3", 3.0, C), [VID])[VID]
    assert (window.last_good, window.first_bad) == (A, B)
    assert window.last_good_backend == SPYRE and window.last_good_torch == A


@pytest.mark.parametrize(
    ("backend", "torch_then", "under_test", "passed"),
    [
        (SPYRE, A, B, A),  # same backend, another torch: only upstream moved
        (replace(SPYRE, version="0.5.0"), A, B, None),  # the backend moved too
        (replace(SPYRE, device="spyre:1"), A, B, None),
        (SPYRE, A, A[:12], None),  # the same torch: nothing upstream moved
        (SPYRE, "", B, None),  # a run that did not record its torch
        (SPYRE, A, "", None),  # the torch under test is unknown
        (None, A, B, None),  # a run that did not record its backend
        (replace(SPYRE, digest="0123abcd"), A, B, None),  # its files named, ours not
    ],
)
def test_passed_before_needs_the_same_backend_on_another_torch(
    backend: BackendId | None, torch_then: str, under_test: str, passed: str | None
) -> None:
    window = forensics.Window(VID, A, C, "r1", "r3", None, backend, torch_then)
    assert exporting.passed_before(window, SPYRE, under_test) == passed
    never = dataclasses.replace(window, last_good=None, last_good_run=None)
    assert exporting.passed_before(never, SPYRE, under_test) is None


def test_a_backend_edited_without_a_new_version_is_another_backend() -> None:
    window = forensics.Window(VID, A, C, "r1", "r3", None, replace(SPYRE, digest="d1"), A)
    assert exporting.passed_before(window, replace(SPYRE, digest="d1"), B) == A
    assert exporting.passed_before(window, replace(SPYRE, digest="d2"), B) is None


def test_runs_recorded_before_head_sha_was_kept_are_read_from_their_event_label(
    tmp_path: Path,
) -> None:
    history = SQLiteHistory(tmp_path / "history.sqlite3")
    _record(history, "old", 1.0, "push", A, {VID: Status.PASSED}, legacy=True)
    window = forensics.windows(history, _current("new", 2.0, C), [VID])[VID]
    assert window.last_good == A[:12] and window.first_bad == C
    assert window.compare_url == f"https://github.com/pytorch/pytorch/compare/{A[:12]}...{C}"


def _request(inventory: Path, out: Path, run_id: str, sha: str) -> run_model.RunRequest:
    event = TriggerEvent(
        kind="push", delivery_id=run_id, repo="pytorch/pytorch", head_sha=sha, source="cli"
    )
    return run_model.RunRequest(
        run_id=run_id,
        event=event,
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
    history: HistoryStore,
    request: run_model.RunRequest,
    failing: str | None,
    *,
    fails_on_base: bool = False,
    on_its_sha: bool = False,
) -> run_model.FinishedRun:
    """Plan and finish one run whose variants pass, but `failing` misses a tolerance (on the
    base torch too when `fails_on_base`). `on_its_sha`: the run stands for one on a torch
    that holds its event's sha (tested: a push without a diff is otherwise not tested, and
    the failures of a change that was not tested are never its own)."""
    planned = pipeline.plan(request, run_context(history))
    if on_its_sha and planned.environment is not None:
        planned = replace(planned, environment=replace(planned.environment, tested="tested"))
    ids = [v for shard in planned.shards for v in shard]
    assert failing is None or failing in ids

    def outcome(vid: str) -> Outcome:
        if vid == failing:
            return Outcome(vid, Status.FAILED, 0.1, PRECISION)
        return Outcome(vid, Status.PASSED, 0.1, "")

    def rerun(name: str, rerun_ids: Sequence[str]) -> ShardRun:
        if name == BASE_SHARD and not fails_on_base:  # the base torch: all pass
            return ShardRun([Outcome(v, Status.PASSED, 0.1, "") for v in rerun_ids])
        return ShardRun([outcome(v) for v in rerun_ids])

    return finishing.finish(planned, [outcome(v) for v in ids], run_context(history), rerun)


def test_a_run_sequence_through_the_pipeline_shows_the_window_everywhere(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    history = SQLiteHistory(state / "history.sqlite3")

    def run(run_id: str, sha: str, failing: str | None) -> run_model.FinishedRun:
        request = _request(tiny_inventory, tmp_path / run_id, run_id, sha)
        return _finish(history, request, failing, on_its_sha=True)

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
    # A full run has no op_match/impact_map reasons, and every run tested the installed
    # torch (none is the sha its event names): History saw it pass on this same torch, so
    # nothing shows upstream moved; a tolerance miss alone names nobody.
    assert (entry["class"], entry["category"], entry["related"]) == ("precision", "unknown", False)
    verdict = found["triage_verdict"]
    assert verdict["category"] == "unknown" and verdict["confidence"] == "high"
    assert "suspected_upstream" not in verdict
    assert verdict["evidence"][0]["test"] == VID

    line = f"last good {B} / first bad {C}"
    assert line in (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert line in html and f'href="https://github.com/pytorch/pytorch/compare/{B}...{C}"' in html

    record = history.get_run("push-c")
    assert record is not None
    assert record.summary.plan is not None and record.summary.forensics is not None
    assert record.summary.plan.head_sha == C and record.summary.plan.kind == "push"
    assert record.summary.forensics.triage == "unknown"
    assert record.summary.plan.backend.device and record.summary.plan.torch_sha
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    shown = cli("runs", "show", "push-c", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "triage: unknown (high confidence)" in shown.stdout
    assert f"{VID}: {line}" in shown.stdout and "triage: precision (unknown)" in shown.stdout
    # A green run writes no forensics.
    assert not (tmp_path / "push-b" / "forensics.json").exists()


@pytest.mark.long
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
    # The C++ change is not applied: the failures are the torch's own (exit 4), and a rule
    # refusal is still the backend's, whatever the change.
    assert first.returncode == 4, first.stdout + first.stderr
    found = json.loads((out / "forensics.json").read_text())
    assert found["failures"], found
    for entry in found["failures"].values():
        assert (entry["class"], entry["category"], entry["related"]) == (
            "device-rule",
            "backend",
            True,
        )
        assert entry["last_good_sha"] is None and entry["compare_url"] is None  # first run
    assert found["triage_verdict"] is None  # a verdict is on new failures: there are none
    assert "## Pre-existing failures (4)" in (out / "report.md").read_text()


def _softmax_edit() -> str:
    """A Python edit of `softmax` in the installed torch (same behaviour), as a git diff."""
    root, _version = installed_torch()
    assert root is not None
    lines = (root / "torch/nn/functional.py").read_text(encoding="utf-8").splitlines(True)
    start = next(i for i, line in enumerate(lines) if line.startswith("def softmax("))
    at = next(i for i in range(start, len(lines)) if lines[i] == "    if dtype is None:\n")
    edited = [*lines[:at], "    dim = dim if dim is None else int(dim)\n", *lines[at:]]
    diff = difflib.unified_diff(
        lines, edited, "a/torch/nn/functional.py", "b/torch/nn/functional.py"
    )
    return "diff --git a/torch/nn/functional.py b/torch/nn/functional.py\n" + "".join(diff)


def test_a_related_precision_miss_goes_on_the_wire_and_a_re_export_keeps_it(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    # Passed at A and B (full runs); a Python edit of softmax at C, applied on its base (the
    # installed torch), selects VID by op_match and misses a tolerance there: the change's
    # numerics, so upstream, first bad C.
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")

    def run(run_id: str, sha: str, failing: str | None, diff: str | None) -> run_model.FinishedRun:
        request = _request(tiny_inventory, tmp_path / run_id, run_id, sha)
        if diff is not None:
            event = dataclasses.replace(request.event, base_sha=torch_git_sha())
            request = dataclasses.replace(request, event=event)
        return _finish(
            history, dataclasses.replace(request, diff_text=diff, full=diff is None), failing
        )

    run("push-a", A, None, None)
    run("push-b", B, None, None)
    assert run("push-c", C, VID, _softmax_edit()).new_failures == [VID]

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


def test_failing_on_the_base_too_after_passing_on_another_torch_is_upstreams(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    # History: VID passed at A, on torch A, with the backend under test now. A Python edit
    # of softmax at C, applied on the installed torch (its base): VID fails there and on the
    # base without the change. Not this change's (pre-existing, the run is green), and not
    # the backend's either: an upstream commit between A and the base broke it.
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    _record(history, "push-a", 1.0, "push", A, {VID: Status.PASSED}, backend=backend(), torch_sha=A)
    request = _request(tiny_inventory, tmp_path / "push-c", "push-c", C)
    event = dataclasses.replace(request.event, base_sha=torch_git_sha())
    request = dataclasses.replace(request, event=event, diff_text=_softmax_edit(), full=False)
    finished = _finish(history, request, VID, fails_on_base=True)
    assert finished.classification[VID] == "pre-existing" and finished.new_failures == []
    found = json.loads((tmp_path / "push-c" / "forensics.json").read_text())
    entry = found["failures"][VID]
    assert (entry["category"], entry["passed_before"], entry["last_good_sha"]) == (
        "upstream",
        A,
        A,
    )
    assert "on the base torch without the change" in entry["why"]
    assert found["triage_verdict"] is None  # no new failure: the run sends no verdict

    # The same History, but the run that passed had another backend version: the backend's.
    other = SQLiteHistory(tmp_path / "other" / "history.sqlite3")
    moved = {**backend(), "version": "0.0.1-older"}
    _record(other, "push-a", 1.0, "push", A, {VID: Status.PASSED}, backend=moved, torch_sha=A)
    request = dataclasses.replace(request, out_dir=str(tmp_path / "push-c2"))
    _finish(other, request, VID, fails_on_base=True)
    entry = json.loads((tmp_path / "push-c2" / "forensics.json").read_text())["failures"][VID]
    assert (entry["category"], entry["passed_before"]) == ("backend", None)


def test_the_backend_digest_follows_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "digest_probe_backend"
    package.mkdir()
    (package / "__init__.py").write_text("KERNEL = 1\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.pyc").write_bytes(b"\0")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = backend_identity.backend_digest("digest_probe_backend")
    assert len(first) == 16 and first == backend_identity.backend_digest("digest_probe_backend")
    (package / "__pycache__" / "x.pyc").write_bytes(b"\1")  # bytecode is left out
    assert backend_identity.backend_digest("digest_probe_backend") == first
    # Edited under a long-lived process (a worker): the same size, the same version, and
    # seen at once, with no cache to clear.
    (package / "__init__.py").write_text("KERNEL = 2\n")
    second = backend_identity.backend_digest("digest_probe_backend")
    assert second not in ("", first)
    (package / "kernels.py").write_text("")  # a file added
    assert backend_identity.backend_digest("digest_probe_backend") not in ("", first, second)
    assert backend_identity.backend_digest("no_such_backend_package") == ""
    # A copy first on PYTHONPATH is what a test process imports: its files are digested.
    copy = tmp_path / "first" / "digest_probe_backend"
    copy.mkdir(parents=True)
    (copy / "__init__.py").write_text("KERNEL = 3\n")
    env = {"PYTHONPATH": str(tmp_path / "first")}
    assert backend_identity.backend_digest("digest_probe_backend", env) not in ("", first)
