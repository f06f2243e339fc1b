"""Cost of a small op on the emulated spyre device against CPU, on 4x4 float32 tensors.

Measures `a + b` (the headline value), `a * b`, `torch.relu(a)` and `a.sum()`, each on spyre
and on CPU in the same run, on the device's default path (compiled where the install built
backend_under_test/_fastpath.c); then the same in a process of its own on the Python path
(SPYRE_EMU_PYTHON_PATH=1), for comparison.

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
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import torch

import backend_under_test  # noqa: F401  (registers spyre even with autoloading disabled)
from backend_under_test import compiled

RESULT = Path(__file__).resolve().parent / "results" / "device_small_op.json"
NUMBER = 20_000
REPEAT = 7
# Earlier cuts, for the record (the Python path of this code is the third cut: it is measured
# in every run, in `python_path`). "third_cut" is that code against the code before it, run
# in turn on the same machine, medians of three runs each; "second_cut" the figures from
# before the second cut; "earlier" from before the small-op path existed.
BEFORE = {
    "third_cut": {
        "ratio_to_cpu": {"add": 5.5, "mul": 5.5, "relu": 5.1, "sum": 5.2},
        "spyre_us": {"add": 7.06, "mul": 6.81, "relu": 5.98, "sum": 8.13},
        "before_it": {"add": 5.8, "mul": 5.9, "relu": 5.4, "sum": 5.5},
        "date": "2026-12-07T08:46:00+00:00",
    },
    "second_cut": {
        "ratio_to_cpu": {"add": 8.5, "mul": 5.7, "relu": 7.5, "sum": 7.6},
        "spyre_us": {"add": 12.67, "mul": 11.81, "relu": 14.48, "sum": 13.66},
        "cpu_us": {"add": 1.5, "mul": 2.07, "relu": 1.92, "sum": 1.79},
        "date": "2026-12-02T05:54:28+00:00",
    },
    "earlier": {
        "value_us": 9.49,
        "cpu_us": 0.98,
        "ratio_to_cpu": 9.7,
        "date": "2026-11-29T18:51:51+00:00",
        "note": "a + b only; load average 1.9",
    },
}
# Instructions per call (benchmarks/device_small_op_instructions.py [--python-path]: callgrind,
# counted only inside a 1,000-call loop after warm-up; deterministic, unlike the times on this
# shared machine), on torch 2.13.0 (the pinned one) and 2.14.1 (pip's CUDA build on the CPU).
INSTRUCTIONS = {
    "compiled": {
        "torch_2_13": {"add": 44_779, "mul": 44_335, "relu": 36_275, "sum": 49_641},
        "torch_2_14_1": {"add": 43_715, "mul": 43_272, "relu": 36_466, "sum": 48_469},
    },
    "python_path": {
        "torch_2_13": {"add": 56_131, "mul": 55_631, "relu": 46_522, "sum": 60_875},
        "torch_2_14_1": {"add": 55_037, "mul": 54_519, "relu": 46_605, "sum": 59_598},
    },
    "cpu": {
        "torch_2_13": {"add": 10_615, "mul": 10_492, "relu": 9_361, "sum": 13_982},
        "torch_2_14_1": {"add": 9_261, "mul": 9_136, "relu": 9_226, "sum": 12_719},
    },
    "ratio_compiled": {
        "torch_2_13": {"add": 4.2, "mul": 4.2, "relu": 3.9, "sum": 3.6},
        "torch_2_14_1": {"add": 4.7, "mul": 4.7, "relu": 4.0, "sum": 3.8},
    },
    "ratio_python_path": {
        "torch_2_13": {"add": 5.3, "mul": 5.3, "relu": 5.0, "sum": 4.4},
        "torch_2_14_1": {"add": 5.9, "mul": 6.0, "relu": 5.1, "sum": 4.7},
    },
    "date": "2026-12-07",
    "command": ".venv/bin/python benchmarks/device_small_op_instructions.py [--python-path]; "
    "for 2.14.1 the same script with <venv with torch==2.14.1>/bin/python (it sets PYTHONPATH "
    "to the checkout)",
    # Where the instructions of one spyre `a + b` (2.13, compiled, 44,779) go, rounded from the
    # callgrind profile's inclusive costs (callgrind_annotate --inclusive=yes); the rest, about
    # 2,900, is the path's own C code. What the compiled path leaves is torch's own calls.
    "add_compiled_by_piece": {
        "dispatcher into the kernel (autograd, boxing, the Python kernel holder) and back": 9_000,
        "the CPU kernel through torch.add on the aliases": 6_700,
        "tensor methods and attributes read (data_ptr, dtype, shape, stride, is_cpu, "
        "storage_offset, is_neg, untyped_storage)": 11_000,
        "table lookups (host aliases, result facts, op counts)": 3_500,
        "the device tensor: create_empty_tensor, from_data_pointer, swap, live entry": 4_500,
        "freeing the previous result (two tensors, two storages, the entry's callback)": 7_200,
    },
    "add_python_path_by_piece_before_the_third_cut": {
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


def measure() -> dict[str, dict[str, float]]:
    """Each op on CPU and on spyre, back to back (both see the same machine load)."""
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    da, db = a.to("spyre"), b.to("spyre")
    ops = {}
    for name, op in OPS.items():
        cpu_median, cpu_best = per_call_us(op, a, b)
        spyre_median, spyre_best = per_call_us(op, da, db)
        ops[name] = {
            "spyre_us": round(spyre_median, 2),
            "cpu_us": round(cpu_median, 2),
            "ratio_to_cpu": round(spyre_median / cpu_median, 1),
            "spyre_best_us": round(spyre_best, 2),
            "cpu_best_us": round(cpu_best, 2),
        }
    return ops


def python_path_ops() -> dict[str, dict[str, float]]:
    """`measure()` in a process of its own on the device's Python path."""
    env = dict(os.environ, **{compiled.PYTHON_PATH_ENV: "1"})
    process = subprocess.run(
        [sys.executable, __file__, "--ops-only"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    ops: dict[str, dict[str, float]] = json.loads(process.stdout)
    return ops


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULT, help=f"where to write ({RESULT})")
    parser.add_argument("--ops-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ops_only:
        print(json.dumps(measure()))
        return 0
    load_start = os.getloadavg()
    ops = measure()
    python_path = python_path_ops()
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
        "path": "compiled" if compiled.FASTPATH is not None else "python (not built)",
        "python_path": {
            "ops": python_path,
            "note": "the same run's Python path (SPYRE_EMU_PYTHON_PATH=1), in a process of its "
            "own, measured after the default path",
        },
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
        "The device path: each aten op's own kernel (bound to the op: its plan is looked up "
        "once), host aliases of the inputs cached with their sticks by data pointer and "
        "geometry (read from the tensor on every call), the CPU kernel through its Python "
        "binding where that binding provably runs the same overload, a contiguous result "
        "adopted by handing its bytes to a fresh device tensor's storage (_swap_data_ptr_, no "
        "copy), one live entry (a weak reference) per storage, ops counted per (op, sticks, "
        "elements). 'path' says which implementation ran: compiled (backend_under_test/"
        "_fastpath.c, the CPython API only: the same tensor calls without the interpreter) "
        "or python; python_path is the same run's Python path in a process of its own. What "
        "the compiled path leaves is torch's: the dispatcher's call into the kernel and "
        "back, the CPU kernel, the tensor methods the path reads, freeing two tensors and two "
        "storages per result (instructions_per_call.add_compiled_by_piece). sum pays one "
        "more dispatcher hop (its CompositeExplicitAutograd kernel calls sum.dim_IntList) and "
        "takes the boxed call: its int list keeps the Python binding out.",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
