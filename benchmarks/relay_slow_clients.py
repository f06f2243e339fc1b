"""/healthz latency while slow clients hold connections to `spyre-ci serve`.

Starts a private redis-server and `spyre-ci serve` (its default front settings unless
`--serve-arg` says otherwise), opens `--clients` sockets that each send a webhook request
head (Content-Length 4096) and then one body byte a second, and meanwhile asks `GET /healthz`
every 0.2 s on a fresh connection, each probe waiting at most `--probe-timeout` seconds.
Records the probes' latency (p50/p99/max, a timed-out probe counts as the timeout) and how
long the server took to cut the slow clients (the body read timeout).

    .venv/bin/python benchmarks/relay_slow_clients.py [--clients 64] [--seconds 20]
        [--serve-arg=--body-timeout=10 ...] [--no-record]
Records benchmarks/results/relay_slow_clients.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "relay_slow_clients.json"
SECRET = "benchmark-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port} after {seconds} s")


def healthz(port: int, timeout: float) -> tuple[float, str]:
    """(seconds, outcome) of one GET /healthz on a fresh connection."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(max(0.01, timeout - (time.perf_counter() - started)))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            answer = sock.recv(64)
        outcome = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed"
    except TimeoutError:
        return timeout, "timeout"
    except OSError as exc:
        return time.perf_counter() - started, type(exc).__name__
    return time.perf_counter() - started, outcome


class SlowClient(threading.Thread):
    """One connection: a webhook request head, then a body byte a second until cut."""

    def __init__(self, port: int, body_bytes: int = 4096) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.body_bytes = body_bytes
        self.connected_at = 0.0
        self.cut_after: float | None = None
        self.answer = b""
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        except OSError:
            self.answer = b"connect failed"
            return
        self.connected_at = time.monotonic()
        with sock:
            sock.sendall(
                b"POST /github/webhook HTTP/1.1\r\nHost: bench\r\n"
                b"Content-Type: application/json\r\nX-GitHub-Event: push\r\n"
                + f"Content-Length: {self.body_bytes}\r\n\r\n".encode()
            )
            sock.settimeout(1.0)
            for _ in range(self.body_bytes):
                if self.stop.is_set():
                    return
                try:
                    sock.sendall(b"{")
                    data = sock.recv(256)  # waits up to 1 s: the byte-a-second pace
                except TimeoutError:
                    continue
                except OSError:
                    data = b""
                self.answer = data
                self.cut_after = time.monotonic() - self.connected_at
                return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to probe")
    parser.add_argument("--probe-timeout", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--serve-arg", action="append", default=[], help="more serve options")
    parser.add_argument("--no-record", action="store_true", help="print, do not write JSON")
    args = parser.parse_args(argv)

    redis_bin = shutil.which("redis-server")
    if redis_bin is None:
        raise SystemExit("redis-server is not on the PATH")
    with tempfile.TemporaryDirectory() as tmp:
        redis_port, port = free_port(), free_port()
        redis = subprocess.Popen(
            [redis_bin, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPYRE_CI_")}
        env.update(
            SPYRE_CI_WEBHOOK_SECRET=SECRET,
            SPYRE_CI_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        )
        command = [sys.executable, "-m", "workflows", "serve", "--port", str(port)]
        command += ["--workers", str(args.workers), "--threads", str(args.threads)]
        command += ["--log-level", "error", *args.serve_arg]
        serve = subprocess.Popen(command, cwd=ROOT, env=env)
        try:
            wait_listening(redis_port, 10)
            wait_listening(port, 30)
            time.sleep(1.0)  # every worker booted
            baseline = [healthz(port, args.probe_timeout)[0] for _ in range(20)]
            clients = [SlowClient(port) for _ in range(args.clients)]
            for client in clients:
                client.start()
            time.sleep(1.0)  # all connected and sending
            probes: list[tuple[float, str]] = []
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                probes.append(healthz(port, args.probe_timeout))
                time.sleep(0.2)
            cut = [c.cut_after for c in clients if c.cut_after is not None]
            answers: dict[str, int] = {}
            for client in clients:
                key = client.answer.split(b"\r\n", 1)[0].decode("latin-1") or "closed"
                if client.cut_after is None:
                    key = "still connected"
                answers[key] = answers.get(key, 0) + 1
                client.stop.set()
        finally:
            serve.terminate()
            serve.wait(timeout=30)
            redis.terminate()
            redis.wait(timeout=10)

    latencies = sorted(seconds for seconds, _ in probes)
    outcomes: dict[str, int] = {}
    for _, outcome in probes:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def pct(values: list[float], q: float) -> float:
        return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 2)

    result: dict[str, Any] = {
        "name": "relay_healthz_under_slow_clients",
        "value": pct(latencies, 0.99),
        "unit": f"ms p99 /healthz latency with {args.clients} slow clients connected",
        "command": " ".join(
            [".venv/bin/python benchmarks/relay_slow_clients.py"]
            + [f"--clients {args.clients}", f"--seconds {args.seconds:g}"]
            + [f"--serve-arg={a}" for a in args.serve_arg]
        ),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": (
            f"{os.cpu_count()} cores ({platform.machine()}), {platform.system()} "
            f"{platform.release()}, shared with other work; load average "
            f"{os.getloadavg()[0]:.1f} after the run"
        ),
        "server": " ".join(command[2:]).replace(str(port), "PORT"),
        "healthz_without_slow_clients_p50_ms": pct(sorted(baseline), 0.5),
        "healthz": {
            "probes": len(probes),
            "p50_ms": pct(latencies, 0.5),
            "p99_ms": pct(latencies, 0.99),
            "max_ms": pct(latencies, 1.0),
            "probe_timeout_s": args.probe_timeout,
            "outcomes": outcomes,
        },
        "slow_clients": {
            "clients": args.clients,
            "cut": len(cut),
            "cut_after_s_min": round(min(cut), 2) if cut else None,
            "cut_after_s_max": round(max(cut), 2) if cut else None,
            "answers": answers,
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if not args.no_record:
        RESULTS.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
