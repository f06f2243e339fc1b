"""What an expected failure costs against a pass, per variant, through the pytest plugin.

    .venv/bin/python benchmarks/failure_cost.py [--count 40]

Takes `--count` variants the bundled Inventory expects to fail (`xfail`) and as many it
expects to pass, both of the `compare_cpu` template (first by id), runs each set in one
pytest process with the plugin, and compares the median per-variant time the plugin
reports. Records `benchmarks/results/failure_cost.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "failure_cost.json"


def run(ids: list[str], work: Path, name: str) -> dict[str, object]:
    ids_file, results = work / f"{name}.ids", work / f"{name}.jsonl"
    ids_file.write_text("\n".join(ids) + "\n", encoding="utf-8")
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "suites.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            "--spyre-ids",
            str(ids_file),
            "--spyre-results",
            str(results),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    wall = time.perf_counter() - started
    ends = [
        json.loads(line)
        for line in results.read_text(encoding="utf-8").splitlines()
        if '"end"' in line
    ]
    durations = [float(e["duration_s"]) for e in ends]
    return {
        "variants": len(ends),
        "statuses": sorted({e["status"] for e in ends}),
        "median_s": round(statistics.median(durations), 4),
        "total_s": round(sum(durations), 2),
        "process_wall_s": round(wall, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    args = parser.parse_args()
    from suites.model import Expectation, Inventory
    from workflows.settings import Settings
    from workflows.stores.inventory_cache import default_inventory

    inventory = Inventory.load(default_inventory(Settings.from_env().state_dir))
    variants = sorted(
        (v for v in inventory.variants if v.template == "compare_cpu"), key=lambda v: v.id
    )
    failing = [v.id for v in variants if v.expectation is Expectation.XFAIL][: args.count]
    passing = [v.id for v in variants if v.expectation is Expectation.PASS][: args.count]
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-failcost-"))
    fail, ok = run(failing, work, "xfail"), run(passing, work, "pass")
    record = {
        "what": "median per-variant time of expected failures against passes (compare_cpu)",
        "command": f"python benchmarks/failure_cost.py --count {args.count}",
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "xfail": fail,
        "pass": ok,
        "ratio": {
            "value": round(float(fail["median_s"]) / float(ok["median_s"]), 2),
            "unit": "failing / passing median",
            "aim": 1.5,
        },
    }
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
