"""Counters of the emulated device, read through `torch.spyre.stats()`."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any

from backend_under_test import memory, rules

_LOCK = threading.RLock()


class _Totals:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.ops_executed = 0
        self.ops_by_name: Counter[str] = Counter()
        self.kernel_time_us = 0.0
        self.op_sticks = 0
        self.flops = 0.0
        self.scratchpad_spills = 0
        self.h2d_transfers = 0
        self.h2d_sticks = 0
        self.d2h_transfers = 0
        self.d2h_sticks = 0
        self.device_copies = 0
        self.fp16_compute_ops = 0
        self.rejected_ops = 0
        self.compiled_graphs = 0
        self.compile_rejections = 0


TOTALS = _Totals()
_op_cost = rules.op_cost
# (op name, sticks, elements, flops) -> executed ops not yet added to TOTALS. Counting one
# dict entry per op is what the small-op path can afford; `fold` adds them up when the
# counters are read (or the table grows), with the cost model applied once per key.
_PENDING: defaultdict[tuple[str, int, int, float], int] = defaultdict(int)
_PENDING_LIMIT = 4096


def record_op(name: str, sticks: int, elements: int, flops: float) -> None:
    """Account one executed op with its estimated kernel time."""
    # No lock: the GIL keeps `+=` on a dict entry whole (no call runs inside it).
    _PENDING[(name, sticks, elements, flops)] += 1
    fold_if_large()


def fold_if_large() -> None:
    """`fold` once the pending table holds many keys (the small-op path calls this whenever
    it meets a new shape, which is when it may add keys)."""
    if len(_PENDING) > _PENDING_LIMIT:
        fold()


def fold() -> None:
    """Add the pending op counts to the totals (see `_PENDING`)."""
    with _LOCK:
        totals = TOTALS
        pending = _PENDING
        # pop, not clear: an op counted by another thread meanwhile stays pending
        for key in list(pending):
            count = pending.pop(key, 0)
            if not count:
                continue
            name, sticks, elements, flops = key
            cost = _op_cost(sticks, elements, flops)
            totals.ops_executed += count
            totals.ops_by_name[name] += count
            totals.kernel_time_us += cost.kernel_us * count
            totals.op_sticks += sticks * count
            if flops:
                totals.flops += flops * count
            if cost.spilled:
                totals.scratchpad_spills += count


def record_device_copy(sticks: int, elements: int) -> None:
    """A device-to-device copy is a kernel too."""
    TOTALS.device_copies += 1
    record_op("copy_", 2 * sticks, elements, 0.0)


def record_transfer(direction: str, sticks: int) -> None:
    """Account one host<->device transfer in sticks."""
    with _LOCK:
        if direction == "h2d":
            TOTALS.h2d_transfers += 1
            TOTALS.h2d_sticks += sticks
        else:
            TOTALS.d2h_transfers += 1
            TOTALS.d2h_sticks += sticks


def record_rejected(name: str) -> None:
    with _LOCK:
        TOTALS.rejected_ops += 1


def count_fp16() -> None:
    with _LOCK:
        TOTALS.fp16_compute_ops += 1


def record_compiled_graph(rejected: bool = False) -> None:
    with _LOCK:
        if rejected:
            TOTALS.compile_rejections += 1
        else:
            TOTALS.compiled_graphs += 1


def snapshot() -> dict[str, Any]:
    """Every counter as plain data (the value of `torch.spyre.stats()`)."""
    counters = memory.COUNTERS
    with _LOCK:
        fold()
        return {
            "ops_executed": TOTALS.ops_executed,
            "ops_by_name": dict(TOTALS.ops_by_name.most_common()),
            "estimated_kernel_time_us": round(TOTALS.kernel_time_us, 3),
            "op_sticks": TOTALS.op_sticks,
            "flops": TOTALS.flops,
            "scratchpad_spills": TOTALS.scratchpad_spills,
            "h2d_transfers": TOTALS.h2d_transfers,
            "h2d_sticks": TOTALS.h2d_sticks,
            "d2h_transfers": TOTALS.d2h_transfers,
            "d2h_sticks": TOTALS.d2h_sticks,
            "device_copies": TOTALS.device_copies,
            "fp16_compute_ops": TOTALS.fp16_compute_ops,
            "rejected_ops": TOTALS.rejected_ops,
            "compiled_graphs": TOTALS.compiled_graphs,
            "compile_rejections": TOTALS.compile_rejections,
            "allocated_bytes": counters.allocated,
            "peak_allocated_bytes": counters.peak,
            "allocations": counters.allocations,
            "frees": counters.frees,
            "permissive": rules.SWITCHES.permissive,
            "fp16_compute": rules.SWITCHES.fp16_compute,
        }


def reset() -> None:
    """Zero the op and transfer counters (memory counters follow the live allocations)."""
    with _LOCK:
        _PENDING.clear()
        TOTALS.reset()
    memory.reset_peak()
