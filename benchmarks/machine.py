"""What a benchmark record says of the machine it ran on, so two records can be compared.

Machines of one kind differ: the same 2-core machine ran the default test run in 2 min 34 s
one day and in 7 min 37 s the next, quiet both times, on the same CPU model. A figure is
only read beside the machine's own speed, measured the same way everywhere:

* `describe()`: the CPU (model name, family/model/stepping, the vector extensions fp16
  numerics depend on), cores, Python, the load average, and `probe_s`;
* `probe_s()`: the best of 9 wall times of a fixed pure-Python workload (integer sums, dict
  and str work: what the tool's own code and pytest do), 0.1-0.2 s each here. A record
  whose probe is twice another's ran on a machine half as fast; its times are compared
  after dividing by the probe (`relative`).

    .venv/bin/python benchmarks/machine.py     # prints describe() as JSON
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

# The extensions that decide which kernels torch's CPU build runs, and so fp16-class numerics.
VECTOR_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile")


def cpu() -> dict[str, Any]:
    """The first processor of /proc/cpuinfo: its model and the vector extensions it has."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {"model": platform.processor() or platform.machine()}
    for line in text.split("\n\n", 1)[0].splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    return {
        "model": fields.get("model name", platform.processor() or platform.machine()),
        "family_model_stepping": "/".join(
            fields.get(k, "?") for k in ("cpu family", "model", "stepping")
        ),
        "vector": [flag for flag in VECTOR_FLAGS if flag in flags],
    }


def _workload() -> int:
    total = sum(range(2_000_000))
    table: dict[str, int] = {}
    for i in range(150_000):
        key = f"variant-{i % 5000}"
        table[key] = table.get(key, 0) + len(key)
    words = " ".join(table).split()
    return total + len(sorted(words, key=str.lower))


def probe_s(repeat: int = 9) -> float:
    """The best wall time, in seconds, of the fixed workload over `repeat` runs: what the
    machine can do (a median would also measure what else runs beside it, which the record's
    load average says)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        _workload()
        times.append(time.perf_counter() - started)
    return round(min(times), 3)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def describe(probe: bool = True) -> dict[str, Any]:
    """The machine line of a record (`probe`: also measure `probe_s`, about 1-2 s)."""
    found: dict[str, Any] = {
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        **cpu(),
        "python": platform.python_version(),
        "load": load(),
    }
    if probe:
        found["probe_s"] = probe_s()
    return found


def relative(seconds: float, probe: float) -> float:
    """`seconds` in units of the machine's probe: comparable across machines of one kind."""
    return round(seconds / probe, 1) if probe > 0 else float("nan")


if __name__ == "__main__":
    print(json.dumps(describe(), indent=1))
