"""What the small-op path relies on: geometry read on every call, aliases dropped with their
storage, the adopted result as its tensor's alias, counters exact under threads, and Python
bindings called only where they run the very overload the dispatcher asked for.

The host-alias cache is keyed by a tensor's data pointer and geometry, read from the tensor
on every call and never remembered per tensor object: a tensor's geometry can change in
place without any kernel of the backend running (`transpose_` and friends are composite
kernels, `x.data = y` swaps the metadata directly).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import weakref
from collections.abc import Callable

import pytest
import torch

from backend_under_test import device as spyre
from backend_under_test import kernels, memory, rules, stats
from tests.testing.paths import REPO_ROOT

DEVICE = "spyre"


def _other(host: torch.Tensor) -> torch.Tensor:
    values = torch.arange(100.0, 106.0)
    return values if host.device.type == "cpu" else values.to(DEVICE)


def _other_ints(host: torch.Tensor) -> torch.Tensor:
    ints = torch.arange(10, 16, dtype=torch.int32)
    return ints if host.device.type == "cpu" else ints.to(DEVICE)


# Each changes a tensor's geometry (or storage, or dtype) in place; applied to a device
# tensor and to its CPU twin alike.
IN_PLACE_CHANGES: dict[str, Callable[[torch.Tensor], object]] = {
    "transpose_": lambda t: t.transpose_(0, 1),
    "t_": lambda t: t.t_(),
    "as_strided_": lambda t: t.as_strided_((3, 4), (1, 6), 2),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "squeeze_": lambda t: t.unsqueeze_(1).squeeze_(1).transpose_(0, 1),
    "resize_smaller": lambda t: t.resize_(2, 3),
    "resize_larger": lambda t: t.resize_(5, 6).narrow(0, 4, 1).fill_(7.0),
    "set_other_tensor": lambda t: t.set_(_other(t)),  # type: ignore[call-overload]
    "set_same_storage_offset": lambda t: t.set_(t.untyped_storage(), 6, (3, 6), (6, 1)),
    "set_data": lambda t: setattr(t, "data", _other(t)),
    "set_data_other_dtype": lambda t: setattr(t, "data", _other_ints(t)),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_CHANGES))
def test_a_geometry_changed_in_place_is_never_read_stale(name: str) -> None:
    host = torch.arange(24.0).reshape(4, 6)
    x = host.to(DEVICE)
    assert torch.equal((x + 1).cpu(), host + 1)  # caches x's host alias
    assert torch.equal(torch.relu(x).cpu(), torch.relu(host))
    IN_PLACE_CHANGES[name](x)
    IN_PLACE_CHANGES[name](host)
    assert (x.shape, x.stride(), x.storage_offset(), x.dtype) == (
        host.shape,
        host.stride(),
        host.storage_offset(),
        host.dtype,
    )
    assert torch.equal((x + 1).cpu(), host + 1)
    assert torch.equal(torch.relu(x).cpu(), torch.relu(host))
    assert torch.equal(x.sum().cpu(), host.sum())


def test_aliases_are_dropped_with_their_storage() -> None:
    x = torch.randn(4, 6).to(DEVICE)
    y = x + 1  # caches x's alias; y's own alias is its seed until first read
    _ = y * 2  # reads y: y's alias is cached too
    pointers = {x.data_ptr(), y.data_ptr()}
    assert {key[0] for key in memory._ALIASES} >= pointers
    del x, y, _
    gc.collect()
    assert not {key[0] for key in memory._ALIASES} & pointers
    assert not set(memory._LIVE) & pointers


def test_a_freed_pointer_reused_by_a_new_storage_reads_the_new_bytes() -> None:
    for value in range(200):
        x = torch.full((4, 6), float(value)).to(DEVICE)
        assert torch.equal((x + 1).cpu(), torch.full((4, 6), value + 1.0))
        del x


def test_an_adopted_result_reads_its_own_bytes_as_the_next_input() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    da, db = a.to(DEVICE), b.to(DEVICE)
    total = da + db
    live = memory._LIVE[total.untyped_storage().data_ptr()]
    assert live.seed is not None  # the CPU result the device storage adopted
    chained = total * 2 + total.t().t()
    assert torch.equal(chained.cpu(), (a + b) * 2 + (a + b))
    # A view with other geometry does not take the seed: it gets an alias of its own.
    assert torch.equal((total.t() + 1).cpu(), (a + b).t() + 1)
    assert torch.equal((total[1:, ::2] * 3).cpu(), (a + b)[1:, ::2] * 3)
    # Writes through the device tensor are seen through the seed (same bytes).
    total.add_(1)
    assert torch.equal((total * 1).cpu(), a + b + 1)


def test_a_dropped_result_frees_its_seed_and_owner_at_once() -> None:
    # The small-op path registers its result's storage inline (not through memory.register):
    # once the device tensor is gone, its seed and owner must be too, and its charge given
    # back, even when the alias cache held the seed as the result's alias.
    x = torch.randn(4, 6).to(DEVICE)
    y = x + 1
    _ = y * 2  # y read as an input: its seed is now also its cached alias
    live = memory._LIVE[y.untyped_storage().data_ptr()]
    assert live.seed is not None and live.alias_keys
    freed: list[str] = []
    seed = weakref.ref(live.seed, lambda _: freed.append("seed"))
    owner = weakref.ref(live.owner, lambda _: freed.append("owner"))
    allocated = memory.COUNTERS.allocated
    del live, y, _
    assert seed() is None and owner() is None  # no gc.collect(): reference counting frees them
    assert sorted(freed) == ["owner", "seed"]
    assert memory.COUNTERS.allocated == allocated - 2 * 128


def test_a_lazily_negated_view_of_an_adopted_result_is_not_read_as_the_result() -> None:
    x = torch.randn(4, 6).to(DEVICE) + 0  # adopted: has a seed
    negated = torch._neg_view(x)
    assert negated.is_neg()
    assert torch.equal((negated + 1).cpu(), -x.cpu() + 1)
    assert torch.equal(negated.clone().cpu(), -x.cpu())


def test_counters_read_the_same_twice_and_reset_drops_pending_ops() -> None:
    x = torch.randn(4, 6).to(DEVICE)
    spyre.reset_stats()
    for _ in range(10):
        (x + x).sum()
    first = spyre.stats()
    assert first == spyre.stats()
    assert first["ops_executed"] == 20
    assert first["ops_by_name"] == {"add": 10, "sum": 10}
    for _ in range(5):
        x * x
    spyre.reset_stats()
    assert spyre.stats()["ops_executed"] == 0
    assert not stats._PENDING


def test_the_cost_model_is_applied_as_if_op_by_op() -> None:
    x = torch.randn(4, 6).to(DEVICE)
    spyre.reset_stats()
    for _ in range(7):
        x + x
    counted = spyre.stats()
    sticks = 3 * rules.transfer_sticks(x.shape, x.element_size())  # two inputs, one result
    cost = rules.op_cost(sticks, 24, 0.0)
    assert counted["op_sticks"] == 7 * sticks
    assert counted["estimated_kernel_time_us"] == round(7 * cost.kernel_us, 3)


def test_counters_stay_exact_when_threads_run_ops_at_once() -> None:
    x = torch.randn(4, 6).to(DEVICE)
    gc.collect()
    spyre.reset_stats()
    before = spyre.stats()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(1500):
                y = x + x
                del y
                (x * x).sum()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        threads = [threading.Thread(target=work) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    gc.collect()
    after = spyre.stats()
    assert after["ops_executed"] == 3 * 1500 * 3
    assert after["ops_by_name"] == {"add": 4500, "mul": 4500, "sum": 4500}
    made = after["allocations"] - before["allocations"]
    assert made == 3 * 1500 * 3
    assert after["frees"] - before["frees"] == made
    assert after["allocated_bytes"] == before["allocated_bytes"]


aten = torch.ops.aten


def test_a_binding_stands_in_only_for_the_overload_it_runs() -> None:
    functions = torch._C._VariableFunctions
    assert kernels.plan_for(aten.add.Tensor).binding is functions.add
    assert kernels.plan_for(aten.mul.Tensor).binding is functions.mul
    assert kernels.plan_for(aten.relu.default).binding is functions.relu
    assert kernels.plan_for(aten.where.self).binding is functions.where
    # Scalar overloads, int lists: the binding could pick another overload for such calls.
    assert kernels.plan_for(aten.add.Scalar).binding is None
    assert kernels.plan_for(aten.sum.dim_IntList).binding is None
    # Not on the small-op path at all: in-place, out=, views.
    assert kernels.plan_for(aten.add_.Tensor).binding is None
    assert kernels.plan_for(aten.add.out).binding is None
    assert kernels.plan_for(aten.t.default).binding is None
    assert torch._C._len_torch_dispatch_stack() == 0  # the check leaves no mode behind


@pytest.mark.parametrize(
    "call",
    [
        lambda x, y: x + y,
        lambda x, y: x + 2,  # a Python number: the overload's own boxed call
        lambda x, y: x * torch.tensor(2.5),  # a CPU 0-dim tensor
        lambda x, y: x * y[0, 0],  # a device 0-dim tensor
        lambda x, y: torch.where(x > y, x, y),
        lambda x, y: torch.lerp(x, y, torch.full_like(x, 0.25)),
        lambda x, y: torch.relu(x - y),
    ],
    ids=["add", "python_number", "cpu_0dim", "device_0dim", "where", "lerp", "relu_sub"],
)
def test_calls_through_a_binding_match_cpu(call: Callable[..., torch.Tensor]) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    expected = call(a, b)
    got = call(a.to(DEVICE), b.to(DEVICE))
    assert got.device.type == DEVICE
    assert got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected)


def test_checking_bindings_imports_nothing_heavy() -> None:
    # TorchDispatchMode imports dynamo (seconds) on first use: the check must not use it.
    code = textwrap.dedent("""
        import sys
        import torch
        x = torch.randn(4, 4).to("spyre")
        for _ in range(3):
            (x + x).relu() * x
        print("torch._dynamo" in sys.modules, "sympy" in sys.modules)
    """)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]
