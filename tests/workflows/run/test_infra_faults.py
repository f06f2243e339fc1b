"""The tool's own faults are never test results: a run whose tests cannot start ends as an
infrastructure error (exit 3) and teaches History nothing; a run whose failures look like
the tool's is held back; `history forget` undoes a run; an out directory and `runs resume`
never mix two runs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from contracts.event import TriggerEvent
from dashboard_export.layout import read_json_lines
from selector.history import History
from suites.model import Outcome, Status
from tests.testing.cli import cli
from tests.testing.paths import SOFTMAX_PATCH, TINY_SPEC
from tests.workflows.run_context import run_context
from workflows.run import exporting, finishing, pipeline, run_model
from workflows.run.on_build import torch_git_sha
from workflows.runner.shard_runner import ShardRun
from workflows.stores.history import RunState, SQLiteHistory

# What the tiny suite fails on spyre with no expectation: new to an empty History.
SOFTMAX_NEW = {
    f"tiny::compare_cpu::{op}.with_dtype::{dtype}"
    for op in ("softmax", "log_softmax")
    for dtype in ("float32", "float16")
} | {f"tiny::compare_cpu::pow::{dtype}" for dtype in ("float32", "float16")}


def _installed_nightly(folder: Path) -> Path:
    """A nightly event at the installed torch's own sha: a run of it is tested (nothing to
    apply, no A/B), so its failures are judged against History and the expectations."""
    folder.mkdir(parents=True, exist_ok=True)
    sha = torch_git_sha()
    path = folder / "nightly.json"
    path.write_text(
        json.dumps(
            {
                "event": "nightly",
                "delivery_id": sha,
                "payload": {"head_sha": sha, "repository": {"full_name": "pytorch/pytorch"}},
            }
        )
    )
    return path


def _common(tiny_inventory: Path) -> list[str]:
    return [
        "run",
        "--event",
        str(_installed_nightly(tiny_inventory.parent / "events")),
        "--full",
        "--inventory",
        str(tiny_inventory),
        "--specs",
        str(TINY_SPEC),
        "--jobs",
        "2",
        "--holdout",
        "0",
        "--no-progress",
    ]


def test_a_run_whose_tests_cannot_start_is_an_infrastructure_error_that_teaches_nothing(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    out = tmp_path / "broken"
    # 64 MB of address space: the test processes cannot even import torch.
    broken = cli(*_common(tiny_inventory), "--memory-mb", "64", "--out", str(out), env=env)
    assert broken.returncode == 3, broken.stdout + broken.stderr
    assert "INFRASTRUCTURE ERROR (not a test result)" in broken.stdout
    assert "before its first test" in broken.stdout
    assert "NEW FAILURES" not in broken.stdout

    record = json.loads((out / "run.json").read_text())
    assert record["results"] == []  # no variant pretends to have failed
    assert record["infrastructure"] and "shard-0" in record["infrastructure"][0]
    assert "Infrastructure error: the tests could not run" in (out / "report.md").read_text()
    assert "Infrastructure error" in (out / "report.html").read_text()
    workflow = json.loads((out / "callback.json").read_text())["workflow"]
    assert workflow["conclusion"] == "failure"
    assert workflow["failed_tests"] == [] and workflow["test_results"]["failed"] == 0
    verdict = workflow["triage_verdict"]
    assert verdict["category"] == "infra" and verdict["schema_version"] == 1
    assert verdict["reproduced_on_retry"] is True
    row = json.loads((out / "hud" / "crcr_workflow_job.json").read_text())
    assert row["conclusion"] == "failure"
    assert (
        "infrastructure error, not a test result"
        in json.loads(row["environment"])["infrastructure_error"]
    )
    for table in ("test_run", "failed_test_runs"):
        rows = [
            row
            for path in (out / "hud" / table).rglob("*")
            if path.is_file()
            for row in read_json_lines(path)
        ]
        assert rows == [], table

    history = SQLiteHistory(state / "history.sqlite3")
    assert history.snapshot(["aten/src/ATen/native/SoftMax.cpp"]) == History()
    run = history.get_run(record["run_id"])
    assert run is not None and run.state == RunState.INFRA_ERROR
    listing = cli("runs", "list", env=env)
    assert record["run_id"] in listing.stdout and "infra-error" in listing.stdout
    check = cli("history", "check", env=env)  # it taught nothing, and says why
    assert check.returncode == 0 and "taught History nothing" in check.stdout
    assert f"{record['run_id']}  [infra-error]  infrastructure error: shard-0" in check.stdout

    # The next run is judged as if the broken one never happened: its real failures are
    # new, not "pre-existing" against a baseline of the tool's errors.
    good = cli(*_common(tiny_inventory), "--out", str(tmp_path / "good"), env=env)
    assert good.returncode == 1, good.stdout + good.stderr
    good_record = json.loads((tmp_path / "good" / "run.json").read_text())
    new = {r["id"] for r in good_record["results"] if r["classification"] == "new"}
    assert new == SOFTMAX_NEW

    # ... and `history forget` takes back what that good run taught, once.
    forget = cli("history", "forget", good_record["run_id"], env=env)
    assert forget.returncode == 0 and "forgotten" in forget.stdout, forget.stderr
    assert history.snapshot(["aten/src/ATen/native/SoftMax.cpp"]) == History()
    again = cli("history", "forget", good_record["run_id"], env=env)
    assert again.returncode == 0 and "nothing left" in again.stdout
    unknown = cli("history", "forget", "no-such-run", env=env)
    assert unknown.returncode == 2 and "no run 'no-such-run'" in unknown.stderr


def _request(tiny_inventory: Path, out: Path, run_id: str, **extra: object) -> run_model.RunRequest:
    event = TriggerEvent(
        kind="nightly",  # at the installed torch's own sha: tested, nothing applied
        delivery_id=run_id,
        repo="pytorch/pytorch",
        head_sha=torch_git_sha(),
        files_complete=False,
        source="cli",
    )
    return run_model.RunRequest(
        run_id=run_id,
        event=event,
        out_dir=str(out),
        inventory=str(tiny_inventory),
        specs=(str(TINY_SPEC),),
        full=True,
        holdout=0.0,
        expand=False,
        **extra,  # type: ignore[arg-type]
    )


def test_failures_that_look_like_the_tools_own_are_held_back_until_confirmed(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    history = SQLiteHistory(state / "history.sqlite3")
    planned = pipeline.plan(
        _request(tiny_inventory, tmp_path / "out", "held-1"), run_context(history)
    )
    ids = [v for shard in planned.shards for v in shard]
    # Every variant failing with the same message (numbers aside), and again on its rerun:
    # what a broken environment looks like when it breaks inside the tests.
    same = [
        Outcome(v, Status.FAILED, 0.1, f"RuntimeError: device {i} lost") for i, v in enumerate(ids)
    ]

    def rerun(name: str, rerun_ids: Sequence[str]) -> ShardRun:
        return ShardRun(
            [Outcome(v, Status.FAILED, 0.1, "RuntimeError: device 0 lost") for v in rerun_ids]
        )

    finished = finishing.finish(planned, same, run_context(history), rerun)
    assert finished.held_back and "same message" in finished.held_back
    assert finished.exit_code == 1  # still reported: they may be real
    assert history.snapshot() == History()
    assert history.get_run("held-1").state == RunState.HELD  # type: ignore[union-attr]
    assert "Held back from History" in (tmp_path / "out" / "report.md").read_text()

    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    check = cli("history", "check", env=env)
    # A run to confirm or forget: the check answers "no" (exit 5).
    assert check.returncode == 5 and "held-1" in check.stdout and "held back" in check.stdout
    confirm = cli("history", "confirm", "held-1", env=env)
    assert confirm.returncode == 0, confirm.stderr
    learned = history.snapshot()
    assert set(learned.variants) == set(ids)
    assert all(v.baseline is Status.FAILED for v in learned.variants.values())
    assert history.get_run("held-1").state == RunState.COMPLETED  # type: ignore[union-attr]
    twice = cli("history", "confirm", "held-1", env=env)
    assert twice.returncode == 2 and "nothing held back" in twice.stderr


def test_a_rerun_that_cannot_start_ends_the_run_as_an_infrastructure_error(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    planned = pipeline.plan(
        _request(tiny_inventory, tmp_path / "out", "rerun-dies"), run_context(history)
    )
    first = [
        Outcome(v, Status.FAILED if i == 0 else Status.PASSED, 0.1, "boom")
        for i, v in enumerate(v for shard in planned.shards for v in shard)
    ]
    spent: list[str] = []

    def broken(name: str, ids: Sequence[str]) -> ShardRun:
        from workflows.runner.shard_runner import InfraFault

        spent.append(name)
        return ShardRun([], InfraFault(name, "exited with code 4", tuple(ids), 2))

    finished = finishing.finish(planned, first, run_context(history), broken)
    assert spent == ["rerun"]  # no expansion spent on it
    assert finished.exit_code == 3 and finished.faults[0].shard_id == "rerun"
    assert history.snapshot() == History()
    assert history.get_run("rerun-dies").state == RunState.INFRA_ERROR  # type: ignore[union-attr]


def test_an_out_directory_holding_an_unfinished_run_is_refused_and_resume_checks_the_run(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    out = tmp_path / "out"
    pipeline.plan(_request(tiny_inventory, out, "first"), run_context(history))
    with pytest.raises(
        run_model.PipelineError, match=r"holds run first, which has not finished.*runs resume first"
    ):
        pipeline.plan(_request(tiny_inventory, out, "second"), run_context(history))

    # Given up by removing it, the folder is the second run's; the first cannot be resumed
    # from it (that would finish the second run under the first one's name).
    import shutil

    shutil.rmtree(out)
    pipeline.plan(_request(tiny_inventory, out, "second"), run_context(history))
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    resumed = cli("runs", "resume", "first", env=env)
    assert resumed.returncode == 2
    assert "now holds run second, not first" in resumed.stderr


def test_a_redis_outage_is_an_infrastructure_error(tiny_inventory: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "SPYRE_CI_REDIS_URL": "redis://127.0.0.1:1/0",
    }
    result = cli(*_common(tiny_inventory), "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "infrastructure error" in result.stderr and "Redis History at" in result.stderr
    assert "Traceback" not in result.stderr


def _shard_processes(marker: str) -> list[int]:
    import subprocess

    listing = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True)
    return [
        int(line.split(None, 1)[0])
        for line in listing.stdout.splitlines()
        if "suites.pytest_plugin" in line and marker in line
    ]


@pytest.mark.parametrize(
    "signum",
    ["SIGINT", pytest.param("SIGTERM", marks=pytest.mark.slow)],  # same path after the handler
)
@pytest.mark.long
def test_an_interrupted_run_stops_every_shard_at_once_and_can_be_resumed(
    slow_inventory: Path, tmp_path: Path, signum: str
) -> None:
    import signal
    import subprocess
    import sys
    import time

    from tests.testing.paths import REPO_ROOT, SLOW_SPEC, SLOW_STEPS

    # Twelve one-second tests in two shards: a warm shard starts in a fraction of a second,
    # so the tiny suite can end before the signal arrives.
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "TORCH_ROOT": str(SLOW_STEPS),
    }
    out = tmp_path / "out"
    args = [
        "run",
        "--event",
        str(REPO_ROOT / "examples" / "events" / "nightly.json"),
        "--full",
        "--inventory",
        str(slow_inventory),
        "--specs",
        str(SLOW_SPEC),
        "--jobs",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]

    def as_a_terminal_would() -> None:
        # A test run started in the background of a non-interactive shell ignores SIGINT,
        # and so would its children (Python keeps an inherited SIG_IGN): Ctrl-C comes from a
        # terminal, where it is not ignored.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-m", "workflows", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_a_terminal_would,
    )
    deadline = time.monotonic() + 120
    # Signal as soon as a shard runs: waiting for both at once raced a fast shard that had
    # already ended on a loaded machine.
    while not _shard_processes(str(out)) and proc.poll() is None:
        assert time.monotonic() < deadline, "the shards never started"
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.kill(proc.pid, getattr(signal, signum))
    began = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - began < 10  # not the time the shards would have taken
    assert _shard_processes(str(out)) == []
    assert "spyre-ci runs resume" in stderr
    run_id = stderr.split("run ", 1)[1].split()[0]
    run = SQLiteHistory(tmp_path / "state" / "history.sqlite3").get_run(run_id)
    assert run is not None and run.state == RunState.STOPPED
    resumed = cli("runs", "resume", run_id, "--jobs", "2", env=env)
    # the shipped nightly is not at the installed torch's sha: the run is not tested (4)
    assert resumed.returncode in (0, 1, 4), resumed.stdout + resumed.stderr
    assert len(json.loads((out / "run.json").read_text())["results"]) == 12


@pytest.mark.slow  # fast twin: test_cli_input.py::test_relative_paths_hold_across_directories
def test_a_relative_torch_root_means_the_same_folder_to_the_shards(tmp_path: Path) -> None:

    spec = "tests/suites/upstream_like/tiny.yaml"
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "TORCH_ROOT": "tests/suites/upstream_like",
    }  # relative, as a user types it
    inventory = tmp_path / "inv.json.gz"
    built = cli("inventory", "--specs", spec, "--out", str(inventory), env=env)
    assert built.returncode == 0, built.stderr
    ran = cli(
        "run",
        "--diff",
        str(SOFTMAX_PATCH),
        "--inventory",
        str(inventory),
        "--specs",
        spec,
        "--full",
        "--jobs",
        "1",
        "--holdout",
        "0",
        "--no-progress",
        "--test-timeout",
        "20",
        "--out",
        str(tmp_path / "out"),
        env=env,
    )
    assert ran.returncode in (0, 1, 4), ran.stdout + ran.stderr  # never 3: the tests ran
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["infrastructure"] == [] and record["results"]
    assert any(r["status"] == "passed" for r in record["results"])


def test_an_out_directory_that_is_not_ours_keeps_its_files(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    out = tmp_path / "project"
    (out / "work").mkdir(parents=True)
    (out / "work" / "notes.txt").write_text("mine")
    pipeline.plan(_request(tiny_inventory, out, "into-a-user-folder"), run_context(history))
    assert (out / "work" / "notes.txt").read_text() == "mine"


def test_history_learns_last_an_export_that_fails_leaves_it_as_it_was(
    tiny_inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    planned = pipeline.plan(
        _request(tiny_inventory, tmp_path / "out", "disk-full"), run_context(history)
    )
    ids = [v for shard in planned.shards for v in shard]
    first = [
        Outcome(v, Status.FAILED if i == 0 else Status.PASSED, 0.1, f"AssertionError: {i}")
        for i, v in enumerate(ids)
    ]

    def again(name: str, rerun_ids: Sequence[str]) -> ShardRun:
        return ShardRun([Outcome(v, Status.FAILED, 0.1, "AssertionError") for v in rerun_ids])

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(exporting, "export", full_disk)
    with pytest.raises(OSError):
        finishing.finish(planned, first, run_context(history), again)
    # Nothing learned: no outcomes, baselines, co-failures or flaky marks; not finished.
    assert history.snapshot() == History()
    assert not history.get_run("disk-full").state.final  # type: ignore[union-attr]

    monkeypatch.undo()
    finished = finishing.finish(planned, first, run_context(history), again)
    assert finished.exit_code == 1
    assert set(history.snapshot().variants) == set(ids)  # learned once the exports were written


def test_an_infrastructure_error_publishes_no_failure_rows(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    from workflows.runner.shard_runner import InfraFault

    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    planned = pipeline.plan(
        _request(tiny_inventory, tmp_path / "out", "infra-rows"), run_context(history)
    )
    ids = [v for shard in planned.shards for v in shard]
    ran = [Outcome(ids[0], Status.FAILED, 0.1, "MemoryError"), Outcome(ids[1], Status.PASSED, 0.1)]
    fault = InfraFault("shard-1", "the zygote died", tuple(ids[2:]), 2)
    finished = finishing.finish(
        planned, ran, run_context(history), lambda n, i: ShardRun([]), [fault]
    )
    assert finished.exit_code == 3
    out = tmp_path / "out"
    callback = json.loads((out / "callback.json").read_text())
    assert callback["workflow"]["failed_tests"] == []
    assert callback["workflow"]["test_results"]["failed"] == 0
    record = json.loads((out / "run.json").read_text())
    assert [r["id"] for r in record["results"]] == [ids[1]]
    failed_rows = list((out / "hud" / "failed_test_runs").rglob("*"))
    assert all(not read_json_lines(p) for p in failed_rows if p.is_file()), (
        "no failed_test_runs rows for an infrastructure error"
    )
    assert history.snapshot() == History()
