"""Soak: signed deliveries at a steady rate through relay -> intake -> Celery workers while
Redis is SIGKILLed and restarted twice and one worker is SIGKILLed and restarted.

    .venv/bin/python benchmarks/soak.py [--rate 50] [--minutes 10] [--workers 2]
        [--concurrency 1] [--real-every 200] [--drain-minutes 20] [--record FILE]

Recorded: the defaults with `--concurrency 1 --real-every 200 --drain-minutes 20` (the
issue's 10 min at 50/s, two workers with one pool process each, on 2 shared cores: it
drains about a minute after the last send); earlier runs are kept as `variants`.

Everything runs on loopback from a temporary folder (kept, its path printed: the logs of
every process are in `logs/`):

- a private `redis-server` with `appendonly yes`, `appendfsync everysec` (the production
  guidance, docs/relay.md). A SIGKILL of redis-server normally keeps what it acknowledged:
  it writes the AOF before replying, so the write is in the kernel's page cache and survives
  a process kill (with `everysec` a machine crash can lose up to a second). A request
  Redis was serving when killed gets no answer: the relay answers 503 (nothing recorded,
  a redelivery is accepted; GitHub does not redeliver on its own), Celery and the intake loop retry;
- `spyre-ci serve` (2 workers x 4 threads, webhook secret set);
- worker 0: `spyre-ci worker --intake --no-github` (pushes list their files, so GitHub is
  never needed), the others plain `spyre-ci worker`; each `--concurrency N`, a fixed
  `--name soak-wI` (a restarted worker comes back under its name, as a systemd unit would).

The client sends open-loop at `--rate` from threads over keep-alive HTTP: each delivery has
its own X-GitHub-Delivery id and head sha (so its own run). Most are docs-only pushes
(`examples/events/push_docs_only.json`: the selector plans no test); one in `--real-every`
is the softmax push (`examples/events/push_softmax_kernel.json`), which runs tests of the
tiny spec set (tests/workflows/data/tiny.yaml, 16 variants) with a tiny Inventory.

Faults: at 1/4 and 3/4 of the sending time redis-server is SIGKILLed and restarted on the
same port and folder 5 s later; at 1/2 the main process of a plain worker holding a shard's
lease (waiting up to 30 s for one) is SIGKILLed and restarted 5 s later. Recovery is
measured from the restart (Redis) or the kill (worker).

After sending, the script waits (at most `--drain-minutes`) for every accepted delivery's
run to reach a final state, then checks: each accepted delivery has exactly one run; each
refused one (503, connection error) left no delivery key and no run; completed runs with
tests hold an outcome for every planned variant, each once; no (run, variant) was started
twice in its shards' results files except a declared rerun or the documented re-run of the
test that was running on a killed worker. Records benchmarks/results/soak.json (or
`--record FILE`); `--no-record` prints only. Exit 1 if a result was lost or recorded twice.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from relay.signature import sign  # noqa: E402

SECRET = "soak-secret"
RESULTS = ROOT / "benchmarks" / "results" / "soak.json"
TINY_SPEC = ROOT / "tests" / "workflows" / "data" / "tiny.yaml"
SPYRE = str(Path(sys.executable).with_name("spyre-ci"))
HISTORY_RUNS = "spyre-ci:history:runs"
FINAL = {"completed", "held", "infra-error", "forgotten"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def now() -> float:
    return time.time()


# -- processes ---------------------------------------------------------------------------------


class Proc:
    """One service process, its output appended to logs/<name>.log across restarts."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name, self.args, self.env, self.log = name, args, env, logs / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log, "ab") as fh:
            fh.write(f"\n===== start {self.starts} at {datetime.now(UTC).isoformat()}\n".encode())
            fh.flush()
            self.proc = subprocess.Popen(
                self.args,
                cwd=self.env["SOAK_CWD"],
                env=self.env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the main process only (its children, if any, are left to their fate)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
    found = []
    for line in out.stdout.splitlines():
        child, parent = line.split()
        if int(parent) == pid:
            found.append(int(child))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_until(check: Any, timeout: float, step: float = 0.2) -> float | None:
    """Seconds until check() was true, or None after timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if check():
                return time.monotonic() - start
        except (redis.RedisError, OSError):
            pass
        time.sleep(step)
    return None


# -- deliveries --------------------------------------------------------------------------------


def load_payload(name: str) -> dict[str, Any]:
    return dict(json.loads((ROOT / "examples" / "events" / name).read_text())["payload"])


def make_body(template: dict[str, Any], sha: str) -> bytes:
    payload = copy.deepcopy(template)
    payload["after"] = sha
    payload["head_commit"]["id"] = sha
    payload["commits"][-1]["id"] = sha
    payload["compare"] = (
        f"https://github.com/pytorch/pytorch/compare/{payload['before'][:12]}...{sha[:12]}"
    )
    return json.dumps(payload).encode()


def run_id_for(delivery: str, sha: str) -> str:
    """`workflows.run.run_folder.run_id_for` of a push delivery (checked against the real runs)."""
    digest = hashlib.sha256(f"{delivery}:1:".encode()).hexdigest()[:10]
    return f"push-{sha[:8]}-{digest}"


@dataclass
class Delivery:
    index: int
    real: bool
    delivery: str
    sha: str
    scheduled: float
    sent: float = 0.0
    answered: float = 0.0
    status: int = 0  # 0: no HTTP answer (connection error, timeout)
    body: str = ""


@dataclass
class Sender:
    port: int
    rate: float
    seconds: float
    real_every: int
    threads: int = 16
    deliveries: list[Delivery] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.docs = load_payload("push_docs_only.json")
        self.real = load_payload("push_softmax_kernel.json")
        self.lock = threading.Lock()
        self.next = 0
        self.total = int(self.rate * self.seconds)
        self.t0 = 0.0
        self.stop = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        self.t0 = now() + 0.5
        pool = [threading.Thread(target=self._loop, daemon=True) for _ in range(self.threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        self.done.set()

    def _take(self) -> int | None:
        with self.lock:
            if self.next >= self.total or self.stop.is_set():
                return None
            self.next += 1
            return self.next - 1

    def _loop(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while (i := self._take()) is not None:
            real = self.real_every > 0 and i % self.real_every == self.real_every // 2
            sha = hashlib.sha1(f"soak-{os.getpid()}-{i}".encode()).hexdigest()
            d = Delivery(i, real, f"soak-{os.getpid()}-{i:06d}", sha, self.t0 + i / self.rate)
            body = make_body(self.real if real else self.docs, sha)
            headers = {
                "Content-Type": "application/json",
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": d.delivery,
                "X-Hub-Signature-256": sign(SECRET, body),
            }
            delay = d.scheduled - now()
            if delay > 0:
                time.sleep(delay)
            d.sent = now()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
                conn.request("POST", "/github/webhook", body=body, headers=headers)
                response = conn.getresponse()
                d.body = response.read().decode(errors="replace")[:200]
                d.status = response.status
                if response.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                d.body = f"{type(exc).__name__}: {exc}"[:200]
                if conn is not None:
                    conn.close()
                conn = None
            d.answered = now()
            with self.lock:
                self.deliveries.append(d)


# -- watching Redis ----------------------------------------------------------------------------


class Monitor:
    """Samples Redis every second; keeps every run's latest state (incrementally)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(
            url, decode_responses=True, socket_timeout=3, socket_connect_timeout=2
        )
        self.states: dict[str, str] = {}
        self.first_seen: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.samples: list[dict[str, Any]] = []
        self.since = 0.0
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()

    def sample(self) -> dict[str, Any] | None:
        t = now()
        try:
            ids = self.client.zrangebyscore(HISTORY_RUNS, self.since - 2, "+inf", withscores=True)
            pipe = self.client.pipeline(transaction=False)
            for run_id, _ in ids:
                pipe.get(f"spyre-ci:history:run:{run_id}")
            bodies = pipe.execute()
            depth = intake_depth(self.client)
            queue = sum(int(self.client.llen(q)) for q in ("celery", "celery\x06\x166"))
            leased = int(self.client.hlen("spyre-ci:shards:leased"))
        except redis.RedisError:
            with self.lock:
                self.samples.append({"t": round(t, 1), "redis": False})
            return None
        with self.lock:
            for (run_id, score), body in zip(ids, bodies, strict=True):
                if not body:
                    continue
                state = json.loads(body).get("state", "?")
                self.first_seen.setdefault(run_id, t)
                self.states[run_id] = state
                if state in FINAL:
                    self.finished_at.setdefault(run_id, t)
                self.since = max(self.since, score)
            done = sum(1 for s in self.states.values() if s in FINAL)
            sample = {
                "t": round(t, 1),
                "redis": True,
                "runs": len(self.states),
                "final": done,
                "intake_depth": depth,
                "celery_queue": queue,
                "leased": leased,
                "load1": round(os.getloadavg()[0], 2),
            }
            self.samples.append(sample)
        return sample

    def final_count(self) -> int:
        with self.lock:
            return sum(1 for s in self.states.values() if s in FINAL)


def intake_depth(client: redis.Redis) -> int:
    try:
        return int(client.xlen("spyre-ci:intake"))
    except redis.ResponseError:
        return 0


def group_last_id(client: redis.Redis) -> str | None:
    try:
        for group in client.xinfo_groups("spyre-ci:intake"):
            return str(group.get("last-delivered-id"))
    except redis.ResponseError:
        return None
    return None


# -- the soak ----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="deliveries/s (default 50)")
    parser.add_argument("--minutes", type=float, default=10.0, help="sending time (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=1, help="pool size per worker")
    parser.add_argument("--real-every", type=int, default=200, help="1 in N runs tests")
    parser.add_argument("--drain-minutes", type=float, default=20.0)
    parser.add_argument("--outage-s", type=float, default=5.0)
    parser.add_argument("--record", type=Path, default=RESULTS)
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument(
        "--as-variant",
        action="store_true",
        help="add this run to the `variants` list of --record instead of replacing it",
    )
    parser.add_argument("--name", default="soak", help="the record's name")
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not on the PATH")

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    logs = work / "logs"
    logs.mkdir()
    print(f"soak folder: {work}", flush=True)
    inventory = work / "tiny.json.gz"
    subprocess.run(
        [SPYRE, "inventory", "--specs", str(TINY_SPEC), "--out", str(inventory)],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    redis_port, http_port = free_port(), free_port()
    url = f"redis://127.0.0.1:{redis_port}/0"
    (work / "redis").mkdir()
    env = {
        **os.environ,
        "SPYRE_CI_REDIS_URL": url,
        "SPYRE_CI_WEBHOOK_SECRET": SECRET,
        "SPYRE_CI_STATE_DIR": str(work / "state"),
        "SOAK_CWD": str(work),
    }
    redis_proc = Proc(
        "redis",
        [
            "redis-server",
            "--port",
            str(redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--dir",
            str(work / "redis"),
        ],
        env,
        logs,
    )
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=3)
    serve = Proc(
        "serve",
        [SPYRE, "serve", "--host", "127.0.0.1", "--port", str(http_port), "--workers", "2"],
        env,
        logs,
    )
    intake_args = [
        "--intake",
        "--no-github",
        "--inventory",
        str(inventory),
        "--specs",
        str(TINY_SPEC),
        "--out-root",
        str(work / "runs"),
    ]
    workers = [
        Proc(
            f"worker-{i}",
            [
                SPYRE,
                "worker",
                "--concurrency",
                str(args.concurrency),
                "--name",
                f"soak-w{i}",
                *(intake_args if i == 0 else []),
            ],
            env,
            logs,
        )
        for i in range(args.workers)
    ]
    procs = [redis_proc, serve, *workers]
    orphans: list[int] = []
    faults: list[dict[str, Any]] = []
    monitor = Monitor(url)
    seconds = args.minutes * 60
    sender = Sender(http_port, args.rate, seconds, args.real_every)
    try:
        redis_proc.start()
        if wait_until(client.ping, 20) is None:
            raise SystemExit("redis-server did not answer")
        serve.start()
        for w in workers:
            w.start()
        if wait_until(lambda: _healthy(http_port), 60) is None:
            raise SystemExit(f"the relay did not answer; see {logs}/serve.log")

        def ready() -> bool:
            from_status = _status(url)
            return len(from_status["workers"]) == args.workers and bool(from_status["intake"])

        if wait_until(ready, 120, 0.5) is None:
            raise SystemExit(f"the workers did not come up; see {logs}")
        threading.Thread(target=monitor.run, daemon=True).start()
        send = threading.Thread(target=sender.run, daemon=True)
        send.start()
        t_start = now() + 0.5
        plan = [(0.25, "redis"), (0.5, "worker"), (0.75, "redis")]
        for share, kind in plan:
            time.sleep(max(0.0, t_start + share * seconds - now()))
            if kind == "redis":
                faults.append(redis_fault(redis_proc, client, url, sender, monitor, args.outage_s))
            else:
                victim = workers[1] if len(workers) > 1 else workers[0]
                fault = worker_fault(victim, client, args.outage_s, orphans, sender.t0)
                faults.append(fault)
            print({k: v for k, v in faults[-1].items() if k != "_thread"}, flush=True)
        send.join()
        t_sent = now()
        for fault in faults:
            thread = fault.pop("_thread", None)
            if thread is not None:
                thread.join(timeout=400)
        accepted = [d for d in sender.deliveries if d.status == 202 and "enqueued" in d.body]
        expected = {run_id_for(d.delivery, d.sha) for d in accepted}
        print(f"sent {len(sender.deliveries)}, accepted {len(accepted)}; draining", flush=True)

        def drained() -> bool:
            with monitor.lock:
                states = dict(monitor.states)
            return all(states.get(r) in FINAL for r in expected)

        quiet_since: list[float] = []

        def drained_or_stalled() -> bool:
            if drained():
                return True
            last = monitor.samples[-1] if monitor.samples else {}
            idle = last.get("redis") and not any(
                last.get(k) for k in ("intake_depth", "celery_queue", "leased")
            )
            if not idle:
                quiet_since.clear()
                return False
            quiet_since[:1] = quiet_since[:1] or [now()]
            return now() - quiet_since[0] > 60  # nothing queued or leased for a minute: stuck

        wait_until(drained_or_stalled, args.drain_minutes * 60, 2.0)
        drain_s = round(now() - t_sent, 1) if drained() else None
        stuck_before = sorted(r for r in expected if monitor.states.get(r) not in FINAL)
        backlog_sample = monitor.sample()
        t_end = now()
        resumed = resume_stuck(env, monitor, stuck_before, logs) if drain_s is None else {}
        status_at_end = _status(url)
        result = analyse(
            args, work, url, client, sender, monitor, expected, faults, t_start, t_sent
        )
        result["drain_s"] = drain_s
        result["runs_stuck_before_resume"] = len(stuck_before)
        result["resume_of_stuck_runs"] = resumed
        result["backlog_at_end"] = backlog_sample
        result["status_at_end"] = {
            "workers": len(status_at_end["workers"]),
            "intake": len(status_at_end["intake"]),
            "shards": status_at_end["shards"][:10],
            "queue": status_at_end["queue"],
        }
        if drain_s is None:
            result["drain_projection"] = project(monitor, expected, t_sent, t_end)
    finally:
        monitor.stop.set()
        sender.stop.set()
        for proc in reversed(procs):
            proc.stop()
        for pid in orphans:  # pool processes of the killed worker, if they outlived it
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    load_after = os.getloadavg()
    record = build_record(args, result, load_before, load_after, work)
    text = json.dumps(record, indent=2)
    print(text)
    if not args.no_record:
        if args.as_variant and args.record.exists():
            main_record = json.loads(args.record.read_text())
            main_record.setdefault("variants", []).append(record)
            text = json.dumps(main_record, indent=2)
        elif args.record.exists():  # keep the variants recorded alongside this one
            old = json.loads(args.record.read_text()).get("variants")
            if old:
                record["variants"] = old
                text = json.dumps(record, indent=2)
        args.record.write_text(text + "\n", encoding="utf-8")
    (work / "soak.json").write_text(text + "\n", encoding="utf-8")
    bad = result["results_lost"] or result["results_recorded_twice"]
    return 1 if bad else 0


def resume_stuck(
    env: dict[str, str], monitor: Monitor, stuck: list[str], logs: Path
) -> dict[str, Any]:
    """When runs are left non-final with nothing queued: what `runs show` says about them,
    then `spyre-ci runs resume` (the documented recovery) and whether they complete."""
    never = [r for r in stuck if r not in monitor.states]  # no run record: nothing to resume
    stuck = [r for r in stuck if r in monitor.states]
    if not stuck or len(stuck) > 200:
        return {"stuck": len(stuck), "without_a_run_record": len(never), "tried": False}
    shown: dict[str, str] = {}
    codes: Counter[int] = Counter()
    for run_id in stuck:
        show = subprocess.run(
            [SPYRE, "runs", "show", run_id], env=env, capture_output=True, text=True, timeout=60
        )
        shown[run_id] = (
            f"{monitor.states.get(run_id)}: "
            + " | ".join(
                line.strip()
                for line in show.stdout.splitlines()
                if "resume" in line or "stop" in line
            )[:300]
        )
        done = subprocess.run(
            [SPYRE, "runs", "resume", run_id], env=env, capture_output=True, text=True, timeout=120
        )
        codes[done.returncode] += 1
        with open(logs / "resume.log", "a") as fh:
            fh.write(f"== {run_id}\n{show.stdout}{show.stderr}{done.stdout}{done.stderr}\n")
    t = now()
    waited = wait_until(lambda: all(monitor.states.get(r) in FINAL for r in stuck), 180, 1.0)
    return {
        "stuck": len(stuck),
        "without_a_run_record": len(never),
        "runs_show": shown,
        "resume_exit_codes": dict(codes),
        "all_final_after_resume_s": None if waited is None else round(now() - t, 1),
        "still_not_final": sorted(r for r in stuck if monitor.states.get(r) not in FINAL),
    }


def _healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    finally:
        conn.close()


def _status(url: str) -> dict[str, Any]:
    from workflows.drivers import distributed
    from workflows.settings import Settings

    return distributed.status(url, Settings.from_env().lease_ttl_s)


def redis_fault(
    proc: Proc,
    client: redis.Redis,
    url: str,
    sender: Sender,
    monitor: Monitor,
    outage: float,
) -> dict[str, Any]:
    """Kill, wait, restart; then poll every condition together and note when each holds."""
    try:
        last_id = group_last_id(client)
    except redis.RedisError:
        last_id = None
    t_kill = now()
    proc.kill()
    time.sleep(outage)
    proc.start()
    t_restart = now()

    def relay_202() -> bool:
        with sender.lock:
            return any(d.status == 202 and d.sent >= t_restart for d in sender.deliveries[-500:])

    checks = {
        "redis_answers_s": client.ping,
        "relay_202_s": relay_202,
        "intake_claims_s": lambda: group_last_id(client) not in (None, last_id),
        "run_saved_s": lambda: bool(
            client.zrangebyscore(HISTORY_RUNS, t_restart, "+inf", start=0, num=1)
        ),
    }
    seen: dict[str, float] = {}
    deadline = t_restart + 180
    while len(seen) < len(checks) - sender.done.is_set() and now() < deadline:
        for name, check in checks.items():
            if name in seen or (name == "relay_202_s" and sender.done.is_set()):
                continue
            try:
                if check():
                    seen[name] = round(now() - t_restart, 2)
            except (redis.RedisError, OSError):
                pass
        time.sleep(0.05)
    with sender.lock:
        refused = sum(1 for d in sender.deliveries if d.sent >= t_kill and d.status != 202)
    return {
        "fault": "redis SIGKILL + restart (same port, same AOF folder)",
        "at_s": round(t_kill - sender.t0, 1),
        "outage_s": round(t_restart - t_kill, 1),
        **{name: seen.get(name) for name in checks},
        "not_accepted_from_kill_to_recovery": refused,
    }


def worker_fault(
    proc: Proc, client: redis.Redis, outage: float, orphans: list[int], t0: float
) -> dict[str, Any]:
    node = "celery@" + proc.args[proc.args.index("--name") + 1]  # Celery's node name

    def held() -> list[tuple[str, str]]:
        found = []
        for fld, raw in client.hgetall("spyre-ci:shards:leased").items():
            run_id, _, index = fld.rpartition(":")
            holder = client.get(f"spyre-ci:run:{run_id}:lease:{index}")
            if holder and holder.startswith(node + "/"):
                found.append((fld, holder))
            del raw
        return found

    victims: list[tuple[str, str]] = []

    def some() -> bool:
        victims[:] = held()
        return bool(victims)

    waited = wait_until(some, 30, 0.2)
    children = children_of(proc.pid)
    t_kill = now()
    proc.kill()
    time.sleep(outage)
    proc.start()

    fault: dict[str, Any] = {
        "fault": "worker main process SIGKILL + restart (same --name)",
        "worker": node,
        "at_s": round(t_kill - t0, 1),
        "waited_for_a_lease_s": round(waited, 1) if waited is not None else None,
        "shards_held_at_kill": [v[0] for v in victims],
        "pool_children_at_kill": len(children),
    }
    orphans.extend(children)

    def back() -> bool:
        raw = client.get(f"spyre-ci:worker:alive:{node}")
        return bool(raw) and json.loads(raw).get("pid") == proc.pid

    def taken_over() -> bool:
        for fld, token in victims:
            run_id, _, index = fld.rpartition(":")
            if client.hexists(f"spyre-ci:run:{run_id}:shards", index):
                takers.setdefault(fld, "recorded")
                continue
            holder = client.get(f"spyre-ci:run:{run_id}:lease:{index}")
            if not holder or holder == token:
                return False
            takers[fld] = holder
        return True

    takers: dict[str, str] = {}

    def measure() -> None:  # in the background: the fault schedule goes on meanwhile
        back_s = wait_until(back, 120, 0.2)
        fault["worker_alive_again_s"] = None if back_s is None else round(now() - t_kill, 2)
        time.sleep(max(0.0, t_kill + 10 - now()))
        fault["pool_children_alive_10s_after"] = sum(1 for pid in children if alive(pid))
        over = wait_until(taken_over, 300, 0.2) if victims else None
        fault["shards_taken_over_s"] = None if over is None else round(now() - t_kill, 2)
        fault["shards_taken_by"] = dict(takers)

    thread = threading.Thread(target=measure, daemon=True)
    thread.start()
    fault["_thread"] = thread
    return fault


def analyse(
    args: argparse.Namespace,
    work: Path,
    url: str,
    client: redis.Redis,
    sender: Sender,
    monitor: Monitor,
    expected: set[str],
    faults: list[dict[str, Any]],
    t_start: float,
    t_sent: float,
) -> dict[str, Any]:
    deliveries = sorted(sender.deliveries, key=lambda d: d.index)
    statuses = Counter(str(d.status) for d in deliveries)
    accepted = [d for d in deliveries if d.status == 202 and "enqueued" in d.body]
    others_202 = [d for d in deliveries if d.status == 202 and "enqueued" not in d.body]
    not_accepted = [d for d in deliveries if d.status != 202]
    pipe = client.pipeline(transaction=False)
    for d in not_accepted:
        pipe.exists(f"spyre-ci:delivery:{d.delivery}")
        pipe.exists(f"spyre-ci:history:run:{run_id_for(d.delivery, d.sha)}")
    marks = pipe.execute()
    traced = [
        d for d, key, run in zip(not_accepted, marks[::2], marks[1::2], strict=True) if key or run
    ]
    traces = [d.delivery for d in traced]
    # a delivery whose answer was lost (no HTTP status) may have been accepted: not a trace
    traced_503 = [d.delivery for d in traced if d.status == 503]
    # read what still waits before the run records: a run planned in between is then seen
    waiting = waiting_runs(client)  # not lost: still in the intake stream or Celery's queue
    runs_all = client.zrange(HISTORY_RUNS, 0, -1)
    pipe = client.pipeline(transaction=False)
    for run_id in runs_all:
        pipe.get(f"spyre-ci:history:run:{run_id}")
    records = {
        r: json.loads(b) for r, b in zip(runs_all, pipe.execute(), strict=True) if b is not None
    }
    states = Counter(rec.get("state", "?") for rec in records.values())
    missing = sorted(expected - set(records) - waiting)
    not_yet = len((expected - set(records)) & waiting)
    unexpected = sorted(set(records) - expected)
    stuck = sorted(r for r in expected if r in records and records[r].get("state") not in FINAL)
    # runs with tests: every planned variant has one outcome; no variant started twice
    real_runs = [run_id_for(d.delivery, d.sha) for d in accepted if d.real]
    lost_outcomes: dict[str, list[str]] = {}
    twice: dict[str, list[str]] = {}
    recorded_twice: dict[str, list[str]] = {}
    interrupted: dict[str, list[str]] = {}
    tests_done = 0
    for run_id in real_runs:
        rec = records.get(run_id)
        if rec is None or rec.get("state") not in FINAL:
            continue
        planned_raw = client.get(f"spyre-ci:run:{run_id}:planned")
        planned = json.loads(planned_raw) if planned_raw else {}
        variants = [v for shard in planned.get("shards", []) for v in shard]
        out = work / "runs" / run_id
        try:
            results = json.loads((out / "run.json").read_text())["results"]
        except (OSError, KeyError, ValueError):
            results = []
        ids = Counter(r["id"] for r in results)
        tests_done += len(ids)
        gone = [v for v in variants if v not in ids]
        if gone:
            lost_outcomes[run_id] = gone
        doubled = [v for v, n in ids.items() if n > 1]
        if doubled:
            recorded_twice[run_id] = doubled
        # starts and ends in the shards' own results files (not the `rerun/` stage, whose
        # second run of a failure is declared): one attempt file per shard delivery
        starts, ends = Counter(), Counter()
        for jsonl in sorted((out / "work").glob("*/shard-*/*.jsonl")):
            for line in jsonl.read_text(errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and row.get("id"):
                    (starts if row.get("event") == "start" else ends)[row["id"]] += 1
        ended_twice = sorted(v for v, n in ends.items() if n > 1)
        restarted = sorted(v for v, n in starts.items() if n > 1 and ends[v] <= 1)
        if ended_twice:
            twice[run_id] = ended_twice
        if restarted:
            interrupted[run_id] = restarted
    lost = len(missing) + sum(len(v) for v in lost_outcomes.values())
    lost += len(traced_503)
    sent_s = max(d.sent for d in deliveries) - min(d.sent for d in deliveries) if deliveries else 0
    latencies = sorted(d.answered - d.sent for d in accepted)
    return {
        "deliveries_sent": len(deliveries),
        "deliveries_accepted": len(accepted),
        "deliveries_202_not_enqueued": len(others_202),
        "deliveries_not_accepted": len(not_accepted),
        "http_statuses": dict(statuses),
        "not_accepted_with_a_trace": traces[:20],
        "rate_achieved_per_s": round(len(deliveries) / sent_s, 2) if sent_s else None,
        "accept_latency_ms_p50_p99": [
            round(1000 * latencies[int(q * (len(latencies) - 1))], 1) for q in (0.5, 0.99)
        ]
        if latencies
        else None,
        "runs_recorded": len(records),
        "run_states": dict(states),
        "runs_completed": states.get("completed", 0),
        "runs_with_tests": len(real_runs),
        "tests_recorded_in_runs_with_tests": tests_done,
        "runs_stuck": len(stuck),
        "runs_stuck_ids": stuck[:20],
        "accepted_without_run": len(missing),
        "accepted_still_queued": not_yet,
        "accepted_without_run_ids": missing[:20],
        "runs_not_from_an_accepted_delivery": unexpected[:20],
        "completed_runs_missing_outcomes": lost_outcomes,
        "results_recorded_twice": sum(len(v) for v in recorded_twice.values()),
        "results_recorded_twice_detail": recorded_twice,
        "tests_run_twice": sum(len(v) for v in twice.values()),
        "tests_run_twice_detail": twice,
        "tests_restarted_after_an_interrupted_attempt": interrupted,
        "results_lost": lost,
        "faults": faults,
        "send_window_s": round(t_sent - t_start, 1),
        "samples_every_30s": monitor.samples[::30],
    }


RUN_ID = re.compile(r"push-[0-9a-f]{8}-[0-9a-f]{10}")


def waiting_runs(client: redis.Redis) -> set[str]:
    """Run ids of deliveries still in the intake stream or in a plan message of Celery's."""
    found: set[str] = set()
    for _, fields in client.xrange("spyre-ci:intake"):
        event = json.loads(fields.get("event", "{}"))
        found.add(run_id_for(str(event.get("delivery_id")), str(event.get("head_sha"))))
    messages = list(client.lrange("celery", 0, -1)) + list(client.hvals("unacked"))
    for raw in messages:
        try:
            body = json.loads(raw)
            if isinstance(body, list):  # unacked: [message, exchange, routing key]
                body = body[0]
            text = base64.b64decode(body["body"]).decode(errors="replace")
        except (ValueError, KeyError, TypeError):
            text = str(raw)
        if '"spyre_ci.plan"' in raw or "spyre_ci.plan" in text:
            found.update(RUN_ID.findall(text))
    return found


def project(monitor: Monitor, expected: set[str], t_sent: float, t_end: float) -> dict[str, Any]:
    with monitor.lock:
        done = [t for r, t in monitor.finished_at.items() if r in expected]
    left = len(expected) - len(done)
    window = [t for t in done if t >= t_end - 300]
    rate = len(window) / min(300.0, t_end - t_sent) if window else 0.0
    return {
        "runs_left": left,
        "runs_final_per_s_last_5_min": round(rate, 2),
        "projected_drain_left_s": round(left / rate) if rate else None,
    }


def build_record(
    args: argparse.Namespace,
    result: dict[str, Any],
    before: tuple[float, float, float],
    after: tuple[float, float, float],
    work: Path,
) -> dict[str, Any]:
    command = (
        ".venv/bin/python benchmarks/soak.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v:g}"
            if isinstance(v, float)
            else f"--{k.replace('_', '-')} {v}"
            for k, v in (
                ("rate", args.rate),
                ("minutes", args.minutes),
                ("workers", args.workers),
                ("concurrency", args.concurrency),
                ("real_every", args.real_every),
                ("drain_minutes", args.drain_minutes),
            )
        )
        + (f" --as-variant --name {args.name}" if args.as_variant else "")
    )
    return {
        "name": args.name,
        "value": result["results_lost"],
        "unit": "results lost (accepted deliveries without a run + planned outcomes missing)",
        "command": command,
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"python {platform.python_version()}; load average {before[0]:.1f}/{before[1]:.1f}/"
        f"{before[2]:.1f} before, {after[0]:.1f}/{after[1]:.1f}/{after[2]:.1f} after "
        "(shared with other jobs)",
        "folder": str(work),
        **result,
    }


if __name__ == "__main__":
    raise SystemExit(main())
