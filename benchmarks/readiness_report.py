"""Promotion readiness of a recorded History: one real run plus 16 synthetic days.

    .venv/bin/python benchmarks/readiness_report.py [--jobs 2]

In a fresh state directory: the tiny suite's Inventory, one real run of the softmax push
(`spyre-ci run --diff ...`, exit 1: its softmax variants fail newly), then 16 days of
synthetic run records saved straight into History (seeded: 6 runs a day, queue 1-20 min, run
time 20-100 min, a few failing, infrastructure errors, one 3.5 h run, one timed-out run and
older runs before the window), then `spyre-ci readiness --json --markdown --html` over the
14 days ending now. Records `benchmarks/results/readiness.json`; the page and the Markdown
are left in the temp directory it prints.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULT = REPO / "benchmarks" / "results" / "readiness.json"
SPEC = "tests/workflows/data/tiny.yaml"
PATCH = "examples/events/push_softmax_kernel.patch"
H = 3600.0
DAY = 86400.0


def spyre_ci(state: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    env.pop("SPYRE_CI_REDIS_URL", None)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "workflows", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    return done, time.perf_counter() - started


def synthetic_days(now: float, days: int = 16, per_day: int = 6) -> list[dict[str, object]]:
    """Run records as the pipeline saves them, spread over `days` before `now` (seeded)."""
    rng = random.Random(18)
    records: list[dict[str, object]] = []
    for i in range(days * per_day):
        created = now - (i + 0.5) * DAY / per_day
        queue = rng.uniform(60, 20 * 60)
        run = rng.uniform(20 * 60, 100 * 60)
        state, summary = "completed", {"new_failures": 0, "new_timeouts": 0}
        if i % 23 == 7:
            summary = {"new_failures": 2, "new_timeouts": 0}
        elif i % 41 == 11:
            state, summary = "infra-error", {"infrastructure": ["shard-0: exited with code 4"]}
        if i == 30:
            run = 3.5 * H  # one long job
        if i == 53:
            summary = {"new_failures": 1, "new_timeouts": 1, "counts": {"timeout": 1}}
        records.append(
            {
                "run_id": f"synthetic-{i:03d}",
                "state": state,
                "created_at": created,
                "updated_at": created + queue + run,
                "summary": {
                    "event": "push synthetic",
                    **summary,
                    "started_at": created + queue,
                    "finished_at": created + queue + run,
                },
            }
        )
    return records


def main() -> int:
    from workflows.stores.history import RunRecord, SQLiteHistory

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-readiness-"))
    state = work / "state"
    inventory = work / "tiny.json.gz"
    done, _ = spyre_ci(state, "inventory", "--specs", SPEC, "--out", str(inventory))
    if done.returncode != 0:
        raise SystemExit(f"inventory failed ({done.returncode}):\n{done.stderr[-2000:]}")
    real, real_s = spyre_ci(
        state,
        "run",
        "--diff",
        PATCH,
        "--inventory",
        str(inventory),
        "--specs",
        SPEC,
        "--jobs",
        str(args.jobs),
        "--holdout",
        "0",
        "--no-progress",
        "--out",
        str(work / "real"),
    )
    if real.returncode not in (0, 1):
        raise SystemExit(f"real run failed ({real.returncode}):\n{real.stderr[-2000:]}")
    now = time.time() + 60
    history = SQLiteHistory(state / "history.sqlite3")
    synthetic = synthetic_days(now)
    for record in synthetic:
        history.save_run(RunRecord.from_json(record))
    iso = dt.datetime.fromtimestamp(now, dt.UTC).isoformat()
    html, markdown = work / "runs" / "readiness.html", work / "readiness.md"
    report, report_s = spyre_ci(
        state, "readiness", "--now", iso, "--json", "--html", str(html), "--markdown", str(markdown)
    )
    if report.returncode not in (0, 1):
        raise SystemExit(f"readiness failed ({report.returncode}):\n{report.stderr[-2000:]}")
    assessed = json.loads(report.stdout)
    table, _ = spyre_ci(state, "readiness", "--now", iso)
    passed = sum(1 for c in assessed["criteria"] if c["passed"])
    result = {
        "name": "promotion readiness (L2 -> L3) of a recorded History: criteria passed",
        "value": passed,
        "unit": f"of {len(assessed['criteria'])} criteria",
        "command": "python benchmarks/readiness_report.py --jobs 2",
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "notes": "2 cores shared with a long benchmark; the real run's times are this "
            "machine's, the synthetic days' are chosen (seeded)",
        },
        "history": {
            "real_runs": 1,
            "real_run_exit_code": real.returncode,
            "real_run_wall_s": round(real_s, 1),
            "synthetic_runs": len(synthetic),
            "synthetic_days": 16,
        },
        "exit_code": report.returncode,
        "readiness_wall_s": round(report_s, 2),
        "ready": assessed["ready"],
        "window": assessed["window"],
        "runs_in_window": assessed["runs"],
        "older_runs_left_out": assessed["older_runs_left_out"],
        "verdicts": assessed["verdicts"],
        "criteria": [
            {
                k: c[k]
                for k in (
                    *("key", "title", "value", "unit", "comparison", "bound", "passed"),
                    *("measured", "against", "against_ids", "worst", "detail"),
                )
            }
            for c in assessed["criteria"]
        ],
        "table": table.stdout.splitlines(),
    }
    RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table.stdout, end="")
    print(f"page: {html}\nmarkdown: {markdown}\nrecorded: {RESULT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
