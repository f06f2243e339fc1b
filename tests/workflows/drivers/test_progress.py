from __future__ import annotations

import io

from suites.model import Outcome, Status
from workflows.drivers.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _passed(n: int) -> Outcome:
    return Outcome(f"s::t::op{n}::float32", Status.PASSED, 0.1)


def test_the_eta_leaves_out_the_start_and_says_nothing_until_it_knows() -> None:
    clock = Clock()
    progress = Progress(200, io.StringIO(), clock=clock)
    assert progress.line().endswith("ETA --:--")
    clock.now = 15.0  # processes start and import torch: no test's time
    progress(_passed(0))
    assert progress.line().endswith("ETA --:--")  # one test is no pace
    for i in range(1, 21):
        clock.now = 15.0 + 0.1 * i
        progress(_passed(i))
    # 20 tests in 2 s after the first: 179 left take about 18 s, not 179 x 15 s / 21
    assert progress.line().endswith("ETA 00:17"), progress.line()
    assert "00:17 elapsed" in progress.line()


def test_the_eta_is_zero_when_everything_is_done() -> None:
    clock = Clock()
    progress = Progress(1, io.StringIO(), clock=clock)
    clock.now = 30.0
    progress(_passed(0))
    assert progress.line().endswith("1/1 tests, 0 failed, 00:30 elapsed, ETA 00:00")


def test_reruns_are_a_phase_of_their_own_never_counted_twice() -> None:
    """14 failures, then their 14 reruns: the plan's total stays, its failures stay 14, and
    the reruns are counted apart ("28 failed" for 14 and a growing total were what it was)."""
    clock = Clock()
    progress = Progress(20, io.StringIO(), clock=clock)
    for i in range(20):
        progress(Outcome(f"s::t::op{i}::float32", Status.FAILED if i < 14 else Status.PASSED, 0.1))
    progress.start_phase("rerun", 14)
    for i in range(14):
        progress(Outcome(f"s::t::op{i}::float32", Status.FAILED, 0.1))
    line = progress.line()
    assert "20/20 tests, 14 failed" in line and line.endswith("; rerun 14/14, 14 failed")
    assert (progress.total, progress.failed) == (20, 14)
