"""The device's compiled and Python paths against upstream's OpInfo tests: same outcomes?

Runs upstream's `TestCommon.test_compare_cpu` (the sweep of backend_under_test/sweep.py) on a
sample of the committed manifest's tests, every `--every`-th by name, twice at once: on the
default path (compiled where the install built backend_under_test/_fastpath.c) and on the
Python path (SPYRE_EMU_PYTHON_PATH=1), each in its own pytest process. Every test's outcome
(passed, failed, skipped, xfailed) is compared between the two and with the committed
manifest (which the Python path produced).

    .venv/bin/python benchmarks/device_paths_opinfo.py [--every 6] [--out FILE]

Records benchmarks/results/device_paths_opinfo.json; exits 1 when the two paths disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend_under_test import sweep  # noqa: E402
from backend_under_test.compiled import PYTHON_PATH_ENV  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "device_paths_opinfo.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--every", type=int, default=6, help="every Nth test by name (6)")
    parser.add_argument("--out", type=Path, default=RESULT, help=f"where to write ({RESULT})")
    args = parser.parse_args()
    if args.every < 1:
        parser.error("--every must be 1 or more")
    manifest = json.loads(sweep.MANIFEST.read_text())
    committed: dict[str, str] = manifest["tests"]
    sample = sorted(committed)[:: args.every]
    print(f"{len(sample)} of {len(committed)} tests, on both paths at once ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        junits = {"compiled": Path(tmp) / "compiled.xml", "python": Path(tmp) / "python.xml"}
        envs = {"compiled": {PYTHON_PATH_ENV: ""}, "python": {PYTHON_PATH_ENV: "1"}}
        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            seconds = dict(
                zip(
                    junits,
                    pool.map(
                        lambda path: sweep.run_sweep(junits[path], envs[path], sample), junits
                    ),
                    strict=True,
                )
            )
        wall = time.monotonic() - started
        outcomes = {
            path: {o.test: o.status for o in sweep.parse_junit(junit)}
            for path, junit in junits.items()
        }
    missing = {path: sorted(set(sample) - set(found)) for path, found in outcomes.items()}
    differ = sorted(t for t in sample if outcomes["compiled"].get(t) != outcomes["python"].get(t))
    # The manifest keeps "failed:<group>"; the status is what is compared.
    off_manifest = {
        path: {
            t: {"now": found.get(t), "manifest": committed[t]}
            for t in sample
            if found.get(t) != committed[t].split(":", 1)[0]
        }
        for path, found in outcomes.items()
    }
    counts = {
        path: {s: list(found.values()).count(s) for s in sorted(set(found.values()))}
        for path, found in outcomes.items()
    }
    record = {
        "name": "device_paths_opinfo",
        "what": "upstream's TestCommon.test_compare_cpu on a sample of the OpInfo sweep, on "
        "the device's compiled path and on its Python path: the outcomes compared",
        "command": f".venv/bin/python benchmarks/device_paths_opinfo.py --every {args.every}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end",
        "value": len(differ),
        "unit": "tests whose outcome differs between the two paths",
        "sample": len(sample),
        "of": len(committed),
        "counts": counts,
        "differ": {t: {p: outcomes[p].get(t) for p in outcomes} for t in differ},
        "missing": missing,
        "off_the_committed_manifest": off_manifest,
        "seconds": {path: round(s, 1) for path, s in seconds.items()},
        "wall_s": round(wall, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("value", "sample", "counts", "differ")}, indent=2))
    return 1 if differ or any(missing.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
