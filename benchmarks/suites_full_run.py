"""Full run of every bundled variant on spyre through the pytest plugin; records counts and time.

    python benchmarks/suites_full_run.py [--workers 2] [--chunk 400] [--timeout 60]
        [--work-dir /tmp/suites-full] [--record]

Variants go to pytest subprocesses in chunks (one process per chunk, `--workers` at a time);
when a process dies, the test it was running is recorded as crashed and the rest of its chunk
is rerun. `--record` writes the generated expectations files from the failures (then a second
run should be green). Writes benchmarks/results/suites_full_run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "suites_full_run.json"


def all_ids() -> list[dict[str, str]]:
    out = subprocess.run(
        [sys.executable, "-m", "workflows.cli.main", "suites", "expand", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def run_chunk(ids: list[str], work: Path, name: str, timeout: float) -> list[dict[str, object]]:
    """Run ids to completion through the shard runner (crashes and hangs recorded, the rest
    of the chunk still runs); returns the end records."""
    from workflows.runner.shard_runner import Limits, run_shard
    from workflows.settings import Settings

    result = run_shard(
        name,
        ids,
        work,
        limits=Limits(test_timeout_s=timeout, memory_mb=None),
        env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
        warm=Settings.from_env().zygote,  # SPYRE_CI_ZYGOTE=0: every process cold
    )
    if result.fault is not None:
        raise SystemExit(f"{result.fault.summary}\n{result.fault.cause}")
    return [{"event": "end", **outcome.to_json()} for outcome in result.outcomes]


def merge(parts: list[Path], out: Path) -> int:
    """One result from runs over disjoint id sets (a full run done in parts)."""
    loaded = [json.loads(p.read_text()) for p in parts]
    statuses: Counter[str] = Counter()
    per_suite: Counter[str] = Counter()
    for part in loaded:
        statuses.update(part["statuses"])
        per_suite.update(part["per_suite"])
    result = dict(loaded[-1])
    result.update(
        {
            "value": round(sum(p["value"] for p in loaded), 1),
            "variants": sum(p["variants"] for p in loaded),
            "statuses": dict(sorted(statuses.items())),
            "per_suite": dict(sorted(per_suite.items())),
            "green": all(p["green"] for p in loaded),
            "parts": [
                {
                    "command": p["command"],
                    "wall_s": p["value"],
                    "variants": p["variants"],
                    "date": p["date"],
                    "workers": p["workers"],
                }
                for p in loaded
            ],
        }
    )
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["green"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/suites-full"))
    parser.add_argument(
        "--record",
        action="store_true",
        help="write the generated expectations files from the failures",
    )
    parser.add_argument("--limit", type=int, default=0, help="only the first N variants (smoke)")
    parser.add_argument("--ids", type=Path, help="only these variant ids (one per line)")
    parser.add_argument("--out", type=Path, default=RESULT, help="result JSON to write")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        help="combine result JSONs of runs over disjoint --ids into --out",
    )
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    variants = all_ids()
    if args.limit:
        variants = variants[: args.limit]
    if args.ids:
        keep = set(args.ids.read_text().split())
        variants = [v for v in variants if v["id"] in keep]
    ids = [v["id"] for v in variants]
    chunks: queue.Queue[tuple[int, list[str]]] = queue.Queue()
    for n, start in enumerate(range(0, len(ids), args.chunk)):
        chunks.put((n, ids[start : start + args.chunk]))
    records: list[dict[str, object]] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                n, chunk = chunks.get_nowait()
            except queue.Empty:
                return
            got = run_chunk(chunk, args.work_dir, f"chunk{n:03d}", args.timeout)
            with lock:
                records.extend(got)
                print(f"chunk {n}: {Counter(str(r['status']) for r in got)}", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    from suites.model import Outcome
    from suites.results_file import end_line

    # The plugin's results format (suites.results_file), so `suites record` reads it back.
    (args.work_dir / "all.jsonl").write_text(
        "".join(end_line(Outcome.from_json(r)) for r in records)
    )
    counts = Counter(str(r["status"]) for r in records)
    failing = {k: v for k, v in counts.items() if k in ("failed", "error", "timeout", "crashed")}
    by_suite = Counter(str(r["id"]).split("::", 1)[0] for r in records)
    if args.record:
        sys.path.insert(0, str(REPO))
        from suites.loader import bundled_specs_dir
        from suites.record import expectation_entries, merge_into_specs, read_results

        entries = expectation_entries(read_results([args.work_dir / "all.jsonl"]))
        written = merge_into_specs(
            entries,
            bundled_specs_dir(),
            {
                "ops": "ops.expectations.yaml",
                "modules": "modules.expectations.yaml",
                "compile": "compile.expectations.yaml",
            },
        )
        print(f"recorded expectations: {written}")
    import torch

    result = {
        "name": "suites_full_run",
        "value": round(wall, 1),
        "unit": "s",
        "command": f"python benchmarks/suites_full_run.py --workers {args.workers} "
        f"--chunk {args.chunk} --timeout {args.timeout:g}" + (" --record" if args.record else ""),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, "
        f"python {platform.python_version()}",
        "notes": "every bundled variant through the pytest plugin on spyre (torch "
        f"{torch.__version__}); green = no failed/error/timeout/crashed",
        "variants": len(ids),
        "statuses": dict(sorted(counts.items())),
        "per_suite": dict(sorted(by_suite.items())),
        "green": not failing and len(records) == len(ids),
        "workers": args.workers,
        "recorded": bool(args.record),
    }
    if not args.limit:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["green"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
