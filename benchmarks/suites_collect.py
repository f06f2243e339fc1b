"""Time for pytest to collect the full bundled inventory through the plugin.

    python benchmarks/suites_collect.py [--runs 3]

Runs `pytest -p suites.pytest_plugin --collect-only -q` (no ids file: every variant) in a
fresh process; writes benchmarks/results/suites_collect.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_once(work: Path) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "suites.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-q",
            "-o",
            "addopts=",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # The plugin builds its own items, so pytest's summary line does not count them: count the
    # node ids printed (`<suite>::<variant id>`).
    collected = sum(1 for line in out.stdout.splitlines() if line.count("::") >= 4)
    return wall, cpu, collected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        runs = [run_once(Path(work)) for _ in range(args.runs)]
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    result = {
        "name": "suites_collect",
        "value": round(statistics.median(walls), 2),
        "unit": "s",
        "command": f"python benchmarks/suites_collect.py --runs {args.runs}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus (shared), python "
        f"{platform.python_version()}",
        "notes": "pytest --collect-only of every bundled variant via -p suites.pytest_plugin, "
        "torch import and expansion included; aim < 20 s",
        "collected": runs[0][2],
        "runs_s": [round(w, 2) for w in walls],
        "cpu_s_median": round(statistics.median(cpus), 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    out = REPO / "benchmarks" / "results" / "suites_collect.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
