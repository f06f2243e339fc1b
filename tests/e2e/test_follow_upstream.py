"""Following upstream end to end (slow: two builds provisioned, about five minutes): the
stream of `benchmarks/follow_upstream.py` on a simulated upstream (relabelled nightlies from a
local PEP 503 index, a local GitHub of the history), each push run by `spyre-ci run --event`
on the build of its base with the drift applied, and the C++ push judged by `spyre-ci pending
check` once the next nightly holds it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing.paths import REPO_ROOT


@pytest.mark.slow
def test_a_stream_on_a_simulated_upstream_is_judged_on_the_builds_of_its_bases(
    tmp_path: Path,
) -> None:
    out = tmp_path / "follow.json"
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/follow_upstream.py",
            "--index",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["value"] == 0 and record["matched"] == len(record["events"]) == 4
    by_event = {e["event"]: e for e in record["events"]}
    broken = by_event["c1..c2"]
    assert (broken["exit_code"], broken["tested"], broken["conclusion"]) == (1, "tested", "failure")
    assert any("upstream drift of 1 commit(s)" in line for line in broken["lines"])
    assert any("2.16.0.dev20261201" in line for line in broken["lines"])
    revert = by_event["c2..c3"]
    assert (revert["exit_code"], revert["conclusion"]) == (0, "success")
    cpp = by_event["c3..c4"]
    assert (cpp["exit_code"], cpp["tested"], cpp["conclusion"]) == (4, "not_tested", "neutral")
    deferred = record["deferred"]
    assert deferred["exit_code"] == 0
    assert [line for line in deferred["pending_list"] if "judged by run" in line]
    # Reported as HUD and the relay take a later result: the original delivery, attempt 2.
    callback = deferred["callback"]
    assert callback["run_attempt"] == "2" and callback["conclusion"] == "success"
    assert callback["delivery_id"] and not callback["delivery_id"].endswith(":deferred")
    assert callback["spyre_run_id"] != callback["run_id"]
    assert set(record["provision_first_s"]) == {"2.16.0.dev20261201", "2.16.0.dev20261203"}
