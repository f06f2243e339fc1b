"""Worker throughput: docs-only runs (plan, then finish, no test) a Celery worker completes
per second, and the worker CPU each one costs.

    .venv/bin/python benchmarks/worker_throughput.py [--runs 600] [--workers 2]
        [--concurrency 1] [--record FILE | --no-record]

A private redis-server (appendonly, `appendfsync everysec`: the production settings), a tiny
Inventory (tests/workflows/data/tiny.yaml), `--workers` worker processes started from this
checkout (`python -m workflows worker`, so a copy of this script in a git worktree measures
that revision). Once every worker is up, `--runs` docs-only push requests (each its own run
id and sha) are sent through `workflows.drivers.distributed.submit`, as the intake does; the figure
is the time from the first send to the last run recorded final in History. CPU is the
workers' user + system time (their pool processes included) over the same span.

This is the ceiling the soak's flood meets (benchmarks/soak.py): at 50 deliveries/s the
workers must finish 50 runs/s, on cores they share with the relay and Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "worker_throughput.json"
TINY_SPEC = ROOT / "tests" / "workflows" / "data" / "tiny.yaml"
FINAL = {"completed", "held", "infra-error", "forgotten"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system time of a process and of its children that it has waited for, plus its
    live children's (the pool processes of a Celery worker)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    try:
        out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
        pids += [
            int(c) for c, p in (line.split() for line in out.stdout.splitlines()) if int(p) == pid
        ]
    except (OSError, ValueError):
        pass
    for one in pids:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(") ", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=600, help="docs-only runs to send (600)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--concurrency", type=int, default=1, help="pool size per worker (1)")
    parser.add_argument(
        "--real-every",
        type=int,
        default=0,
        metavar="N",
        help="one run in N is the softmax push, which runs tests of the tiny spec set, as in "
        "the soak (default 0: docs-only runs only)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="give up after SECONDS (900)")
    parser.add_argument("--record", type=Path, default=RESULTS, help="result file")
    parser.add_argument("--no-record", action="store_true", help="print only")
    parser.add_argument("--name", default="worker_throughput", help="record name")
    args = parser.parse_args()
    if args.runs < 1 or args.workers < 1 or args.concurrency < 1:
        parser.error("--runs, --workers and --concurrency must be at least 1")
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not on the PATH")

    work = Path(tempfile.mkdtemp(prefix="throughput-"))
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    os.environ.update(SPYRE_CI_REDIS_URL=url, SPYRE_CI_STATE_DIR=str(work / "state"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (work / "redis").mkdir()
    redis_proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(work / "redis")],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    workers: list[subprocess.Popen[bytes]] = []
    load_before = os.getloadavg()
    try:
        import redis

        client = redis.Redis.from_url(url, decode_responses=True)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        inventory = work / "tiny.json.gz"
        subprocess.run(
            [sys.executable, "-m", "workflows", "inventory", "--specs", str(TINY_SPEC),
             "--out", str(inventory)],
            check=True, cwd=ROOT, env=env, capture_output=True,
        )  # fmt: skip
        for i in range(args.workers):
            log = open(work / f"worker-{i}.log", "wb")  # noqa: SIM115 - closed with the process
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "workflows",
                        "worker",
                        "--concurrency",
                        str(args.concurrency),
                        "--name",
                        f"tp-w{i}",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            )
        deadline = time.monotonic() + 120
        while not all(
            client.exists(f"spyre-ci:worker:alive:celery@tp-w{i}") for i in range(args.workers)
        ):
            if time.monotonic() > deadline:
                raise SystemExit(f"workers did not start; see {work}/worker-*.log")
            time.sleep(0.2)
        time.sleep(2)  # every pool process forked and listening

        from relay.events import normalize
        from workflows.drivers import distributed
        from workflows.drivers.intake_bridge import request_for_event
        from workflows.settings import Settings

        settings = Settings.from_env()

        docs = json.loads((ROOT / "examples/events/push_docs_only.json").read_text())
        real = json.loads((ROOT / "examples/events/push_softmax_kernel.json").read_text())
        requests = []
        for i in range(args.runs):
            template = real if args.real_every and i % args.real_every == 0 else docs
            payload = json.loads(json.dumps(template["payload"]))
            sha = (uuid.uuid4().hex * 2)[:40]
            payload["after"] = payload["head_commit"]["id"] = payload["commits"][-1]["id"] = sha
            event = normalize("push", payload, f"tp-{i}-{uuid.uuid4().hex[:8]}")
            requests.append(
                request_for_event(
                    event, work / "runs", inventory, specs=(str(TINY_SPEC),), settings=settings
                )
            )
        cpu0 = sum(cpu_seconds(w.pid) for w in workers)
        t0 = time.monotonic()
        for request in requests:
            distributed.submit(request)
        sent_s = time.monotonic() - t0
        ids = [r.run_id for r in requests]
        final = 0
        tenths: list[float] = []  # when each further tenth of the runs was final
        while time.monotonic() - t0 < args.timeout:
            pipe = client.pipeline(transaction=False)
            for run_id in ids:
                pipe.get(f"spyre-ci:history:run:{run_id}")
            states = [json.loads(b).get("state") if b else None for b in pipe.execute()]
            final = sum(s in FINAL for s in states)
            while len(tenths) < 10 and final >= len(ids) * (len(tenths) + 1) / 10:
                tenths.append(time.monotonic() - t0)
            if final == len(ids):
                break
            time.sleep(0.25)
        elapsed = time.monotonic() - t0
        cpu = sum(cpu_seconds(w.pid) for w in workers) - cpu0
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
        redis_proc.terminate()
        redis_proc.wait(timeout=10)
    if final < len(ids):
        print(f"only {final} of {len(ids)} runs final after {args.timeout:.0f} s; logs in {work}")
        return 1
    load_after = os.getloadavg()
    rate = len(ids) / elapsed
    record = {
        "name": args.name,
        "value": round(rate, 1),
        "unit": "runs completed per second"
        + (" (docs-only: plan + finish, no test)" if not args.real_every else ""),
        "command": "python benchmarks/worker_throughput.py "
        f"--runs {args.runs} --workers {args.workers} --concurrency {args.concurrency}"
        + (f" --real-every {args.real_every}" if args.real_every else ""),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, {platform.platform()}, python "
        f"{platform.python_version()}; load average "
        f"{'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in load_after)} after",
        "runs": len(ids),
        "seconds": round(elapsed, 2),
        "send_seconds": round(sent_s, 2),
        "worker_cpu_ms_per_run": round(cpu / len(ids) * 1000, 1),
        # runs/s within each tenth of the runs: a rate that falls as runs pile up in Redis
        # and History is a cost that grows with them
        "rate_per_tenth": [
            round(len(ids) / 10 / (b - a), 1) for a, b in zip([0.0, *tenths], tenths, strict=False)
        ],
        "real_every": args.real_every,
        "workers": args.workers,
        "concurrency": args.concurrency,
    }
    print(json.dumps(record, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    if not args.no_record:
        records = json.loads(args.record.read_text()) if args.record.exists() else {}
        records = (
            records if isinstance(records, dict) and "variants" in records else {"variants": []}
        )
        records["variants"] = [v for v in records["variants"] if v.get("name") != args.name]
        records["variants"].append(record)
        records.update(
            {k: record[k] for k in ("name", "value", "unit", "command", "date", "machine")}
        )
        args.record.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
