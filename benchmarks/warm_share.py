"""The same change run again: how soon its first test starts and how long the run takes, with
the shared warm runner (the default) and without it (`SPYRE_CI_WARM_IDLE_S=0`).

    .venv/bin/python benchmarks/warm_share.py [--repeat 3] [--out FILE]

Each mode gets a fresh state directory and a fresh place for its zygotes (the bundled
Inventory of the installed torch serves both). It runs the README's first command
(`spyre-ci run --diff examples/changes/glu_batch_check.patch`) `--repeat` times in a row, each
a new `spyre-ci` process, and times, from the process's start: its first test's start (the
first `start` line in a shard's results file, polled every 10 ms) and its end. Run 1 starts
with no zygote in both modes; the runs after it are what sharing is for. Records
`benchmarks/results/warm_share.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "warm_share.json"
PATCH = REPO / "examples" / "changes" / "glu_batch_check.patch"


def first_start(out: Path) -> bool:
    for results in out.glob("work/*/shard-*/*.jsonl"):
        try:
            if '"event": "start"' in results.read_text():
                return True
        except OSError:
            continue
    return False


def one_run(env: dict[str, str], out: Path) -> dict[str, object]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workflows", "run", "--diff", str(PATCH), "--out", str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    first: float | None = None
    while proc.poll() is None:
        if first is None and first_start(out):
            first = time.perf_counter() - started
        time.sleep(0.01)
    wall = time.perf_counter() - started
    output = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 1:  # the glu edit breaks 14 variants: exit 1
        raise SystemExit(f"spyre-ci run exited {proc.returncode}:\n{output[-3000:]}")
    return {"first_test_s": round(first or wall, 2), "wall_s": round(wall, 2)}


def mode(name: str, idle: str, work: Path, repeat: int) -> list[dict[str, object]]:
    state = work / f"state-{name}"
    state.mkdir()
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(state),
        "SPYRE_CI_WARM_IDLE_S": idle,
        "SPYRE_CI_WARM_DIR": str(Path(tempfile.mkdtemp(prefix="w-", dir="/tmp"))),
    }
    runs = []
    try:
        for i in range(repeat):
            runs.append(one_run(env, work / f"out-{name}-{i}"))
            print(name, i + 1, runs[-1], file=sys.stderr)
    finally:
        from workflows.runner import warm_share

        warm_share.stop_every(Path(env["SPYRE_CI_WARM_DIR"]))
        shutil.rmtree(env["SPYRE_CI_WARM_DIR"], ignore_errors=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-warm-share-"))
    load_before = os.getloadavg()
    shared = mode("shared", "600", work, args.repeat)
    private = mode("private", "0", work, args.repeat)
    later_shared = [float(str(r["wall_s"])) for r in shared[1:]]
    later_private = [float(str(r["wall_s"])) for r in private[1:]]
    result = {
        "name": "warm_share",
        "what": "spyre-ci run of the README's glu edit, again in new processes: shared zygotes "
        "(default) against each process's own (SPYRE_CI_WARM_IDLE_S=0)",
        "command": f".venv/bin/python benchmarks/warm_share.py --repeat {args.repeat}",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}"
        f"; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after",
        "value": round(statistics.median(later_shared), 2) if later_shared else None,
        "unit": "s, median wall time of a run after the first (shared zygotes)",
        "first_test_after_the_first_run_s": {
            "shared": round(
                statistics.median(float(str(r["first_test_s"])) for r in shared[1:]), 2
            ),
            "private": round(
                statistics.median(float(str(r["first_test_s"])) for r in private[1:]), 2
            ),
        },
        "wall_after_the_first_run_s": {
            "shared": round(statistics.median(later_shared), 2) if later_shared else None,
            "private": round(statistics.median(later_private), 2) if later_private else None,
        },
        "notes": "first_test_s counts from the process's start: the CLI's imports and the "
        "plan (the Inventory and the shipped trace read, about 0.7 s of CPU) come before "
        "any fork; "
        "the fork from a ready zygote itself is immediate. Run 1 of each mode starts its "
        "zygotes (the change's and, for the A/B, the installed torch's).",
        "runs": {"shared": shared, "private": private},
    }
    shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
