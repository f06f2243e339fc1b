"""`benchmarks/main_job_limits.py` reads a run's JUnit files: the bodies, the longest chain
(one variant's first run, rerun and A/B base, one after another) and where the wall went."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.main_job_limits import bodies_s, phases_s


def _junit(path: Path, cases: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = "".join(f'<testcase classname="ops" name="{n}" time="{t}"/>' for n, t in cases.items())
    path.write_text(f'<testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>')


def test_the_longest_chain_adds_one_variant_s_runs_and_is_not_the_longest_case(
    tmp_path: Path,
) -> None:
    _junit(tmp_path / "junit" / "shard-0.1.0.xml", {"a": 0.30, "b": 0.20})
    _junit(tmp_path / "junit" / "shard-1.1.0.xml", {"c": 0.05})
    _junit(tmp_path / "junit" / "rerun.1.0.xml", {"b": 0.15})
    total, cases, chain = bodies_s(tmp_path)
    assert cases == 4 and round(total, 2) == 0.70
    assert round(chain, 2) == 0.35  # b's first run and its rerun, longer than a alone


def test_phases_split_the_wall_at_the_first_test_process_and_the_last_junit_file(
    tmp_path: Path,
) -> None:
    shard = tmp_path / "work" / "run-1" / "shard-0"
    _junit(shard / "shard-0.1.0.xml", {"a": 0.1})
    (shard / "started_at").write_text("1000.250\n")
    os.utime(shard / "shard-0.1.0.xml", (1000.75, 1000.75))
    (tmp_path / "run.json").write_text("{}")
    os.utime(tmp_path / "run.json", (1000.8, 1000.8))
    assert phases_s(tmp_path, 1000.0) == {
        "before_tests": 0.25,
        "tests": 0.5,
        "after_tests": 0.05,
    }
