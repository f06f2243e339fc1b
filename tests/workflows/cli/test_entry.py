"""The `spyre-ci` program's exit (`workflows.cli.main.entry`): it skips the interpreter's
teardown, never what an exit must do. Each case is a real process whose output is read
through a pipe."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# A program that runs `entry()` as the console script does, with the checks of a case added
# before it: argv[1] is the state directory, argv[2] a file the case may write.
PROGRAM = """
import atexit, sys, threading, time
from pathlib import Path
from workflows.cli.main import entry
state, mark = sys.argv[1], Path(sys.argv[2])
{setup}
sys.argv = ["spyre-ci", "runs", "list"]
import os
os.environ["SPYRE_CI_STATE_DIR"] = state
entry()
"""


def run(tmp_path: Path, setup: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    mark = tmp_path / "mark"
    program = PROGRAM.format(setup=textwrap.dedent(setup))
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "state"), str(mark)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, mark


def test_the_exit_handlers_run_and_the_output_is_all_there(tmp_path: Path) -> None:
    setup = """
        atexit.register(lambda: mark.write_text("handler ran"))
        print("x" * 200_000, end="")  # more than a pipe's buffer: flushed at the exit
    """
    done, mark = run(tmp_path, setup)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("x" * 200_000)
    assert "no runs yet" in done.stdout
    assert mark.read_text() == "handler ran"


def test_the_exit_code_is_the_command_s(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where a folder must be")
    done, _ = run(tmp_path, "")
    assert done.returncode == 2, done.stderr  # bad input: a state directory that is a file
    assert "the state directory" in done.stderr


def test_a_thread_that_is_not_a_daemon_is_waited_for(tmp_path: Path) -> None:
    setup = """
        def late():
            time.sleep(1.0)
            mark.write_text("thread finished")
        threading.Thread(target=late, daemon=False).start()
    """
    done, mark = run(tmp_path, setup)
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "thread finished"
