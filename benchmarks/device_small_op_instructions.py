"""Instructions per small op on the emulated spyre device and on CPU, counted by callgrind.

Unlike the times of benchmarks/device_small_op.py, the counts do not move with the load of a
shared machine. Each op runs in its own process: 2,000 calls to warm up, then 1,000 calls
inside `functools.reduce`, the only place callgrind counts (--toggle-collect), so imports
and warm-up stay out. A call includes freeing the previous result.

Run: .venv/bin/python benchmarks/device_small_op_instructions.py [--python-path]  (needs
valgrind; about a minute and a half per op and device). `--python-path` counts the device's
Python path (SPYRE_EMU_PYTHON_PATH=1) instead of the compiled one. Prints JSON; the figures
go into INSTRUCTIONS in benchmarks/device_small_op.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OPS = ("add", "mul", "relu", "sum")
CALLS = 1000
ROOT = Path(__file__).resolve().parent.parent

# The counted loop, run by `python -c` under callgrind: argv is (device, op).
LOOP = f"""
import functools, sys, torch
import backend_under_test
device, name = sys.argv[1], sys.argv[2]
a, b = torch.randn(4, 4), torch.randn(4, 4)
if device != "cpu":
    a, b = a.to(device), b.to(device)
op = {{"add": lambda: a + b, "mul": lambda: a * b, "relu": lambda: torch.relu(a),
      "sum": lambda: a.sum()}}[name]
for _ in range(2000):
    op()
functools.reduce(lambda acc, _: op(), range({CALLS}), None)
"""


def count(device: str, op: str, out_dir: Path, python_path: bool = False) -> int:
    """Instructions per call of `op` on `device`."""
    out = out_dir / f"callgrind.{device}.{op}"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=functools_reduce",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            LOOP,
            device,
            op,
        ],
        cwd=ROOT,
        env=dict(
            os.environ, PYTHONPATH=str(ROOT), SPYRE_EMU_PYTHON_PATH="1" if python_path else ""
        ),
        check=True,
        capture_output=True,
    )
    for line in out.read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return round(int(line.split()[1]) / CALLS)
    raise RuntimeError(f"no totals in {out}")


def main() -> int:
    python_path = "--python-path" in sys.argv[1:]
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: no instruction counts", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        counts = {
            device: {op: count(device, op, Path(tmp), python_path) for op in OPS}
            for device in ("spyre", "cpu")
        }
    ratios = {op: round(counts["spyre"][op] / counts["cpu"][op], 1) for op in OPS}
    path = "python" if python_path else "compiled (or python, where it is not built)"
    print(json.dumps({**counts, "ratio": ratios, "spyre_path": path}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
