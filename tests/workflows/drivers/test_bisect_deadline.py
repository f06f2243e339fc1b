"""A bisect has an overall deadline (`--deadline-s`, and each GitHub request a timeout within
it): past it, the bisect stops with what it found and says so; when a slow GitHub left
nothing decided, exit 3 in one line. It used to wait on GitHub for as long as GitHub took."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from suites.model import Status
from tests.servers.odd_github import OddGitHub
from tests.testing.cli import spyre_ci
from tests.testing.paths import GLU_SPEC
from workflows.drivers.bisect.answer import answer
from workflows.drivers.bisect.job import exit_code
from workflows.drivers.bisect.search import bisect
from workflows.drivers.bisect.window import Commit, classify

REPO = "pytorch/pytorch"
BASE = "a" * 40
GLU = "glu::compare_cpu::glu::float32"


def _sha(n: int) -> str:
    return hashlib.sha1(f"commit {n}".encode()).hexdigest()


def _commits(count: int) -> list[Commit]:
    entry = {"filename": "torch/nn/functional.py", "status": "modified", "patch": "@@ -1 +1 @@"}
    return [classify(_sha(n), f"Change {n}", "Dev", [entry]) for n in range(count)]


class Upstream:
    """Points 0..5 pass, 6..8 fail (commit 6 is the culprit); counts the runs."""

    def __init__(self, flaky_at: int | None = None) -> None:
        self.runs: list[int] = []
        self.flaky_at = flaky_at

    def __call__(self, point: int, ids: Sequence[str]) -> Mapping[str, str]:
        self.runs.append(point)
        failed = point >= 6
        if point == self.flaky_at:
            failed = len(self.runs) % 2 == 0
        return {vid: "failed" if failed else "passed" for vid in ids}


def _is_failure(status: str) -> bool:
    return Status(status).is_failure


@pytest.mark.parametrize(
    ("runs_allowed", "flaky_at", "good", "bad", "window"),
    [
        (0, None, None, None, (0, 8)),  # the deadline passed before any run: the whole window
        (4, None, 0, 8, (0, 8)),  # base and top decided
        (6, None, 4, 8, (4, 8)),  # and the middle: the culprit is in commits 5..8
        (5, 4, 0, 8, (0, 8)),  # a step cut in its runs decides nothing
    ],
    ids=["before-any-run", "after-base-and-top", "after-a-middle-step", "in-a-step"],
)
def test_a_search_past_its_deadline_stops_with_the_window_it_had(
    runs_allowed: int,
    flaky_at: int | None,
    good: int | None,
    bad: int | None,
    window: tuple[int, int],
) -> None:
    commits = _commits(8)
    upstream = Upstream(flaky_at)
    searches = bisect(
        [GLU], 8, True, upstream, _is_failure, expired=lambda: len(upstream.runs) >= runs_allowed
    )
    search = searches[GLU]
    assert len(upstream.runs) <= runs_allowed + 1  # no run starts past the deadline
    assert (search.answer, search.good, search.bad) == ("stopped", good, bad)

    found = answer(search, commits, BASE, commits[-1].sha, on_base=True)
    low, high = window
    assert found["outcome"] == "stopped" and found["confidence"] == "low"
    assert found["window"]["commits"] == [c.sha for c in commits[low:high]]
    assert found["window"]["last_good"] == (commits[low - 1].sha if low else BASE)
    assert found["window"]["first_bad"] == commits[high - 1].sha
    assert found["summary"].startswith("stopped at the deadline after")
    assert "culprit" not in found
    assert exit_code({GLU: found}) == 3  # no verdict: exit 3, what it found kept


def test_a_search_with_time_left_is_not_stopped() -> None:
    upstream = Upstream()
    searches = bisect([GLU], 8, True, upstream, _is_failure, expired=lambda: False)
    assert searches[GLU].answer == "culprit" and searches[GLU].bad == 6


@pytest.mark.parametrize(
    ("delay_s", "deadline_s", "says"),
    [
        (
            0.8,
            "2",
            "GitHub was too slow: the bisect's deadline of 2 s (--deadline-s) passed while the "
            "window",
        ),
        (5.0, "1", "read timeout=1"),  # one answer slower than the whole deadline
    ],
    ids=["many-slow-answers", "one-answer-past-the-deadline"],
)
def test_a_slow_github_stops_the_bisect_at_its_deadline_as_exit_3(
    tmp_path: Path, delay_s: float, deadline_s: str, says: str
) -> None:
    commits = [
        {
            "sha": _sha(n),
            "message": f"Change {n}",
            "files": [{"filename": "torch/nn/functional.py", "patch": "@@ -1 +1 @@\n-a\n+b\n"}],
        }
        for n in range(12)
    ]
    state = tmp_path / "state"
    with OddGitHub() as gh:
        gh.add_commits(REPO, BASE, _sha(11), commits)
        gh.delay_s = delay_s
        env = {
            **os.environ,
            "SPYRE_CI_STATE_DIR": str(state),
            "SPYRE_CI_GITHUB_URL": gh.url,
            "SPYRE_CI_GITHUB_TOKEN": gh.token,
        }
        done = spyre_ci(
            "bisect", "--specs", str(GLU_SPEC), "--last-good", BASE, "--first-bad", _sha(11),
            "--variant", GLU, "--deadline-s", deadline_s, env=env, timeout=120,
        )  # fmt: skip
        asked = len(gh.find("GET", r"/repos/pytorch/pytorch/commits/"))

    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if "infrastructure error" in ln]
    assert line.startswith("spyre-ci: infrastructure error (not a test result): the bisect stopped")
    assert says in line, line
    assert asked < 4  # of 12 commits' files: it stopped instead of waiting on all of them
    assert not (state / "bisect" / f"{BASE[:12]}-{_sha(11)[:12]}.json").exists()


def test_a_deadline_that_is_not_a_time_is_bad_input(tmp_path: Path) -> None:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    done = spyre_ci(
        "bisect", "--last-good", BASE, "--first-bad", _sha(1), "--variant", GLU,
        "--deadline-s", "0", env=env,
    )  # fmt: skip
    assert done.returncode == 2 and "--deadline-s 0: must be more than 0" in done.stderr
