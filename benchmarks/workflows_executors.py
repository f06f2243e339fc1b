"""Executor benchmarks: the same plan with 1 and 2 worker processes, embedded and on Celery.

    .venv/bin/python benchmarks/workflows_executors.py [--repeat N]

Workload: `benchmarks/specs/bench_ops.yaml` (about 480 variants), run in full with no reruns or
expansion so every executor runs exactly the same tests. Records
`benchmarks/results/workflows_executors.json`:
- scaling efficiency = T(1 process) / (2 x T(2 processes)), embedded executor;
- orchestration overhead = T(Celery, 2 processes) / T(embedded, 2 processes) - 1.
Each figure is the median of `--repeat` runs (default 3). Needs `redis-server` on PATH.
`--workload large` (~3,700 variants, `bench_ops_large.yaml`) records
`workflows_executors_large.json`: with the small one, each pytest subprocess's fixed start
(importing torch and expanding the specs, ~10 s) dominates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SPECS = {
    "small": REPO / "benchmarks" / "specs" / "bench_ops.yaml",
    "large": REPO / "benchmarks" / "specs" / "bench_ops_large.yaml",
}
SPEC = SPECS["small"]
RESULTS = REPO / "benchmarks" / "results"


def build_inventory(work: Path) -> Path:
    path = work / "bench-inventory.json.gz"
    subprocess.run(
        [sys.executable, "-m", "workflows", "inventory", "--specs", str(SPEC), "--out", str(path)],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    return path


def request(run_id: str, inventory: Path, out: Path, shards: int):  # type: ignore[no-untyped-def]
    from contracts.event import TriggerEvent
    from workflows.run import run_model

    event = TriggerEvent(
        kind="nightly",
        delivery_id=run_id,
        repo="pytorch/pytorch",
        head_sha="0" * 40,
        files_complete=False,
        source="cli",
    )
    return run_model.RunRequest(
        run_id=run_id,
        event=event,
        out_dir=str(out),
        inventory=str(inventory),
        specs=(str(SPEC),),
        full=True,
        holdout=0.0,
        shards=shards,
        rerun_failures=False,
        expand=False,
    )


def time_embedded(inventory: Path, work: Path, jobs: int, tag: str) -> tuple[float, int]:
    from workflows.drivers import embedded
    from workflows.run.context import RunContext
    from workflows.settings import Settings
    from workflows.stores.history import SQLiteHistory

    history = SQLiteHistory(work / f"state-{tag}" / "history.sqlite3")
    ctx = RunContext.open(Settings.from_env(), history)
    started = time.perf_counter()
    finished = embedded.run(
        request(tag, inventory, work / tag, jobs), ctx, jobs=jobs, show_progress=False
    )
    return time.perf_counter() - started, len(finished.outcomes)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def time_celery(inventory: Path, work: Path, concurrency: int, tag: str) -> tuple[float, int]:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis_proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "SPYRE_CI_REDIS_URL": url,
        "SPYRE_CI_STATE_DIR": str(work / f"state-{tag}"),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "workflows", "worker", "--concurrency", str(concurrency)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from workflows.drivers import distributed
        from workflows.stores.history import RedisHistory

        history = RedisHistory(url)
        # Start the clock once the worker has declared its queue (it is consuming).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _worker_ready(url):
            time.sleep(0.5)
        started = time.perf_counter()
        distributed.submit(request(tag, inventory, work / tag, concurrency), url)
        while True:
            run = history.get_run(tag)
            if run is not None and run.state == "completed":
                break
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
        return elapsed, int(run.summary["ran"])
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        redis_proc.terminate()
        redis_proc.wait(timeout=10)


def _worker_ready(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url).exists("_kombu.binding.celery"))
    except redis.RedisError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--workload",
        choices=sorted(SPECS),
        default="small",
        help="small: ~500 variants (startup-bound); large: ~3,700 variants",
    )
    args = parser.parse_args()
    global SPEC
    SPEC = SPECS[args.workload]
    if shutil.which("redis-server") is None:
        print("redis-server is not on PATH", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-bench-"))
    inventory = build_inventory(work)
    one, two, celery = [], [], []
    ran = set()
    for i in range(args.repeat):
        t, n = time_embedded(inventory, work, 1, f"emb1-{i}")
        one.append(t)
        ran.add(n)
        t, n = time_embedded(inventory, work, 2, f"emb2-{i}")
        two.append(t)
        ran.add(n)
        t, n = time_celery(inventory, work, 2, f"cel2-{i}")
        celery.append(t)
        ran.add(n)
        print(
            f"round {i}: 1 proc {one[-1]:.1f} s, 2 procs {two[-1]:.1f} s, "
            f"celery 2 procs {celery[-1]:.1f} s",
            file=sys.stderr,
        )
    t1, t2, tc = (statistics.median(x) for x in (one, two, celery))
    efficiency = t1 / (2 * t2)
    overhead = tc / t2 - 1
    record = {
        "name": "workflows_executors",
        "value": round(efficiency, 3),
        "unit": "scaling efficiency (T1 / (2 x T2))",
        "command": ".venv/bin/python benchmarks/workflows_executors.py --repeat "
        f"{args.repeat} --workload {args.workload}",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}",
        "notes": f"full run of {SPEC.relative_to(REPO)}, no reruns or expansion; "
        "medians; wall time includes plan, shards and finish (History, exports)",
        "variants_per_run": sorted(ran),
        "embedded_1_process_s": [round(x, 2) for x in one],
        "embedded_2_processes_s": [round(x, 2) for x in two],
        "celery_2_processes_s": [round(x, 2) for x in celery],
        "scaling_efficiency": round(efficiency, 3),
        "celery_overhead": round(overhead, 4),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    suffix = "" if args.workload == "small" else f"_{args.workload}"
    (RESULTS / f"workflows_executors{suffix}.json").write_text(
        json.dumps(record, indent=2) + "\n", encoding="utf-8"
    )
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
