"""Promotion readiness under the evidence rules: three Histories, one answer each.

    .venv/bin/python benchmarks/readiness_report.py [--jobs 2]

Each History is its own state directory, its runs written through History's API
(`SQLiteHistory.save_run`, the records the pipeline saves), and `spyre-ci readiness --json`
answers over the 14 days ending now:

- `one-run`: the tiny suite's Inventory and one real run of the softmax push
  (`spyre-ci run --diff ...`, exit 1: its softmax variants fail newly). Nothing can be
  judged: NOT ENOUGH DATA, never READY (exit 5);
- `16-days`: that run plus 16 days of synthetic runs, 6 a day (seeded: queue 1-20 min, run
  time 20-100 min, a few failing, infrastructure errors, one 3.5 h run, one timed-out run):
  the window is covered and the pass rate and times have their 10 jobs, but the 1 % shares
  need 100 jobs and time at L2 30 days: NOT ENOUGH DATA;
- `32-days`: the same run plus 32 days of synthetic runs, 8 a day, same mix, L2 since the
  first run: every criterion has its evidence and is judged.

Records `benchmarks/results/readiness.json` (each History's answer, exit code and criteria);
the `32-days` page and Markdown are left in the temp directory it prints.
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
# A delivered push (a CI job), not a patch tried with --diff (which readiness never counts).
EVENT = "examples/events/push_softmax_kernel.json"
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


def synthetic_days(now: float, days: int, per_day: int) -> list[dict[str, object]]:
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
    inventory = work / "tiny.json.gz"
    done, _ = spyre_ci(work / "state-inv", "inventory", "--specs", SPEC, "--out", str(inventory))
    if done.returncode != 0:
        raise SystemExit(f"inventory failed ({done.returncode}):\n{done.stderr[-2000:]}")
    histories = {"one-run": (0, 0), "16-days": (16, 6), "32-days": (32, 8)}
    answers: dict[str, dict[str, object]] = {}
    real_runs: dict[str, dict[str, object]] = {}
    table_32: list[str] = []
    for name, (days, per_day) in histories.items():
        state = work / name / "state"
        real, real_s = spyre_ci(
            state,
            "run",
            "--event",
            EVENT,
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
            str(work / name / "real"),
        )
        if real.returncode not in (0, 1, 4):  # 4: the C++ push is not tested on this torch
            raise SystemExit(f"real run failed ({real.returncode}):\n{real.stderr[-2000:]}")
        real_runs[name] = {"exit_code": real.returncode, "wall_s": round(real_s, 1)}
        now = time.time() + 60
        history = SQLiteHistory(state / "history.sqlite3")
        synthetic = synthetic_days(now, days, per_day) if days else []
        for record in synthetic:
            history.save_run(RunRecord.from_json(record))
        iso = dt.datetime.fromtimestamp(now, dt.UTC).isoformat()
        html, markdown = work / name / "runs" / "readiness.html", work / name / "readiness.md"
        report, report_s = spyre_ci(
            state,
            "readiness",
            "--now",
            iso,
            "--json",
            "--html",
            str(html),
            "--markdown",
            str(markdown),
        )
        if report.returncode not in (0, 5):  # READY, or not (NOT READY, NOT ENOUGH DATA)
            raise SystemExit(f"readiness failed ({report.returncode}):\n{report.stderr[-2000:]}")
        assessed = json.loads(report.stdout)
        table, _ = spyre_ci(state, "readiness", "--now", iso)
        if name == "32-days":
            table_32 = table.stdout.splitlines()
        answers[name] = {
            "runs_written": 1 + len(synthetic),
            "synthetic_days": days,
            "synthetic_per_day": per_day,
            "verdict": assessed["verdict"],
            "ready": assessed["ready"],
            "exit_code": report.returncode,
            "readiness_wall_s": round(report_s, 2),
            "window": assessed["window"],
            "runs_in_window": assessed["runs"],
            "older_runs_left_out": assessed["older_runs_left_out"],
            "verdicts": assessed["verdicts"],
            "criteria": [
                {
                    k: c[k]
                    for k in (
                        *("key", "value", "comparison", "bound", "status", "missing"),
                        *("measured", "against"),
                    )
                }
                for c in assessed["criteria"]
            ],
        }
    full = answers["32-days"]
    criteria = full["criteria"]
    assert isinstance(criteria, list)
    result = {
        "name": "promotion readiness (L2 -> L3) under the evidence rules: the answer of three "
        "Histories (one real run; +16 days, 6 a day; +32 days, 8 a day)",
        "value": {name: a["verdict"] for name, a in answers.items()},
        "unit": "readiness verdict per History (READY / NOT READY / NOT ENOUGH DATA)",
        "command": "PYTHONPATH=$PWD .venv/bin/python benchmarks/readiness_report.py --jobs 2",
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "notes": "2 shared cores; the real runs' times are this machine's, the synthetic "
            "days' are chosen (seeded) and written through SQLiteHistory.save_run",
        },
        "criteria_passed_32_days": sum(1 for c in criteria if c["status"] == "pass"),
        "criteria": len(criteria),
        "real_runs": real_runs,
        "histories": answers,
        "table_32_days": table_32,
    }
    RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for name, a in answers.items():
        print(f"{name}: {a['verdict']} (exit {a['exit_code']}, {a['runs_in_window']} runs)")
    print("\n".join(table_32))
    print(f"32-days page: {work / '32-days' / 'runs' / 'readiness.html'}\nrecorded: {RESULT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
