"""Cost of a small op on the emulated spyre device against CPU: `a + b` on 4x4 float32.

Run: .venv/bin/python benchmarks/device_small_op.py
Records benchmarks/results/device_small_op.json. The value is the median over repeats of
the per-call mean (timeit, CPU time of this process), in microseconds; the machine line says
where it was measured.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
import timeit
from pathlib import Path

import torch

import backend_under_test  # noqa: F401  (registers spyre even with autoloading disabled)

RESULT = Path(__file__).resolve().parent / "results" / "device_small_op.json"
NUMBER = 20_000
REPEAT = 7


def per_call_us(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Median and best per-call time of `a + b`, in microseconds."""
    for _ in range(1000):
        a + b  # warm up: caches, allocator, per-op plans
    # process_time, not wall time: the machine is shared, and other processes' time slices
    # would otherwise land in the figure.
    runs = [
        t / NUMBER * 1e6
        for t in timeit.repeat(lambda: a + b, number=NUMBER, repeat=REPEAT, timer=time.process_time)
    ]
    return statistics.median(runs), min(runs)


def main() -> int:
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    cpu_median, cpu_best = per_call_us(a, b)
    spyre_median, spyre_best = per_call_us(a.to("spyre"), b.to("spyre"))
    record = {
        "name": "device_small_op",
        "value": round(spyre_median, 2),
        "unit": "us per add (4x4 float32) on spyre",
        "cpu_us": round(cpu_median, 2),
        "spyre_best_us": round(spyre_best, 2),
        "cpu_best_us": round(cpu_best, 2),
        "ratio_to_cpu": round(spyre_median / cpu_median, 1),
        "target_us": 20.0,
        "spike_baseline_us": 50.0,
        "command": ".venv/bin/python benchmarks/device_small_op.py",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.platform()}, "
        f"python {platform.python_version()}, torch {torch.__version__}; "
        f"load average {os.getloadavg()[0]:.1f} at the start",
        "notes": "Median of 7 repeats of 20,000 calls each, in process CPU time (the machine "
        "is shared; wall time would count other processes). The device path is a boxed "
        "Python fallback: cached per-op plan, cached host aliases of the inputs, "
        "the CPU kernel, and adoption of its result as device memory (no copies). "
        "Compare value with cpu_us from the same run.",
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
