"""A run's out directory and the state directory under faults, through the real command line:
one run at a time per `--out` (a lock for the run's life; a killed holder's lock is taken
over); a state directory whose disk fills mid-run is an infrastructure error naming the file,
and nothing half-written is believed; `runs resume` with Redis down is one line, exit 3."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from selector.history import HistoryUpdate, OutcomeRecord
from suites.model import Status
from tests.testing.cli import cli, spyre_ci
from tests.testing.paths import EVENTS, REPO_ROOT, SLOW_SPEC, SLOW_STEPS, TINY_SPEC
from tests.testing.relay import RedisProcess
from workflows.run.on_build import torch_git_sha
from workflows.stores.history import RunState, SQLiteHistory

LOCK_FILE = ".spyre-ci-run.lock"  # workflows.run.run_folder.LOCK_FILE


def _nightly_at_installed_torch(folder: Path) -> Path:
    """A nightly at the installed torch's own sha: tested, nothing to apply, no A/B."""
    folder.mkdir(parents=True, exist_ok=True)
    sha = torch_git_sha()
    path = folder / "nightly.json"
    payload = {"head_sha": sha, "repository": {"full_name": "pytorch/pytorch"}}
    path.write_text(json.dumps({"event": "nightly", "delivery_id": sha, "payload": payload}))
    return path


def _tiny_run(tiny_inventory: Path, out: Path, events: Path) -> list[str]:
    return [
        "run",
        "--event",
        str(_nightly_at_installed_torch(events)),
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
        "--out",
        str(out),
    ]


def _planned_run_id(out: Path, proc: subprocess.Popen[str], within_s: float = 120) -> str:
    """The id of the run `proc` planned into `out`, once it has planned."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return str(json.loads((out / "planned.json").read_text())["request"]["run_id"])
        except (OSError, ValueError, KeyError):
            assert proc.poll() is None, "the run ended before it planned"
            assert time.monotonic() < deadline, "the run never planned"
            time.sleep(0.05)


# -- one run per --out ---------------------------------------------------------------------


@pytest.mark.long
def test_a_second_run_into_an_out_directory_in_use_is_refused_naming_the_first(
    slow_inventory: Path, tiny_inventory: Path, tmp_path: Path
) -> None:
    """Each run keeps its own History (two state directories, two users, two CI jobs), so
    History cannot tell that the out directory is taken: the lock does. The second run used
    to clear the first one's work folder and overwrite its plan and outputs."""
    out = tmp_path / "out"
    first_env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state-a"),
        "TORCH_ROOT": str(SLOW_STEPS),
    }
    first = subprocess.Popen(
        [sys.executable, "-m", "workflows", "run", "--event", str(EVENTS / "nightly.json")]
        + ["--full", "--inventory", str(slow_inventory), "--specs", str(SLOW_SPEC)]
        + ["--jobs", "1", "--no-progress", "--out", str(out)],  # twelve one-second tests
        cwd=REPO_ROOT,
        env=first_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first_id = _planned_run_id(out, first)
        second_env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state-b")}
        second = cli(*_tiny_run(tiny_inventory, out, tmp_path / "events"), env=second_env)
        running = first.poll() is None
        resumed = cli("runs", "resume", first_id, env=first_env)  # a resume is refused too
        running = running and first.poll() is None
        _, first_err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    assert second.returncode == 2, second.stdout + second.stderr
    assert running, "the first run ended before the others asked: " + first_err
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith(f"spyre-ci: error: {out} is in use by run {first_id} (pid {first.pid} ")
    assert "one run writes into an out directory at a time" in line
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert f"is in use by run {first_id}" in resumed.stderr

    # The first run's outputs are its own, whole; the lock went with it.
    assert first.returncode in (0, 1, 4), first_err  # the shipped nightly is not tested (4)
    assert json.loads((out / "planned.json").read_text())["request"]["run_id"] == first_id
    assert len(json.loads((out / "run.json").read_text())["results"]) == 12
    assert not (out / LOCK_FILE).exists()
    assert (
        not (tmp_path / "state-b" / "history.sqlite3").exists()
        or not SQLiteHistory(tmp_path / "state-b" / "history.sqlite3").list_runs()
    )


def test_the_lock_of_a_run_that_was_killed_is_taken_over_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from workflows.run.run_folder import holding

    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time
                from pathlib import Path
                from workflows.run.run_folder import holding
                with holding(Path(sys.argv[1]), "gone-run"):
                    print("held", flush=True)
                    time.sleep(300)  # holds the lock until the test kills it
                """
            ),
            str(out),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    holder.kill()  # SIGKILL: no `finally` lets go of it
    holder.wait()
    assert json.loads((out / LOCK_FILE).read_text())["run_id"] == "gone-run"

    with holding(out, "next-run"):
        assert json.loads((out / LOCK_FILE).read_text())["run_id"] == "next-run"
    said = capsys.readouterr().err
    assert said.startswith(f"spyre-ci: {out}: run gone-run (pid {holder.pid} on "), said
    assert said.rstrip().endswith("ended without letting go of it; taking it over")
    assert not (out / LOCK_FILE).exists()


def test_the_hold_is_one_at_a_time_even_in_one_process_and_leaves_no_folder(
    tmp_path: Path,
) -> None:
    """Two holds of one folder conflict whichever processes take them (an `flock` is per
    open file, not per process); a folder made only for the hold goes with it."""
    from workflows.run.run_folder import holding
    from workflows.run.run_model import PipelineError

    out = tmp_path / "new" / "out"
    with holding(out, "first"):
        assert json.loads((out / LOCK_FILE).read_text())["run_id"] == "first"
        refused = pytest.raises(PipelineError, match=r"is in use by run first \(pid \d+ on ")
        with refused, holding(out, "second"):
            pass
    assert not (tmp_path / "new").exists()
    with holding(out, "second"):  # free again
        (out / "kept.txt").write_text("a run's output")
    assert (out / "kept.txt").exists() and not (out / LOCK_FILE).exists()


# -- a state directory that fills up -------------------------------------------------------


def _private_tmpfs_allowed() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True
    )
    return probe.returncode == 0


FILL_MID_RUN = """
set -u
mount -t tmpfs -o size=2m tmpfs "$DISK"
export SPYRE_CI_STATE_DIR="$DISK/state"
"$PY" -m workflows "$@" >"$WORK/run.out" 2>"$WORK/run.err" &
pid=$!
# Once a shard runs (the plan is recorded), the state directory's disk fills up.
until ls "$OUT"/work/*/shard-*/started_at >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
dd if=/dev/zero of="$DISK/filler" bs=4k >/dev/null 2>&1
wait "$pid"; echo $? >"$WORK/run.rc"
cp -a "$DISK/state" "$WORK/state-when-full"
rm "$DISK/filler"
run=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["request"]["run_id"])' \
      "$OUT/planned.json")
"$PY" -m workflows runs resume "$run" --jobs 2 >"$WORK/resume.out" 2>"$WORK/resume.err"
echo $? >"$WORK/resume.rc"
cp -a "$DISK/state" "$WORK/state-after"
"""


@pytest.mark.skipif(
    not _private_tmpfs_allowed(),
    reason="needs a private mount namespace (unshare) for a small filesystem",
)
@pytest.mark.long
def test_a_state_directory_whose_disk_fills_mid_run_is_an_infrastructure_error(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    """A real full disk (ENOSPC from a 2 MB tmpfs in a private mount namespace, filled once
    the shards run): SQLite's "database or disk is full" used to be a traceback. Now: exit
    3, one line naming History's file; the run learned nothing and stays resumable, and
    once there is room `runs resume` finishes it."""
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    env = {
        **os.environ,
        "DISK": str(disk),
        "OUT": str(out),
        "WORK": str(tmp_path),
        "PY": sys.executable,
    }
    args = _tiny_run(tiny_inventory, out, tmp_path / "events")
    subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "bash", "-c", FILL_MID_RUN, "-"] + args,
        cwd=REPO_ROOT,
        env=env,
        check=True,
        timeout=600,
    )

    stderr = (tmp_path / "run.err").read_text()
    assert (tmp_path / "run.rc").read_text().strip() == "3", stderr
    assert "Traceback" not in stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("spyre-ci: infrastructure error (not a test result): History at ")
    assert f"{disk}/state/history.sqlite3" in line and "database or disk is full" in line

    run_id = json.loads((out / "planned.json").read_text())["request"]["run_id"]
    full = tmp_path / "state-when-full" / "history.sqlite3"
    with sqlite3.connect(full) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    when_full = SQLiteHistory(full)
    run = when_full.get_run(run_id)
    assert run is not None and not run.state.final  # planned: resumable
    assert when_full.snapshot().variants == {}  # nothing of it learned

    resumed_err = (tmp_path / "resume.err").read_text()
    assert (tmp_path / "resume.rc").read_text().strip() == "1", resumed_err
    after = SQLiteHistory(tmp_path / "state-after" / "history.sqlite3")
    finished = after.get_run(run_id)
    assert finished is not None and finished.state == RunState.COMPLETED
    assert len(after.snapshot().variants) == 16


def test_a_history_write_past_what_the_disk_allows_is_undone_whole(tmp_path: Path) -> None:
    """The store alone, with the file size limit (RLIMIT_FSIZE, EFBIG: SQLite's "disk I/O
    error") in a child process: a `HistoryError` naming the file, and the update is either
    all in History or not at all (here: not at all)."""
    path = tmp_path / "state" / "history.sqlite3"
    history = SQLiteHistory(path)
    ids = [f"tiny::compare_cpu::op{i}::float32" for i in range(3000)]
    update = HistoryUpdate(
        outcomes=tuple(OutcomeRecord(v, Status.PASSED, 0.1) for v in ids),
        baseline={v: Status.PASSED for v in ids},
    )
    (tmp_path / "update.json").write_text(json.dumps(update.to_json()))
    del history
    child = textwrap.dedent(
        """
        import json, resource, sys
        from pathlib import Path
        from selector.history import HistoryUpdate, OutcomeRecord
        from workflows.stores.history import HistoryError, SQLiteHistory
        history = SQLiteHistory(sys.argv[1])
        update = HistoryUpdate.from_json(json.loads(Path(sys.argv[2]).read_text()))
        size = Path(sys.argv[1]).stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # it may not grow
        try:
            history.apply("run-1", update)
        except HistoryError as exc:
            print(exc)
            sys.exit(3)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(path), str(tmp_path / "update.json")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith(f"History at {path}: recording run run-1 failed: ")
    assert "disk I/O error" in done.stdout or "database or disk is full" in done.stdout
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert SQLiteHistory(path).snapshot().variants == {}


# -- Redis down ------------------------------------------------------------------------------


def test_runs_resume_with_redis_down_is_one_line_exit_3(tmp_path: Path) -> None:
    redis = RedisProcess(tmp_path)
    redis.start()
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    try:
        up = spyre_ci(
            "runs", "resume", "push-nowhere", env={**env, "SPYRE_CI_REDIS_URL": redis.url}
        )
    finally:
        redis.stop()
    assert up.returncode == 2, up.stdout + up.stderr  # Redis answered: no such run
    assert "no run 'push-nowhere' in History" in up.stderr

    with_password = f"redis://ci:s3cret@127.0.0.1:{redis.port}/0"
    down = spyre_ci(
        "runs", "resume", "push-nowhere", env={**env, "SPYRE_CI_REDIS_URL": with_password}
    )
    assert down.returncode == 3, down.stdout + down.stderr
    assert "Traceback" not in down.stderr
    (line,) = down.stderr.strip().splitlines()
    assert line.startswith(
        f"spyre-ci: infrastructure error (not a test result): Redis at "
        f"redis://ci:***@127.0.0.1:{redis.port}/0: resuming run push-nowhere failed: "
    )
    assert "s3cret" not in down.stderr


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device (a disk"),
        (sqlite3.OperationalError("database or disk is full"), "a database under the state"),
    ],
    ids=["oserror-without-a-file", "sqlite-error-no-store-named"],
)
def test_a_full_disk_no_store_named_is_one_line_naming_the_state_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fault: Exception, says: str
) -> None:
    """What the machine raises where no store caught it (a `write` that names no file, an
    SQLite error of another file under the state directory): exit 3, one line, no
    traceback, the state directory named as where to look."""
    from workflows.cli.commands import runs

    def full(*_args: object) -> int:
        raise fault

    monkeypatch.setattr(runs, "list_runs", full)
    state = tmp_path / "state"
    done = cli("runs", "list", env={**os.environ, "SPYRE_CI_STATE_DIR": str(state)})
    assert done.returncode == 3
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("spyre-ci: infrastructure error (not a test result): ")
    assert says in line and str(state) in line
