"""How long `write_run` takes for a large run, and how big the HUD body gets.

A synthetic run of 20,000 variants (1,000 of them failing with 3 KB messages: a bad day)
is exported to a temporary directory three times; the figure is the median wall time of
one export (every schema check, the three gzip collections, both reports). Also records
the envelope size before and after fitting HUD's 2 MB cap. Writes
benchmarks/results/export.json. Run: .venv/bin/python benchmarks/export.py
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contracts.event import TriggerEvent  # noqa: E402
from dashboard_export.crcr import encode, envelope_for, fit_body  # noqa: E402
from dashboard_export.layout import write_run  # noqa: E402
from dashboard_export.model import Environment, RunRecord, VariantResult  # noqa: E402
from suites.model import Outcome, Status  # noqa: E402

VARIANTS = 20_000
FAILING = 1_000
RESULT = REPO / "benchmarks" / "results" / "export.json"


def synthetic_record() -> RunRecord:
    results = []
    for i in range(VARIANTS):
        dtype = ("float32", "float16", "bfloat16", "int64")[i % 4]
        vid = f"opinfo::binary_ufunc::op{i // 4}::{dtype}"
        if i < FAILING:
            message = f"AssertionError: mismatch {i}\n" + "x" * 3000
            outcome = Outcome(vid, Status.FAILED, 0.8, message)
            results.append(VariantResult.of(outcome, "new" if i % 3 else "pre-existing"))
        else:
            results.append(VariantResult.of(Outcome(vid, Status.PASSED, 0.05)))
    event = TriggerEvent(
        kind="push",
        delivery_id="bench-delivery",
        repo="pytorch/pytorch",
        head_sha="f" * 40,
        payload={"after": "f" * 40},
    )
    return RunRecord(
        run_id="1000",
        attempt=1,
        downstream_repo="torch-spyre/torch-spyre",
        workflow="spyre-ci",
        job="variants",
        event=event,
        environment=Environment("2.13.0", "0" * 40, "spyre-emulator", "0.3.1", "spyre:0"),
        results=tuple(results),
        started_at="2026-11-29T14:00:00Z",
        completed_at="2026-11-29T15:00:00Z",
    )


def main() -> None:
    record = synthetic_record()
    times, cpu = [], []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as out:
            start, start_cpu = time.perf_counter(), time.process_time()
            write_run(record, out)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    raw = len(encode(envelope_for(record)))
    fitted, omitted = fit_body(envelope_for(record))
    result = {
        "name": "export_write_run_20k_variants",
        "value": round(statistics.median(times), 3),
        "unit": "s",
        "command": ".venv/bin/python benchmarks/export.py",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {platform.processor() or ''} "
        f"python {platform.python_version()}".strip(),
        "notes": f"median of 3 exports of {VARIANTS} variants ({FAILING} failing, 3 KB "
        "messages), no JUnit (rows built from results); envelope sizes in bytes",
        "runs_s": [round(t, 3) for t in times],
        # Wall time depends on what else the machine runs; CPU time much less so.
        "cpu_s_median": round(statistics.median(cpu), 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "envelope_bytes_raw": raw,
        "envelope_bytes_sent": len(encode(fitted)),
        "failed_tests_omitted": omitted,
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
