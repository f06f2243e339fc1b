"""Follow upstream through the real services: a stream of signed push webhooks for the commits
of a simulated upstream (`tests/testing/simulated_stream.py`, 23 commits after the root), each
relayed by `spyre-ci serve` and run by ONE `spyre-ci worker --intake` on a private Redis, the
worker set to follow upstream (a local PEP 503 index of relabelled nightlies, a local GitHub of
the history, a fresh environment cache and state directory).

    .venv/bin/python benchmarks/follow_upstream_stream.py [--out FILE] [--work DIR]
        [--limit N] [--no-nightly] [--concurrency 2]

Each push `parent..commit` is POSTed as GitHub sends it (X-GitHub-Event: push, a delivery id,
X-Hub-Signature-256 over the raw body), one after another; the next is sent once the previous
run's completed CRCR callback body is written (`<out-root>/<run id>/callback.json`, what
docs/export.md names the completed callback; the worker publishes it nowhere by itself) and
History holds the run as final. The nightly 2.16.0.dev20261202 (built from c14) enters the
index before the push of c15. Last, one nightly delivery for c14 through the relay's
`scheduled` path (X-GitHub-Event: nightly, body {"head_sha": ...}: GitHub itself never sends
it; in production `spyre-ci trigger nightly` or a CRCR dispatch does): a full run.

Records per delivery the verdict (tested / partial / not_tested), conclusion, new failures,
what a correct run reports for that commit (`simulated_stream.expected`), the wall time from
POST to the completed callback; overall: share of Python commits tested at once, false
"tested", false red, p50/p95 delivery -> callback of Python commits, each build's first
provisioning against its cached reuse, and findings (a wrong verdict, a traceback in the
worker's log, a missing field). Needs `redis-server` on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from contracts.event import TriggerEvent  # noqa: E402
from relay.events import normalize  # noqa: E402
from relay.signature import sign  # noqa: E402
from tests.servers.upstream_history import UpstreamGitHubServer  # noqa: E402
from tests.servers.wheel_index import WheelIndexServer  # noqa: E402
from tests.testing import simulated_stream as ss  # noqa: E402
from tests.testing import simulated_upstream as su  # noqa: E402
from tests.testing.processes import free_port  # noqa: E402
from tests.testing.relay import SECRET, RedisProcess  # noqa: E402
from workflows.run.run_folder import run_id_for  # noqa: E402
from workflows.stores.history import RedisHistory  # noqa: E402

SPYRE_CI = str(ROOT / ".venv" / "bin" / "spyre-ci")
RESULT = ROOT / "benchmarks" / "results" / "follow_upstream_stream.json"
WORKER = "stream-w1"
FINAL = {"completed", "held", "infra-error", "forgotten", "stopped"}
SECOND_BUILD_AT = "c14"  # its nightly enters the index before the push of the next commit


@dataclass
class Services:
    """The private Redis, the relay, the worker and the local upstream."""

    work: Path
    redis: RedisProcess
    github: UpstreamGitHubServer
    index: WheelIndexServer
    port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def runs(self) -> Path:
        return self.work / "runs"

    def worker_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPYRE_CI_")}
        env.update(
            SPYRE_CI_REDIS_URL=self.redis.url,
            SPYRE_CI_WEBHOOK_SECRET=SECRET,
            SPYRE_CI_STATE_DIR=str(self.work / "state"),
            SPYRE_CI_ENV_CACHE=str(self.work / "envs"),
            SPYRE_CI_BUILD_INDEX=self.index.url,
            SPYRE_CI_GITHUB_URL=self.github.url,
            SPYRE_CI_GITHUB_TOKEN=self.github.token,
            SPYRE_CI_RUNS_DIR=str(self.runs),
        )
        return env

    def start(self, name: str, *args: str) -> None:
        (self.work / "logs").mkdir(exist_ok=True)
        with open(self.work / "logs" / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen(
                [SPYRE_CI, *args],
                cwd=self.work,
                env=self.worker_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.redis.stop()
        self.github.stop()
        self.index.stop()


def start_services(work: Path, stream: ss.Stream, concurrency: int) -> Services:
    """Redis, the local GitHub and index, `spyre-ci serve`, then the worker (ready once its
    heartbeat and its intake loop are in Redis: its Inventory is built first)."""
    (work / "redis").mkdir(parents=True, exist_ok=True)
    store = RedisProcess(work / "redis")
    store.start()
    index = WheelIndexServer(work / "wheels").start()
    services = Services(work, store, su.serve(stream.upstream), index, free_port())
    services.start(
        "relay", "serve", "--host", "127.0.0.1", "--port", str(services.port), "--workers", "1"
    )
    services.start(
        "worker", "worker", "--concurrency", str(concurrency), "--intake", "--name", WORKER,
        "--out-root", str(services.runs),
    )  # fmt: skip
    client = redis.Redis.from_url(store.url, decode_responses=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        for name, proc in services.procs.items():
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with {proc.returncode}: see {work}/logs")
        intake = client.exists(f"spyre-ci:intake:alive:{WORKER}")
        if intake and any(client.scan_iter("spyre-ci:worker:alive:*")) and _healthy(services):
            return services
        time.sleep(1)
    raise SystemExit(f"the relay or the worker did not come up; see {work}/logs")


def _healthy(services: Services) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{services.port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def post(port: int, event: str, delivery: str, payload: dict[str, Any]) -> tuple[int, str]:
    """One signed webhook delivery, as GitHub sends it."""
    body = json.dumps(payload).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/github/webhook",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(SECRET, body),
            "User-Agent": "GitHub-Hookshot/simulated",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_done(
    services: Services, run_id: str, began: float, timeout: float
) -> tuple[float | None, str]:
    """(seconds from POST to the completed callback, History's state) once the run is final;
    (None, state) at the timeout or when the worker died."""
    history = RedisHistory(services.redis.url)
    callback = services.runs / run_id / "callback.json"
    seen: float | None = None
    state = "not planned"
    while time.monotonic() - began < timeout:
        if seen is None and callback.is_file():
            seen = time.monotonic() - began
        record = history.get_run(run_id)
        state = str(record.state) if record is not None else state
        if state in FINAL and (seen is not None or state in ("stopped", "infra-error")):
            return seen, state
        if services.procs["worker"].poll() is not None:
            return None, f"{state} (the worker exited)"
        time.sleep(0.5)
    return None, f"{state} (no completed callback within {timeout:.0f} s)"


def read_run(folder: Path) -> dict[str, Any]:
    """What the run's files say: the callback's workflow, run.json's new failures, the plan."""
    callback = _read(folder / "callback.json")
    found = callback.get("workflow")
    workflow: dict[str, Any] = found if isinstance(found, dict) else {}
    env = workflow.get("environment") or {}
    record = _read(folder / "run.json")
    results = record.get("results") or []
    new = [r for r in results if r.get("classification") == "new"]
    planned = _read(folder / "planned.json")
    change = env.get("change") or {}
    base_status: dict[str, int] = {}
    first_bad: set[str] = set()
    for failed in workflow.get("failed_tests") or []:
        if failed.get("classification") == "new":
            said = str(failed.get("base_status"))
            base_status[said] = base_status.get(said, 0) + 1
            first_bad.add(str(failed.get("first_bad_sha") or ""))
    return {
        "tested": env.get("tested"),
        "conclusion": workflow.get("conclusion"),
        "tested_summary": env.get("tested_summary"),
        "torch": f"{env.get('torch_version')} ({str(env.get('torch_git_version'))[:12]})",
        "torch_source": env.get("torch_source"),
        "change_state": change.get("state"),
        "applied": [f.get("path") for f in change.get("applied") or []],
        "not_applied": [f.get("path") for f in change.get("not_applied") or []],
        "test_results": workflow.get("test_results"),
        "selected": (record.get("plan") or {}).get("selected"),
        "fallback": (record.get("plan") or {}).get("fallback_reason"),
        "new_failures": len(new),
        "new_failure_ids": sorted(r.get("id", "") for r in new)[:30],
        "pre_existing": sum(1 for r in results if r.get("classification") == "pre-existing"),
        "new_base_status": base_status,
        "new_first_bad_sha": sorted(first_bad),  # the product's own forensics
        # the A/B's base side ran in this run (else its outcomes came from the cache)
        "base_ran": (folder / "work" / folder.name / "base").is_dir(),
        "inventory": ((planned.get("request") or {}).get("inventory") or ""),
        "missing": [k for k in ("tested", "tested_summary", "change") if k not in env]
        + ([] if workflow.get("conclusion") else ["workflow.conclusion"]),
    }


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def judge(row: dict[str, Any], want: ss.Expectation | None) -> dict[str, Any]:
    """Correctness of one delivery against what a correct run reports."""
    if want is None:
        return {}
    caused = [i for i in row["new_failure_ids"] if _blamed_right(i, want.breaks)]
    wrong = [i for i in row["new_failure_ids"] if i not in caused]
    missed = bool(want.breaks) and row["new_failures"] == 0
    return {
        "want_tested": want.tested,
        "want_conclusion": want.conclusion,
        "want_breaks": list(want.breaks),
        "want_build": want.build,
        "tested_ok": row["tested"] == want.tested,
        "conclusion_ok": row["conclusion"] == want.conclusion,
        "failures_ok": not wrong and not missed,
        "correct": row["tested"] == want.tested
        and row["conclusion"] == want.conclusion
        and not wrong
        and not missed,
        "false_tested": row["tested"] == "tested"
        and (want.tested != "tested" or bool(row["not_applied"])),
        "false_red": len(wrong),
        "false_red_ids": wrong[:10],
        "missed_break": missed,
    }


def _blamed_right(variant: str, breaks: tuple[str, ...]) -> bool:
    parts = variant.split("::")
    subject = parts[2].lower() if len(parts) > 2 else variant.lower()
    return any(b.lower() in subject for b in breaks)


def deliver(
    services: Services, key: str, event: str, payload: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """POST one delivery, wait for its completed callback, read the run."""
    delivery = str(uuid.uuid4())
    normalized = normalize(event, payload, delivery)
    assert isinstance(normalized, TriggerEvent), normalized
    run_id = run_id_for(normalized)
    load = os.getloadavg()[0]
    began = time.monotonic()
    status, body = post(services.port, event, delivery, payload)
    answer = _message(body)
    if status != 202 or answer != "enqueued":
        return {"key": key, "run_id": run_id, "relay": [status, answer], "state": "refused"}
    callback_s, state = wait_done(services, run_id, began, timeout)
    row = {
        "key": key,
        "event": event,
        "delivery": delivery,
        "run_id": run_id,
        "relay": [status, answer],
        "state": state,
        "callback_s": None if callback_s is None else round(callback_s, 1),
        "load_at_post": round(load, 2),
        **read_run(services.runs / run_id),
    }
    row["run_page"] = _status(f"http://127.0.0.1:{services.port}/runs/{run_id}")
    return row


def _message(body: str) -> str:
    try:
        return str(json.loads(body).get("message", body))
    except (ValueError, AttributeError):
        return body[:200]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def reuse_seconds(services: Services, stream: ss.Stream, bases: dict[str, str]) -> dict[str, Any]:
    """A build's cached reuse as a fresh process meets it: `base_build.resolve` (choose the
    build, GitHub's compare, the provisioned environment found) for a base on each build."""
    code = (
        "import json, sys, time\n"
        "from workflows.run import base_build\n"
        "from workflows.settings import Settings\n"
        "out = {}\n"
        "for build, base in json.loads(sys.argv[1]).items():\n"
        "    began = time.monotonic()\n"
        "    found = base_build.resolve(base, 'pytorch/pytorch', Settings.from_env())\n"
        "    out[build] = [round(time.monotonic() - began, 2), found.build.version]\n"
        "print(json.dumps(out))\n"
    )
    shas = {k: stream.upstream.shas[v] for k, v in bases.items()}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(shas)],
        cwd=ROOT,
        env=services.worker_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-3:]}
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def provisioned(envs: Path) -> dict[str, Any]:
    """Each build environment's first provisioning, from its marker."""
    found = {}
    for marker in sorted(envs.glob("build-*/.spyre-ci-env.json")):
        facts = json.loads(marker.read_text())
        found[facts.get("torch", marker.parent.name)] = facts.get("created_s")
    return found


def worker_tracebacks(log: Path) -> list[str]:
    """The last lines of each traceback in the worker's log (at most 5)."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    found = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = i + 1
            while end < len(lines) and (lines[end].startswith(" ") or not lines[end]):
                end += 1
            found.append(" | ".join(lines[max(0, i - 1) : i + 1] + lines[end - 2 : end + 1]))
    return found[:5]


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))], 1)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pushes = [r for r in rows if r.get("event") == "push"]
    python = [r for r in pushes if r.get("kind") in ss.PY_KINDS]
    times = [r["callback_s"] for r in python if r.get("callback_s") is not None]
    judged_now = [r for r in python if r.get("applied") and r.get("tested") != "not_tested"]
    # Cold: the first delivery on a build (it provisions the build and starts its zygotes);
    # warm: every later one on a build already used.
    seen: set[str] = set()
    cold_keys: set[str] = set()
    for r in rows:
        build = str(r.get("want_build"))
        if build not in seen:
            seen.add(build)
            cold_keys.add(r["key"])
    cold = [r["callback_s"] for r in python if r["key"] in cold_keys and r.get("callback_s")]
    warm = [r["callback_s"] for r in python if r["key"] not in cold_keys and r.get("callback_s")]
    return {
        "deliveries": len(rows),
        "pushes": len(pushes),
        "correct": sum(1 for r in rows if r.get("correct")),
        "python_commits": len(python),
        "share_python_tested_at_once": round(
            sum(1 for r in python if r.get("tested") == "tested") / max(1, len(python)), 3
        ),
        "share_python_applied_and_run_at_once": round(len(judged_now) / max(1, len(python)), 3),
        "false_tested": sum(1 for r in rows if r.get("false_tested")),
        "false_red_deliveries": sum(1 for r in rows if r.get("false_red")),
        "false_red_variants": sum(int(r.get("false_red") or 0) for r in rows),
        "missed_breaks": sum(1 for r in rows if r.get("missed_break")),
        "python_callback_s_p50": percentile(times, 0.5),
        "python_callback_s_p95": percentile(times, 0.95),
        "python_callback_s_median_stat": round(statistics.median(times), 1) if times else None,
        "python_callback_s_cold": {
            "deliveries": sorted(k for k in cold_keys if any(r["key"] == k for r in python)),
            "p50": percentile(cold, 0.5),
            "p95": percentile(cold, 0.95),
        },
        "python_callback_s_warm": {
            "deliveries": len(warm),
            "p50": percentile(warm, 0.5),
            "p95": percentile(warm, 0.95),
        },
        "all_callback_s": {r["key"]: r.get("callback_s") for r in rows},
    }


def findings(rows: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    """What went wrong, as the product's output showed it."""
    found: list[dict[str, Any]] = []
    foreign = [r["key"] for r in rows if _foreign_inventory(r)]
    if foreign:
        first = next(r for r in rows if r["key"] == foreign[0])
        found.append(
            {
                "deliveries": foreign,
                "what": "planned on the installed torch's Inventory, not one built by the build "
                "under test (docs/workflows.md, Following upstream, step 4; `spyre-ci run` "
                "builds it, `worker --intake` does not)",
                "inventory": first.get("inventory"),
                "torch": first.get("torch"),
            }
        )
    for r in rows:
        if r.get("state") not in ("completed", "held"):
            found.append({"delivery": r["key"], "what": f"run ended {r.get('state')}"})
        if r.get("missing"):
            found.append({"delivery": r["key"], "what": f"callback lacks {r['missing']}"})
        if r.get("correct") is False:
            found.append(
                {
                    "delivery": r["key"],
                    "kind": r.get("kind"),
                    "what": "wrong verdict or conclusion"
                    if r.get("failures_ok")
                    else "failures blamed wrongly or a break missed",
                    "want": [r.get("want_tested"), r.get("want_conclusion"), r.get("want_breaks")],
                    "got": [r.get("tested"), r.get("conclusion"), r.get("new_failure_ids")],
                    "summary": r.get("tested_summary"),
                    "new_base_status": r.get("new_base_status"),
                    "base_ran": r.get("base_ran"),
                }
            )
            if r.get("kind") == "nightly" and "prepared environment" in str(r.get("torch_source")):
                found[-1]["diagnosis"] = (
                    "the nightly's build was already provisioned in SPYRE_CI_ENV_CACHE by an "
                    "earlier push, so workflows/run/under_test.py resolve() found it through "
                    "build_for (a prepared environment at the head) and left on_build None: "
                    "`at_one_sha` is then False and the check 'neither a diff nor the list of "
                    "the change's files is known' makes the run not_tested"
                )
            if r.get("false_red") and not r.get("base_ran"):
                found[-1]["diagnosis"] = (
                    "the failures' base side was not run: their base outcomes were read from "
                    "state/base-outcomes/<build sha>.json (workflows/run/pipeline.py "
                    "_base_outcomes, BaseOutcomeCache.for_torch keyed by the torch sha), "
                    "written by an earlier run on the same build with another upstream drift"
                )
    for trace in worker_tracebacks(work / "logs" / "worker.log"):
        found.append({"delivery": "worker log", "what": "traceback", "excerpt": trace[:1500]})
    return found


def _foreign_inventory(row: dict[str, Any]) -> bool:
    """A run on a build whose Inventory file is not keyed by that build's sha."""
    sha12 = str(row.get("torch", "")).split("(")[-1].rstrip(")")
    source = str(row.get("torch_source") or "")
    return source.startswith("build") and sha12 not in str(row.get("inventory") or "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--work", type=Path, default=None, help="keep the work folder here")
    parser.add_argument("--limit", type=int, default=0, help="only the first N pushes")
    parser.add_argument("--no-nightly", action="store_true", help="leave out the nightly")
    parser.add_argument("--concurrency", type=int, default=2, help="worker pool processes (2)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per push (1800)")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="follow-stream-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    stream = ss.make_long_history()
    began = time.monotonic()
    ss.make_stream_build(work / "wheels", stream, "R")
    relabel_s = [round(time.monotonic() - began, 2)]
    services = start_services(work, stream, args.concurrency)
    started = datetime.now(UTC)
    print(f"work {work}; relay :{services.port}; redis {services.redis.url}", flush=True)
    rows: list[dict[str, Any]] = []
    built = ["R"]
    keys = [c.key for c in stream.commits][: args.limit or None]
    by_sha = {sha: key for key, sha in stream.upstream.shas.items()}
    try:
        for key in keys:
            if stream.parent(key) == SECOND_BUILD_AT:
                began = time.monotonic()
                ss.make_stream_build(work / "wheels", stream, SECOND_BUILD_AT)
                relabel_s.append(round(time.monotonic() - began, 2))
                built.append(SECOND_BUILD_AT)
                print(f"nightly {stream.builds[SECOND_BUILD_AT]} enters the index", flush=True)
            commit = stream.commit(key)
            payload = ss.push_payload(work / "events", stream, key)
            row: dict[str, Any] = {"kind": commit.kind, "message": commit.message}
            row |= deliver(services, key, "push", payload, args.timeout)
            row["new_first_bad"] = [by_sha.get(s, s[:12]) for s in row.get("new_first_bad_sha", [])]
            want = ss.expected(stream, key, tuple(built))
            row |= judge(row, want) if row.get("state") != "refused" else {}
            rows.append(row)
            _progress(row, len(rows), len(keys) + (0 if args.no_nightly else 1))
        if not args.no_nightly:
            payload = {"head_sha": stream.upstream.shas[SECOND_BUILD_AT]}
            row = {"kind": "nightly", "message": f"nightly of {SECOND_BUILD_AT}"}
            row |= deliver(services, f"nightly@{SECOND_BUILD_AT}", "nightly", payload, 3 * 3600)
            nightly_want = ss.Expectation("tested", "success", (), SECOND_BUILD_AT, False)
            row |= judge(row, nightly_want) if row.get("state") != "refused" else {}
            rows.append(row)
            _progress(row, len(rows), len(rows))
        reuse = reuse_seconds(services, stream, {"R": "c01", SECOND_BUILD_AT: "c15"})
        pending = subprocess.run(
            [SPYRE_CI, "pending", "list"],
            env=services.worker_env(),
            cwd=work,
            capture_output=True,
            text=True,
        )
    finally:
        services.stop()
    load_after = os.getloadavg()
    summary = summarize(rows)
    found = findings(rows, work)
    record = {
        "name": "follow_upstream_stream",
        "value": summary["false_tested"] + summary["false_red_deliveries"],
        "unit": "false verdicts over the stream: runs called tested that were not, plus "
        "deliveries with a failure blamed on a commit that did not cause it",
        "command": ".venv/bin/python benchmarks/follow_upstream_stream.py"
        + (f" --limit {args.limit}" if args.limit else "")
        + (" --no-nightly" if args.no_nightly else ""),
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, {platform.platform()}, "
        f"Python {platform.python_version()}, installed torch 2.13.0 CPU (the simulated "
        "nightlies are its wheel relabelled); load average "
        f"{'/'.join(f'{x:.1f}' for x in load_before)} before, "
        f"{'/'.join(f'{x:.1f}' for x in load_after)} after, max "
        f"{max((r.get('load_at_post') or 0) for r in rows) if rows else 0:.1f} at a POST "
        "(the 2 cores shared with other work)",
        "setup": f"private redis-server, `spyre-ci serve --workers 1`, one `spyre-ci worker "
        f"--intake --concurrency {args.concurrency}`; SPYRE_CI_BUILD_INDEX a local PEP 503 "
        "index, SPYRE_CI_GITHUB_URL a local GitHub of the history; pushes one after another",
        "wall_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        **summary,
        "relabel_s": relabel_s,
        "provision_first_s": provisioned(work / "envs"),
        "cached_reuse_s": reuse,
        "pending_list": pending.stdout.strip().splitlines()[:20],
        "findings": found,
        "deliveries_detail": rows,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "deliveries_detail"}, indent=1))
    print(f"wrote {args.out}; work folder {work}")
    return 0 if record["value"] == 0 and not found else 1


def _progress(row: dict[str, Any], n: int, total: int) -> None:
    mark = "ok" if row.get("correct") else "?" if row.get("correct") is None else "WRONG"
    print(
        f"[{n}/{total}] {row['key']:>12} {row.get('kind', ''):<12} {row.get('state', ''):<10} "
        f"{row.get('tested')}/{row.get('conclusion')} new={row.get('new_failures')} "
        f"want {row.get('want_tested')}/{row.get('want_conclusion')} {mark} "
        f"callback {row.get('callback_s')} s",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
