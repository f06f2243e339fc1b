"""What a run whose tests cannot start leaves behind: its exit code, and whether the next
selection changes.

    .venv/bin/python benchmarks/trust_broken_run.py [--jobs 2]

In one fresh state directory: the README's main job (softmax push) with a 64 MB address-space
limit, so no test process can import torch; then `spyre-ci select` of the same push. In a
second fresh state directory: the same `select` alone. The two selections must be the same
(the broken run taught History nothing). Before infrastructure faults were their own
outcome, such a run recorded every variant as a failure and the next softmax push selected
826 variants instead of 159. Records `benchmarks/results/trust_broken_run.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "trust_broken_run.json"
EVENT = "examples/events/push_softmax_kernel.json"


def spyre_ci(state: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "workflows", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return done, time.perf_counter() - started


def selected(state: Path, out: Path) -> list[str]:
    done, _ = spyre_ci(state, "select", "--event", EVENT, "--plan-out", str(out))
    if done.returncode != 0:
        raise SystemExit(f"select failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return sorted(s["id"] for s in json.loads(out.read_text())["selected"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-trust-"))
    shared = work / "inventories"
    shared.mkdir()
    states = {name: work / f"state-{name}" for name in ("broken", "fresh")}
    for state in states.values():
        state.mkdir()
        (state / "inventories").symlink_to(shared)  # one Inventory build for both
    broken, broken_s = spyre_ci(
        states["broken"],
        "run",
        "--event",
        EVENT,
        "--memory-mb",
        "64",
        "--jobs",
        str(args.jobs),
        "--no-progress",
        "--out",
        str(work / "out-broken"),
    )
    after = selected(states["broken"], work / "plan-after.json")
    fresh = selected(states["fresh"], work / "plan-fresh.json")
    record = {
        "what": "a run whose test processes cannot start (64 MB limit), then the next selection",
        "command": "python benchmarks/trust_broken_run.py --jobs " + str(args.jobs),
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "broken_run": {
            "exit_code": broken.returncode,
            "wall_s": round(broken_s, 1),
            "says_infrastructure": "INFRASTRUCTURE ERROR" in broken.stdout,
        },
        "next_selection": {"value": len(after), "unit": "variants"},
        "selection_with_fresh_history": {"value": len(fresh), "unit": "variants"},
        "same_selection": after == fresh,
    }
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    return 0 if after == fresh and broken.returncode == 3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
