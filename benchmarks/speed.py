"""The warm runner's figures on this machine: shard start cold vs warm, the main job with and
without the zygote, a failing vs a passing variant.

    .venv/bin/python benchmarks/speed.py [--repeat 3] [--jobs 2] [--skip-main-job]

* shard start: time from the `run_shard` call to the first test result of a one-variant
  shard (`ops::compare_cpu::softmax::float32`, bundled specs), cold (`warm=False`) and
  warm (forked from a zygote built beforehand; its build is recorded on its own); medians.
* main job: `spyre-ci run --event examples/events/push_softmax_kernel.json --jobs 2` with
  `SPYRE_CI_ZYGOTE=1` and `=0`, alternated, each with a fresh History and the Inventory
  built beforehand and shared (as `benchmarks/workflows_main_job.py`); medians.
* failing vs passing: wall time of a warm one-variant shard of a failing variant and of a
  passing one (tests/workflows/data/tiny.yaml: `pow` fails on spyre, `softmax` passes).

The load average is recorded with every figure: the machine is shared, timings are noisy.
Writes `benchmarks/results/speed.json`; the default run takes a few minutes.
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workflows import zygote  # noqa: E402
from workflows.shard_runner import PLUGIN, run_shard  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "speed.json"
TINY = REPO / "tests" / "workflows" / "data" / "tiny.yaml"
EVENT = REPO / "examples" / "events" / "push_softmax_kernel.json"
ONE = "ops::compare_cpu::softmax::float32"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def first_result_s(work: Path, ids: list[str], warm: bool, specs: list[str]) -> dict[str, Any]:
    """Seconds from the run_shard call to its first outcome, and to its end."""
    started = time.perf_counter()
    first: list[float] = []
    result = run_shard(
        "bench",
        ids,
        work,
        specs=specs,
        warm=warm,
        progress=lambda _: first.append(time.perf_counter() - started),
    )
    return {
        "first_result_s": round(first[0], 3) if first else None,
        "wall_s": round(time.perf_counter() - started, 3),
        "warm": result.warm_processes,
        "status": [o.status.value for o in result.outcomes],
        "test_s": [round(o.duration_s, 4) for o in result.outcomes],
        "load": load(),
    }


def shard_start(work: Path, repeat: int) -> dict[str, Any]:
    cold = [first_result_s(work / f"cold{i}", [ONE], False, []) for i in range(repeat)]
    built = time.perf_counter()
    zygote.prestart(PLUGIN, [])
    # The first warm shard waits for the zygote: what a worker's first shard pays.
    first_warm = first_result_s(work / "warm-first", [ONE], True, [])
    build_s = time.perf_counter() - built
    warm = [first_result_s(work / f"warm{i}", [ONE], True, []) for i in range(repeat)]
    cold_s = statistics.median(float(r["first_result_s"]) for r in cold)
    warm_s = statistics.median(float(r["first_result_s"]) for r in warm)
    return {
        "cold_first_result_s": cold_s,
        "warm_first_result_s": warm_s,
        "ratio_cold_over_warm": round(cold_s / warm_s, 1),
        "zygote_build_and_first_shard_s": round(build_s, 2),
        "runs": {"cold": cold, "first_warm": first_warm, "warm": warm},
    }


def failing_vs_passing(work: Path, repeat: int) -> dict[str, Any]:
    specs = [str(TINY)]
    zygote.prestart(PLUGIN, specs)
    first_result_s(work / "fp-warmup", ["tiny::compare_cpu::softmax::float32"], True, specs)
    runs: dict[str, list[dict[str, Any]]] = {"failing": [], "passing": []}
    ids = {
        "failing": "tiny::compare_cpu::pow::float32",
        "passing": "tiny::compare_cpu::softmax::float32",
    }
    for i in range(repeat):
        for kind, vid in ids.items():
            runs[kind].append(first_result_s(work / f"fp-{kind}{i}", [vid], True, specs))
    fail_s = statistics.median(float(r["wall_s"]) for r in runs["failing"])
    pass_s = statistics.median(float(r["wall_s"]) for r in runs["passing"])
    return {
        "failing_shard_wall_s": fail_s,
        "passing_shard_wall_s": pass_s,
        "ratio_failing_over_passing": round(fail_s / pass_s, 2),
        "ids": ids,
        "runs": runs,
    }


def main_job(work: Path, repeat: int, jobs: int) -> dict[str, Any]:
    inventories = work / "shared-inventories"
    inventories.mkdir()

    def state(name: str) -> Path:
        folder = work / f"state-{name}"
        folder.mkdir()
        (folder / "inventories").symlink_to(inventories)
        return folder

    built = state("build")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from pathlib import Path\n"
            "from workflows.inventory_cache import default_inventory\n"
            f"default_inventory(Path({str(built)!r}))",
        ],
        cwd=REPO,
        env={**os.environ, "SPYRE_CI_STATE_DIR": str(built)},
        check=True,
    )
    runs: dict[str, list[dict[str, Any]]] = {"zygote": [], "no_zygote": []}
    for i in range(repeat):
        for name, flag in (("zygote", "1"), ("no_zygote", "0")):
            folder = state(f"{name}{i}")
            out = work / f"out-{name}{i}"
            env = {**os.environ, "SPYRE_CI_STATE_DIR": str(folder), "SPYRE_CI_ZYGOTE": flag}
            command = [
                sys.executable, "-m", "workflows", "run", "--event", str(EVENT),
                "--out", str(out), "--jobs", str(jobs), "--no-progress",
            ]  # fmt: skip
            started = time.perf_counter()
            done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - started
            report = out / "run.json"
            summary = json.loads(report.read_text()) if report.exists() else {}
            runs[name].append(
                {
                    "wall_s": round(wall, 2),
                    "exit_code": done.returncode,
                    "ran": len(summary.get("results", [])),
                    "fell_back_cold": "warm runner unavailable" in done.stderr,
                    "load": load(),
                }
            )
    with_s = statistics.median(float(r["wall_s"]) for r in runs["zygote"])
    without_s = statistics.median(float(r["wall_s"]) for r in runs["no_zygote"])
    return {
        "with_zygote_s": with_s,
        "without_zygote_s": without_s,
        "ratio_without_over_with": round(without_s / with_s, 2),
        "command": f"spyre-ci run --event {EVENT.relative_to(REPO)} --jobs {jobs} "
        "--no-progress (SPYRE_CI_ZYGOTE=1 vs 0)",
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-main-job", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-speed-"))
    load_before = load()
    started = time.perf_counter()
    try:
        start = shard_start(work, args.repeat)
        failing = failing_vs_passing(work, max(args.repeat, 5))
    finally:
        zygote.stop_all()
    job = None if args.skip_main_job else main_job(work, max(1, args.repeat - 1), args.jobs)
    measurements: list[dict[str, Any]] = [
        {"name": "shard_start_cold", "value": start["cold_first_result_s"], "unit": "s"},
        {"name": "shard_start_warm", "value": start["warm_first_result_s"], "unit": "s"},
        {"name": "shard_start_ratio", "value": start["ratio_cold_over_warm"], "unit": "x"},
        {
            "name": "failing_over_passing_warm_shard",
            "value": failing["ratio_failing_over_passing"],
            "unit": "x",
        },
    ]
    if job is not None:
        measurements += [
            {"name": "main_job_with_zygote", "value": job["with_zygote_s"], "unit": "s"},
            {"name": "main_job_without_zygote", "value": job["without_zygote_s"], "unit": "s"},
        ]
    command = f".venv/bin/python benchmarks/speed.py --repeat {args.repeat} --jobs {args.jobs}"
    record: dict[str, Any] = {
        "name": "speed",
        "value": start["ratio_cold_over_warm"],
        "unit": "x (shard start to first result, cold / warm)",
        "command": command + (" --skip-main-job" if args.skip_main_job else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}",
        "measurements": measurements,
        "shard_start": start,
        "failing_vs_passing": failing,
        "main_job": job,
        "notes": (
            f"load average (1, 5, 15 min) {load_before} before, {load()} after; "
            f"{time.perf_counter() - started:.0f} s in all; medians"
        ),
    }
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("measurements", "notes")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
