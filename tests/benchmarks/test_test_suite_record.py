"""`benchmarks/test_suite.py` reads pytest's own summary and slowest-tests lines."""

from __future__ import annotations

from benchmarks.machine import describe, relative
from benchmarks.test_suite import tiers

CI_OUTPUT = """\
============================= slowest 20 durations =============================
6.65s call     tests/a.py::test_one
0.50s setup    tests/b.py::test_two
=========== 1847 passed, 1 warning in 153.68s (0:02:33) ===========
--- the long end-to-end proofs (-m long) ---
============================= slowest 20 durations =============================
47.60s call     tests/c.py::test_three[hangs]
(2 durations < 0.005s hidden.  Use -vv to show these durations.)
========== 129 passed, 1847 deselected in 227.50s (0:03:47) ==========
"""


def test_each_tier_s_counts_seconds_and_slowest_tests_are_read_in_order() -> None:
    default, long = tiers(CI_OUTPUT)
    assert default == {
        "counts": "1847 passed, 1 warning",
        "seconds": 153.68,
        "slowest": [
            "6.65s call     tests/a.py::test_one",
            "0.50s setup    tests/b.py::test_two",
        ],
    }
    assert long["counts"] == "129 passed, 1847 deselected"
    assert long["seconds"] == 227.5
    assert long["slowest"] == ["47.60s call     tests/c.py::test_three[hangs]"]


def test_a_quiet_run_s_summary_without_rules_and_a_failed_one_are_read() -> None:
    found = tiers("..F\n1 failed, 2 passed in 3.00s\n")
    assert found == [{"counts": "1 failed, 2 passed", "seconds": 3.0, "slowest": []}]
    assert tiers("nothing ran here\n") == []


def test_the_machine_line_has_the_cpu_and_a_speed_probe() -> None:
    found = describe()
    assert found["cores"] and found["model"]
    assert 0 < found["probe_s"] < 60
    assert relative(10.0, 0.5) == 20.0
