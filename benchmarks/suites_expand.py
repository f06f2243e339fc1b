"""Time to expand the full bundled inventory in a fresh process, torch import included.

    python benchmarks/suites_expand.py [--runs 3]

Writes benchmarks/results/suites_expand.json (median wall time; CPU time alongside, since the
machine's 2 cores are shared).
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
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = "from suites.expand import expand, load_suites\nprint(len(expand(load_suites()).variants))"


def run_once() -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, int(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [run_once() for _ in range(args.runs)]
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    result = {
        "name": "suites_expand",
        "value": round(statistics.median(walls), 2),
        "unit": "s",
        "command": f"python benchmarks/suites_expand.py --runs {args.runs}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus (shared), python "
        f"{platform.python_version()}",
        "notes": "fresh process: import torch (registers spyre), op_db/python_ref_db/module_db, "
        "lint + expand of the bundled specs with fingerprints; aim < 10 s",
        "variants": runs[0][2],
        "runs_s": [round(w, 2) for w in walls],
        "cpu_s_median": round(statistics.median(cpus), 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    out = REPO / "benchmarks" / "results" / "suites_expand.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
