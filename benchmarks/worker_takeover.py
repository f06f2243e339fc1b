"""Time from SIGKILL of a worker running a shard to another worker holding the shard's lease.

    .venv/bin/python benchmarks/worker_takeover.py [--repeat N] [--lease-ttl SECONDS]

Runs the real SIGKILL test of `tests/e2e/test_worker_takeover.py`
(a private redis-server, two `spyre-ci worker --concurrency 1` processes, a one-shard run of
twelve one-second tests; the main process of the worker holding the lease is killed once one
test has finished) with the production lease (30 s unless given), `--repeat` times (default 3),
and reads the `takeover_s` property from its JUnit. Records the median in
`benchmarks/results/worker_takeover.json`. Needs `redis-server` on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST = (
    "tests/e2e/test_worker_takeover.py::"
    "test_a_killed_worker_s_shard_is_taken_over_within_two_leases"
)
RESULT = REPO / "benchmarks" / "results" / "worker_takeover.json"


def one_takeover(lease_ttl: float, work: Path, n: int) -> float:
    junit = work / f"takeover-{n}.xml"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n0",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            f"--basetemp={work / f'tmp-{n}'}",
            TEST,
        ],
        cwd=REPO,
        env={**os.environ, "SPYRE_CI_LEASE_TTL": f"{lease_ttl:g}"},
        capture_output=True,
        text=True,
    )
    if ran.returncode != 0:
        raise SystemExit(f"the takeover test failed:\n{ran.stdout[-4000:]}\n{ran.stderr[-2000:]}")
    for prop in ET.parse(junit).iter("property"):
        if prop.get("name") == "takeover_s":
            return float(prop.get("value", "nan"))
    raise SystemExit(f"{junit}: no takeover_s property")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lease-ttl", type=float, default=30.0, help="seconds (default 30)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="takeover-") as tmp:
        times = [one_takeover(args.lease_ttl, Path(tmp), n) for n in range(args.repeat)]
    import torch

    ttl = args.lease_ttl
    record = {
        "name": "worker_takeover",
        "value": round(statistics.median(times), 1),
        "unit": "s from SIGKILL of a worker's main process to another worker holding its shard",
        "runs_s": [round(t, 1) for t in times],
        "lease_ttl_s": ttl,
        "heartbeat_s": round(ttl / 3, 1),
        "sweep_s": round(ttl / 2, 1),
        "bound_s": f"between about {ttl * 2 / 3:g} and {ttl * 1.5:g} s plus pickup: the lease "
        "outlives the last heartbeat by 2/3 to 1 lease, then a sweep within half a lease",
        "command": " ".join(
            [".venv/bin/python benchmarks/worker_takeover.py"]
            + ([f"--repeat {args.repeat}"] if args.repeat != 3 else [])
            + ([f"--lease-ttl {ttl:g}"] if ttl != 30.0 else [])
        ),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.platform()}, "
        f"python {platform.python_version()}, torch {torch.__version__}; load average "
        f"{load:.1f} at the start (shared with other jobs)",
        "notes": "Median of the runs of the real e2e test (private redis-server, two real "
        "Celery workers of one pool process each, one shard of twelve 1-s tests, the lease "
        "holder's main process killed with SIGKILL once one test finished). Takeover means the "
        "other worker acquired the shard's lease (its test process starts right after); the "
        "run then completes with each of the 12 variants recorded once. Without leases the "
        "shard waited for the broker's visibility timeout (5 h).",
    }
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
