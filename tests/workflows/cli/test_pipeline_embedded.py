"""The main job end to end on the embedded executor: real selection, pytest subprocesses on
the spyre device, Verify, History and every export, driven through the CLI."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from tests.testing.cli import cli
from tests.testing.paths import SOFTMAX_PATCH, TINY_SPEC

WITH_DTYPE_FAILURES = {
    f"tiny::compare_cpu::{op}.with_dtype::{dtype}"
    for op in ("softmax", "log_softmax")
    for dtype in ("float32", "float16")
}


def test_a_cpp_softmax_change_runs_its_family_and_blames_it_for_nothing(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    """The C++ softmax push cannot be applied without a build: its family runs on the
    installed torch, and what fails there is that torch's own (listed apart, pre-existing,
    a neutral callback, exit 4), then and on a second run alike."""
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    common = [
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
    ]

    first = cli(*common, "--out", str(tmp_path / "out1"), env=env)
    # `softmax.with_dtype` samples ask for float64, which Spyre refuses: real failures, of the
    # installed torch and backend, not of a change that was not applied.
    assert first.returncode == 4, first.stdout + first.stderr
    out = tmp_path / "out1"
    plan = json.loads((out / "plan.json").read_text())
    selected = {s["id"] for s in plan["selected"]}
    assert {v.split("::")[2].split(".")[0] for v in selected} == {"softmax", "log_softmax"}
    record = json.loads((out / "run.json").read_text())
    classes = {r["id"]: r["classification"] for r in record["results"]}
    assert {vid for vid, c in classes.items() if c} == WITH_DTYPE_FAILURES
    assert {classes[vid] for vid in WITH_DTYPE_FAILURES} == {"pre-existing"}
    assert "float64" in next(
        r["message"] for r in record["results"] if r["id"] in WITH_DTYPE_FAILURES
    )
    callback = json.loads((out / "callback.json").read_text())
    assert callback["workflow"]["conclusion"] == "neutral"
    assert callback["workflow"]["test_results"]["failed"] == 4
    run_id = record["run_id"]
    with gzip.open(out / "hud" / "failed_test_runs" / run_id / "1", "rt") as fh:
        failed_rows = [json.loads(line) for line in fh]
    assert {row["name"] for row in failed_rows} == WITH_DTYPE_FAILURES
    assert list((out / "junit").glob("*.xml"))
    assert "tiny::compare_cpu::softmax.with_dtype::float16" in (out / "report.html").read_text()
    assert "NEW FAILURES" not in first.stdout
    assert "ITSELF (4;" in first.stdout and "the change was not applied" in first.stdout

    second = cli(*common, "--out", str(tmp_path / "out2"), env=env)
    assert second.returncode == 4, second.stdout + second.stderr
    record = json.loads((tmp_path / "out2" / "run.json").read_text())
    classes = {r["id"]: r["classification"] for r in record["results"] if r["classification"]}
    assert classes == dict.fromkeys(WITH_DTYPE_FAILURES, "pre-existing")

    listing = cli("runs", "list", env=env)
    assert listing.returncode == 0
    assert listing.stdout.count("completed") == 2
    shown = cli("runs", "show", record["run_id"], "--json", env=env)
    summary = json.loads(shown.stdout)["summary"]
    assert summary["failed"] == 4 and summary["new_failures"] == 0


def test_run_errors_are_clear(tmp_path: Path) -> None:
    missing = cli("run", "--event", str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert "nope.json: no such event file" in missing.stderr
    bad_inventory = tmp_path / "inv.json.gz"
    bad_inventory.write_text("not gzip")
    result = cli(
        "run",
        "--diff",
        str(SOFTMAX_PATCH),
        "--inventory",
        str(bad_inventory),
        "--out",
        str(tmp_path / "o"),
        env={**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "s")},
    )
    assert result.returncode == 2
    assert "inv.json.gz: not a readable inventory" in result.stderr


@pytest.mark.slow  # fast twin: the History assertions of test_infra_faults.py
def test_no_baseline_run_leaves_the_baseline_alone(tiny_inventory: Path, tmp_path: Path) -> None:
    from workflows.stores.history import SQLiteHistory

    state = tmp_path / "state"
    result = cli(
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
        "--budget",
        "2",
        "--no-baseline",
        "--no-progress",
        "--out",
        str(tmp_path / "out"),
        env={**os.environ, "SPYRE_CI_STATE_DIR": str(state)},
    )
    # A C++-only change runs the installed torch: not tested (exit 4), its outcomes recorded.
    assert result.returncode == 4, result.stdout + result.stderr
    snapshot = SQLiteHistory(state / "history.sqlite3").snapshot()
    assert snapshot.variants, "the run recorded its outcomes"
    assert all(v.baseline is None for v in snapshot.variants.values())
