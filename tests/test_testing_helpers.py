"""The tests' own helpers that signal processes: they must never name the test run itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.testing.processes import launcher


def test_launcher_of_a_process_that_ended_is_none_never_0() -> None:
    # 0 would make `os.kill(launcher(pid), ...)` signal this whole process group.
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert launcher(done.pid) is None


def test_launcher_of_a_running_process_is_its_parent() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while launcher(child.pid) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert launcher(child.pid) == os.getpid()
    finally:
        child.kill()
        child.wait()
