"""The small-op path of the fallback gives what the generic path gives, rules included.

Every case runs twice on fresh device tensors: once as it runs normally, once with the
small-op path switched off (`kernels._fast_call` declines every call), and the two must agree
on values, dtype, device, shape, strides, storage offset, the storage's size and flags, and
every counter of `torch.spyre.stats()` the op moves.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
import torch

from backend_under_test import kernels, rules

DEVICE = "spyre"
Case = Callable[[dict[str, torch.Tensor]], Any]

# Counters an op moves; memory ones are compared as the difference over the call.
_OP_COUNTERS = ("ops_executed", "ops_by_name", "estimated_kernel_time_us", "op_sticks", "flops")
_MEMORY_COUNTERS = ("allocated_bytes", "allocations")


def _inputs() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    host = {
        "x": torch.randn(4, 6),
        "y": torch.randn(4, 6),
        "col": torch.randn(4, 1),
        "row": torch.randn(1, 6),
        "half": torch.randn(4, 6).to(torch.float16),
        "bf16": torch.randn(4, 6).to(torch.bfloat16),
        "ints": torch.arange(24, dtype=torch.int32).reshape(4, 6),
        "mask": torch.arange(24).reshape(4, 6) % 3 == 0,
        "scalar": torch.tensor(2.5),
    }
    return {name: value.to(DEVICE) for name, value in host.items()}


CASES: dict[str, Case] = {
    "add": lambda t: t["x"] + t["y"],
    "mul": lambda t: t["x"] * t["y"],
    "relu": lambda t: torch.relu(t["x"]),
    "sum": lambda t: t["x"].sum(),
    "sum_dim": lambda t: t["x"].sum(dim=1),
    "mean_keepdim": lambda t: t["x"].mean(0, keepdim=True),
    "broadcast": lambda t: t["col"] + t["row"],
    "broadcast_scalar_tensor": lambda t: t["x"] * t["scalar"],
    "python_scalar": lambda t: t["x"] * 3,
    "wrapped_scalar_remainder": lambda t: torch.remainder(t["bf16"], 2.5),
    "promote_int_float": lambda t: t["ints"] + t["x"],
    "promote_half_float": lambda t: t["half"] * t["x"],
    "promote_bool_int": lambda t: t["mask"] + t["ints"],
    "compare": lambda t: t["x"] > t["y"],
    "where": lambda t: torch.where(t["mask"], t["x"], t["y"]),
    "transposed_inputs": lambda t: t["x"].t() + t["y"].t(),
    "strided_input": lambda t: t["x"][:, ::2] * 2,
    "offset_input": lambda t: torch.relu(t["x"][1:, 2:]),
    "size_one_transposed": lambda t: t["row"].t() + 1,
    "size_one_row_of_transposed": lambda t: t["x"].t()[:1] + 1,
    "expanded_input": lambda t: t["row"].expand(4, 6) - t["x"],
    "channels_last": lambda t: torch.relu(
        t["x"].reshape(1, 4, 3, 2).contiguous(memory_format=torch.channels_last)
    ),
    "empty_result": lambda t: t["x"][:0] + 1,
    "cat": lambda t: torch.cat([t["x"], t["y"]]),
    "out": lambda t: torch.add(t["x"], t["y"], out=torch.empty(4, 6, device=DEVICE)),
    "out_resized": lambda t: torch.mul(t["x"], 2, out=torch.empty(0, device=DEVICE)),
    "in_place": lambda t: t["x"].add_(t["y"]),
    "in_place_broadcast": lambda t: t["x"].mul_(t["row"]),
    "with_kwarg": lambda t: torch.add(t["x"], t["y"], alpha=2),
    "matmul_fp16": lambda t: t["x"] @ t["y"].t(),
}


def _declined(*args: Any) -> Any:
    return kernels._NOT_SIMPLE


def _description(result: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(result, (list, tuple)):
        return [_description(r, tensors) for r in result]
    assert isinstance(result, torch.Tensor)
    storage = result.untyped_storage()
    return {
        "values": result.cpu(),
        "dtype": result.dtype,
        "device": result.device,
        "shape": result.shape,
        "stride": result.stride(),
        "offset": result.storage_offset(),
        "nbytes": storage.nbytes(),
        "resizable": storage.resizable(),
        "storage_device": storage.device,
        "version": result._version,
        "aliases": sorted(n for n, t in tensors.items() if result.is_set_to(t)),
        "inputs": {n: t.cpu() for n, t in tensors.items()},
    }


def _run(case: Case) -> tuple[Any, dict[str, Any]]:
    tensors = _inputs()
    torch.spyre.reset_stats()
    before = torch.spyre.stats()
    result = case(tensors)
    after = torch.spyre.stats()
    moved = {k: after[k] for k in _OP_COUNTERS}
    moved.update({k: after[k] - before[k] for k in _MEMORY_COUNTERS})
    return _description(result, tensors), moved


def _same(fast: Any, generic: Any) -> None:
    if isinstance(fast, list):
        assert len(fast) == len(generic)
        for f, g in zip(fast, generic, strict=True):
            _same(f, g)
        return
    for key in fast:
        if key in ("values",):
            assert torch.equal(fast[key], generic[key]), key
        elif key == "inputs":
            for name in fast[key]:
                assert torch.equal(fast[key][name], generic[key][name]), name
        else:
            assert fast[key] == generic[key], key


def _calls_taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    taken: list[str] = []
    original = kernels._fast_call

    def counting(op: Any, plan: Any, args: Any) -> Any:
        taken.append(plan.name)  # kept if the call raises on the fast path
        result = original(op, plan, args)
        if result is kernels._NOT_SIMPLE:
            taken.pop()
        return result

    monkeypatch.setattr(kernels, "_fast_call", counting)
    return taken


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_path_matches_generic_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, fast_counters = _run(CASES[name])
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "_fast_call", _declined)
        generic, generic_counters = _run(CASES[name])
    _same(fast, generic)
    assert fast_counters == generic_counters


def test_the_common_cases_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _calls_taken(monkeypatch)
    for name in ("add", "mul", "relu", "sum", "broadcast", "promote_int_float", "strided_input"):
        taken.clear()
        _run(CASES[name])
        assert taken, name
    for name in ("out", "in_place", "with_kwarg", "cat", "matmul_fp16"):
        taken.clear()
        _run(CASES[name])
        assert not taken, name


def test_dtype_rule_fires_on_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _calls_taken(monkeypatch)
    ints = torch.arange(3).to(DEVICE)
    double = torch.tensor(2.0, dtype=torch.float64)  # a CPU 0-dim tensor promotes to float64
    # torch.mul, not `*`: Tensor.__mul__ turns any TypeError into NotImplemented.
    with pytest.raises(TypeError, match=r"dtype torch\.float64 \(op result\)"):
        torch.mul(ints, double)
    assert taken == ["mul"]
    previous = rules.set_permissive(True)
    try:
        assert torch.mul(ints, double).dtype == torch.float64
    finally:
        rules.set_permissive(previous)


def test_unlowerable_rule_fires_before_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _calls_taken(monkeypatch)
    x = torch.ones(3, device=DEVICE)
    with pytest.raises(NotImplementedError, match="aten::pow"):
        x**3.0  # noqa: B018
    assert torch.spyre.stats()["rejected_ops"] >= 1
    assert taken == []


def test_fp16_compute_ops_never_take_the_fast_path() -> None:
    for name in rules.FP16_COMPUTE_OPS:
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            assert not kernels.plan_for(getattr(packet, overload)).simple, (name, overload)


def test_fast_path_results_free_their_memory() -> None:
    x = torch.randn(4, 6).to(DEVICE)
    # Garbage an earlier test of this process left (cycles) would be freed mid-loop and
    # read as the loop giving memory back: collect it before the count starts.
    gc.collect()
    start = torch.spyre.memory_allocated()
    for _ in range(1000):
        y = x + x
        z = y.sum()
    del y, z
    assert torch.spyre.memory_allocated() == start
