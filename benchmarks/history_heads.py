"""What a run's forensics pays to read History's main line, by the number of runs History holds.

    .venv/bin/python benchmarks/history_heads.py [--runs 500] [--repeat 5] [--out FILE]

Each finished run looks for where its failures appeared on the main line
(`workflows.run.forensics.main_line`: up to 500 most recent runs). It used to decode every
one of them whole (`list_runs`: the plan facts, the results, the change under test); it
reads their heads now (`list_run_heads`: id, state, time and plan facts). Both are timed
here on the same History: one real run (the README's main job, in a fresh state directory)
whose stored record is copied under `--runs` ids, each at a sha of its own (on the main
line), as History holds them after that many runs. Medians of `--repeat`. Records
`benchmarks/results/history_heads.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULT = REPO / "benchmarks" / "results" / "history_heads.json"
PATCH = REPO / "examples" / "changes" / "glu_batch_check.patch"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=500, help="runs History holds")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    from workflows.run import forensics
    from workflows.stores.history import SQLiteHistory

    work = Path(tempfile.mkdtemp(prefix="spyre-ci-history-heads-"))
    state = work / "state"
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state), "SPYRE_CI_WARM_CLI": "0"}
    command = [sys.executable, "-m", "workflows", "run", "--diff", str(PATCH)]
    done = subprocess.run(
        [*command, "--out", str(work / "out"), "--no-progress"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 1:
        raise SystemExit(f"the main job exited {done.returncode}:\n{done.stderr[-2000:]}")
    path = state / "history.sqlite3"
    db = sqlite3.connect(path)
    (body,) = db.execute("SELECT body FROM run ORDER BY updated_at DESC LIMIT 1").fetchone()
    record = json.loads(body)
    for i in range(args.runs - 1):  # the real one, and copies of it under other ids
        # Each at a sha of its own, as runs of upstream's commits are: on the main line.
        summary = {**record["summary"], "head_sha": f"{i:040x}"}
        copy = {
            **record,
            "run_id": f"{record['run_id']}-{i}",
            "created_at": i,
            "updated_at": i,
            "summary": summary,
        }
        db.execute(
            "INSERT INTO run (run_id, body, updated_at) VALUES (?, ?, ?)",
            (copy["run_id"], json.dumps(copy), i),
        )
    db.commit()
    db.close()
    history = SQLiteHistory(path)

    def timed(call: object) -> float:
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            call()  # type: ignore[operator]
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    whole = timed(lambda: history.list_runs(forensics.RUNS_READ))
    heads = timed(lambda: history.list_run_heads(forensics.RUNS_READ))
    line = timed(lambda: forensics.main_line(history, ""))
    points = forensics.main_line(history, "")
    result = {
        "name": "history_heads",
        "what": "reading History's main line for a run's forensics: whole run records "
        "(list_runs, as before) against run heads (list_run_heads, what main_line reads)",
        "command": f".venv/bin/python benchmarks/history_heads.py --runs {args.runs} "
        f"--repeat {args.repeat}",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f}",
        "runs_in_history": args.runs,
        "body_bytes": len(body),
        "value": round(heads * 1000, 1),
        "unit": "ms, median, list_run_heads(500) over that History",
        "list_runs_ms": round(whole * 1000, 1),
        "list_run_heads_ms": round(heads * 1000, 1),
        "main_line_ms": round(line * 1000, 1),
        "main_line_points": len(points),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
