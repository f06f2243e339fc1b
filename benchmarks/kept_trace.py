"""Loading the shipped trace in a new process: from its JSON against its kept (pickled) form.

    .venv/bin/python benchmarks/kept_trace.py [--repeat 5] [--out FILE]

Each measurement is a new Python process that loads `workflows.tracing.traces.shipped_trace`
for the installed torch, as a `spyre-ci` process that plans does, and reports the load's
wall and CPU time (the imports before it are not counted): with no cache folder (the JSON,
as before the kept form existed) and with a cache folder that holds the kept form (made once
before the measurements). The two alternate, `--repeat` times each; medians are recorded in
`benchmarks/results/kept_trace.json` with the load average (the machine is shared).
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
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "kept_trace.json"
PROBE = """
import json, sys, time
from pathlib import Path
from importlib import metadata
from workflows.stores import kept
from workflows.tracing import traces
cache = sys.argv[1]
kept.keep_in(Path(cache) if cache else None)
wall, cpu = time.perf_counter(), time.process_time()
trace = traces.shipped_trace(metadata.version("torch").split("+")[0])
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "variants": len(trace.functions) if trace else 0}))
"""


def measure(cache: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, cache],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the probe failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if not result["variants"]:
        raise SystemExit("no shipped trace for the installed torch")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="spyre-ci-kept-trace-") as cache:
        made = measure(cache)  # reads the JSON and keeps it
        runs: dict[str, list[dict[str, Any]]] = {"json": [], "kept": []}
        for _ in range(args.repeat):
            runs["json"].append(measure(""))
            runs["kept"].append(measure(cache))
    medians = {
        mode: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("wall_s", "cpu_s")}
        for mode, rs in runs.items()
    }
    result = {
        "name": "kept_trace",
        "what": "loading the shipped trace in a new process: from its JSON, and from the "
        "kept (pickled) form in the cache folder",
        "value": medians["kept"]["wall_s"],
        "unit": "s, median wall time of the load from the kept form",
        "json": medians["json"],
        "kept": medians["kept"],
        "first_load_keeping_s": round(made["wall_s"], 3),
        "variants": made["variants"],
        "command": f".venv/bin/python benchmarks/kept_trace.py --repeat {args.repeat}",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, torch {metadata.version('torch')}; load average "
        f"{load_before} before, {' '.join(f'{x:.1f}' for x in os.getloadavg())} after",
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
