"""Wall time of the main job on the softmax-kernel push against a full run, same machine.

    .venv/bin/python benchmarks/workflows_main_job.py [--jobs 2] [--skip-full]

Both go through `spyre-ci run` on the embedded executor with the bundled specs and the
cached Inventory of the installed torch, each with a fresh History (so no baseline: every
failure is new and gets rerun and expanded, as on a first run). Records
`benchmarks/results/workflows_main_job.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "workflows_main_job.json"
EVENTS = REPO / "examples" / "events"


def timed_run(name: str, args: list[str], work: Path, jobs: int) -> dict[str, object]:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(work / f"state-{name}")}
    inventories = work / "shared-inventories"
    inventories.mkdir(exist_ok=True)
    (work / f"state-{name}").mkdir(exist_ok=True)
    link = work / f"state-{name}" / "inventories"
    if not link.exists():
        link.symlink_to(inventories)  # one Inventory build, shared by both runs
    out = work / f"out-{name}"
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflows",
            "run",
            *args,
            "--out",
            str(out),
            "--jobs",
            str(jobs),
            "--no-progress",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    summary = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    print(result.stdout[-2000:], file=sys.stderr)
    return {
        "wall_s": round(elapsed, 1),
        "exit_code": result.returncode,
        "ran": len(summary.get("results", [])),
        "out": str(out),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-full", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-mainjob-"))
    # Build the Inventory first so neither timed run pays for it.
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(work / "state-warm")}
    (work / "shared-inventories").mkdir()
    (work / "state-warm").mkdir()
    (work / "state-warm" / "inventories").symlink_to(work / "shared-inventories")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from pathlib import Path\n"
            "from workflows.stores.inventory_cache import default_inventory\n"
            f"default_inventory(Path({str(work / 'state-warm')!r}))",
        ],
        cwd=REPO,
        env=env,
        check=True,
    )
    record: dict[str, object] = {
        "name": "workflows_main_job",
        "command": ".venv/bin/python benchmarks/workflows_main_job.py --jobs "
        f"{args.jobs}" + (" --skip-full" if args.skip_full else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}",
    }
    softmax = timed_run(
        "softmax", ["--event", str(EVENTS / "push_softmax_kernel.json")], work, args.jobs
    )
    record["softmax_push"] = softmax
    record["value"] = softmax["wall_s"]
    record["unit"] = "s (spyre-ci run on push_softmax_kernel.json)"
    if not args.skip_full:
        full = timed_run(
            "full", ["--event", str(EVENTS / "nightly.json"), "--full"], work, args.jobs
        )
        record["full_run"] = full
        record["ratio"] = round(float(softmax["wall_s"]) / float(full["wall_s"]), 4)
    record["notes"] = (
        "fresh History for each run; Inventory built beforehand and shared; "
        f"load average at end {os.getloadavg()[0]:.1f}"
    )
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
