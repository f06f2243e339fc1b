"""Cost of a small op on the emulated spyre device against CPU, on 4x4 float32 tensors.

Measures `a + b` (the headline value), `a * b`, `torch.relu(a)` and `a.sum()`, each on spyre
and on CPU in the same run.

Run: .venv/bin/python benchmarks/device_small_op.py [--out FILE]
Records benchmarks/results/device_small_op.json (or FILE). Each figure is the median over repeats of
the per-call mean (timeit, CPU time of this process), in microseconds; the machine line says
where it was measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import torch

import backend_under_test  # noqa: F401  (registers spyre even with autoloading disabled)

RESULT = Path(__file__).resolve().parent / "results" / "device_small_op.json"
NUMBER = 20_000
REPEAT = 7
# The figures this benchmark recorded before the small-op path's second cut (same command,
# same machine); under "earlier", the figure from before the small-op path existed.
BEFORE = {
    "ratio_to_cpu": {"add": 8.5, "mul": 5.7, "relu": 7.5, "sum": 7.6},
    "spyre_us": {"add": 12.67, "mul": 11.81, "relu": 14.48, "sum": 13.66},
    "cpu_us": {"add": 1.5, "mul": 2.07, "relu": 1.92, "sum": 1.79},
    "date": "2026-12-02T05:54:28+00:00",
    "note": "load average 1.4. The old code re-measured next to the new one, three runs "
    "each, old and new in turn. Quiet machine (load average 0.1-0.6): old add 9.2-9.8x, "
    "mul 9.4-10.7x, relu 9.0-9.6x, sum 7.2-7.5x; new add 6.7-7.0x, mul 6.8-7.2x, relu "
    "6.3-7.0x, sum 6.4-6.7x. Load average 2.0-2.3: old add 9.9-10.9x, mul 10.3-11.4x, relu "
    "9.9-10.9x, sum 7.9-8.4x; new add 7.1-7.8x, mul 6.9-7.8x, relu 6.9-7.0x, sum 6.2-6.9x",
    "earlier": {
        "value_us": 9.49,
        "cpu_us": 0.98,
        "ratio_to_cpu": 9.7,
        "date": "2026-11-29T18:51:51+00:00",
        "note": "a + b only; load average 1.9",
    },
}
# Instructions per call (benchmarks/device_small_op_instructions.py: callgrind, counted only
# inside a 1,000-call loop after warm-up; deterministic, unlike the times on this shared
# machine). "spyre_before" is the code before the second cut, counted the same way.
INSTRUCTIONS = {
    "spyre": {"add": 60_530, "mul": 60_060, "relu": 50_692, "sum": 65_123},
    "cpu": {"add": 10_593, "mul": 10_424, "relu": 9_346, "sum": 13_982},
    "ratio": {"add": 5.7, "mul": 5.8, "relu": 5.4, "sum": 4.7},
    "spyre_before": {"add": 80_710, "mul": 79_645, "relu": 67_819, "sum": 79_108},
    "ratio_before": {"add": 7.6, "mul": 7.6, "relu": 7.3, "sum": 5.7},
    "command": ".venv/bin/python benchmarks/device_small_op_instructions.py",
    # Where the instructions of one spyre `a + b` go: a copy of the small-op path cut after
    # each piece, counted the same way (the pieces add up to 59,924).
    "add_by_piece": {
        "dispatcher into the Python kernel and back (a kernel returning a fixed tensor)": 10_759,
        "plan lookup": 1_277,
        "host aliases of the 2 arguments (cache keyed by data pointer and geometry)": 13_500,
        "the CPU kernel through torch.add on the aliases": 8_613,
        "result dtype, shape and cached shape facts": 3_202,
        "checks before adopting the result (storage, strides, offset, neg bit)": 5_652,
        "the device tensor: create_empty_tensor, from_data_pointer, swap": 8_486,
        "registering the storage and its release when the result is dropped": 6_158,
        "counting the op": 2_277,
    },
    "earlier": {
        "add_before": 109_030,
        "add_after": 80_723,
        "cpu": 10_601,
        "command": "valgrind --tool=callgrind --collect-atstart=no "
        "--toggle-collect=functools_reduce python loop.py (functools.reduce over the op)",
    },
}
OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a, b: torch.relu(a),
    "sum": lambda a, b: a.sum(),
}


def per_call_us(
    op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], a: torch.Tensor, b: torch.Tensor
) -> tuple[float, float]:
    """Median and best per-call time of `op(a, b)`, in microseconds."""

    def call() -> torch.Tensor:
        return op(a, b)

    for _ in range(1000):
        call()  # warm up: caches, allocator, per-op plans
    # process_time, not wall time: the machine is shared, and other processes' time slices
    # would otherwise land in the figure.
    runs = [
        t / NUMBER * 1e6
        for t in timeit.repeat(call, number=NUMBER, repeat=REPEAT, timer=time.process_time)
    ]
    return statistics.median(runs), min(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULT, help=f"where to write ({RESULT})")
    args = parser.parse_args()
    torch.manual_seed(0)
    load_start = os.getloadavg()
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    da, db = a.to("spyre"), b.to("spyre")
    ops = {}
    for name, op in OPS.items():
        # CPU and spyre back to back, so both see the same machine load
        cpu_median, cpu_best = per_call_us(op, a, b)
        spyre_median, spyre_best = per_call_us(op, da, db)
        ops[name] = {
            "spyre_us": round(spyre_median, 2),
            "cpu_us": round(cpu_median, 2),
            "ratio_to_cpu": round(spyre_median / cpu_median, 1),
            "spyre_best_us": round(spyre_best, 2),
            "cpu_best_us": round(cpu_best, 2),
        }
    load_end = os.getloadavg()
    add = ops["add"]
    record = {
        "name": "device_small_op",
        "value": add["spyre_us"],
        "unit": "us per add (4x4 float32) on spyre",
        "cpu_us": add["cpu_us"],
        "spyre_best_us": add["spyre_best_us"],
        "cpu_best_us": add["cpu_best_us"],
        "ratio_to_cpu": add["ratio_to_cpu"],
        "ops": ops,
        "aim_ratio_to_cpu": 5.0,
        "before": BEFORE,
        "instructions_per_call": INSTRUCTIONS,
        "target_us": 20.0,
        "spike_baseline_us": 50.0,
        "command": ".venv/bin/python benchmarks/device_small_op.py",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.platform()}, "
        f"python {platform.python_version()}, torch {torch.__version__}; "
        f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end",
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
        "notes": "Median of 7 repeats of 20,000 calls each, in process CPU time (the machine "
        "is shared; wall time would count other processes, but a busy second core still "
        "slows this one: compare each spyre figure with the cpu figure from the same run). "
        "The device path is a boxed Python fallback; its small-op path uses the cached "
        "per-op plan, host aliases of the inputs cached with their sticks by data pointer "
        "and geometry (read from the tensor on every call), the CPU kernel through its "
        "Python binding where that binding provably runs the same overload, and adopts a "
        "contiguous result by handing its bytes to a fresh device tensor's storage "
        "(_swap_data_ptr_, no copy, no boxed set_); the result stays as that tensor's host "
        "alias, one table entry (a weak reference) per live storage, no lock; ops are "
        "counted per (op, sticks, elements) and the cost model applied when read. The aim "
        "of 5x is not reached: in instructions the path is 5.7x the CPU's for add (4.7x for "
        "sum), in time about 7x, since the dispatcher's call into Python and back alone "
        "costs as much as a whole CPU add; instructions_per_call.add_by_piece says where "
        "the rest goes. At about 8,500 instructions per microsecond (60,530 in about 7.2 us), "
        "a + b is: dispatch 1.25 us, plan 0.15, two host aliases 1.6, CPU kernel 1.0, "
        "result facts and checks 1.05, device tensor 1.0, storage registration and release "
        "0.7, counting 0.25. sum pays one more dispatcher hop (its CompositeExplicitAutograd "
        "kernel calls sum.dim_IntList) and takes the boxed call: its int list keeps the "
        "Python binding out.",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
