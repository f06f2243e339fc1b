"""Each Spyre rule, and the text of its error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from backend_under_test import rules
from tests.testing.paths import REPO_ROOT

DEVICE = "spyre"


def test_allocations_are_whole_sticks() -> None:
    before = torch.spyre.memory_allocated()
    one = torch.empty(1, device=DEVICE)  # 4 bytes
    assert torch.spyre.memory_allocated() - before == 128
    two = torch.empty(33, device=DEVICE)  # 132 bytes
    assert torch.spyre.memory_allocated() - before == 128 + 256
    del one, two
    assert torch.spyre.memory_allocated() == before


def test_transfers_count_sticks_with_padded_rows() -> None:
    host = torch.zeros(3, 33)  # each row is 132 bytes: two sticks per row
    torch.spyre.reset_stats()
    on_device = host.to(DEVICE)
    assert torch.spyre.stats()["h2d_sticks"] == 6
    on_device.cpu()
    snapshot = torch.spyre.stats()
    assert (snapshot["h2d_transfers"], snapshot["d2h_transfers"], snapshot["d2h_sticks"]) == (
        1,
        1,
        6,
    )
    assert rules.transfer_sticks((2, 32), 4) == 2
    assert rules.transfer_sticks((64,), 2) == 1
    assert rules.transfer_sticks((), 4) == 1


def test_every_op_gets_an_estimated_kernel_time() -> None:
    x = torch.ones(64, 64, device=DEVICE)
    torch.spyre.reset_stats()
    y = x + x
    z = y.sum()
    snapshot = torch.spyre.stats()
    assert snapshot["ops_executed"] == 2
    assert snapshot["ops_by_name"] == {"add": 1, "sum": 1}
    assert snapshot["estimated_kernel_time_us"] >= 2 * rules.LAUNCH_US
    assert snapshot["op_sticks"] > 0
    assert z.item() == 2 * 64 * 64


def test_cost_model_uses_cores_and_scratchpads() -> None:
    small = rules.op_cost(sticks=4, work_elements=128, flops=0.0)
    assert small.cores == 4 and not small.spilled
    wide = rules.op_cost(sticks=10_000, work_elements=320_000, flops=0.0)
    assert wide.cores == rules.CORES and not wide.spilled
    per_core_limit = rules.CORES * rules.SCRATCHPAD_BYTES // rules.STICK_BYTES
    spilling = rules.op_cost(sticks=per_core_limit + rules.CORES, work_elements=0, flops=0.0)
    assert spilling.spilled
    bigger = rules.op_cost(sticks=20_000, work_elements=640_000, flops=0.0)
    assert bigger.kernel_us > wide.kernel_us > small.kernel_us >= rules.LAUNCH_US
    matmul = rules.op_cost(sticks=100, work_elements=0, flops=1e9)
    assert matmul.kernel_us > rules.op_cost(sticks=100, work_elements=0, flops=0.0).kernel_us


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_computes_in_fp16_and_returns_requested_dtype(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(16, 32).to(dtype), torch.randn(32, 8).to(dtype)
    result = a.to(DEVICE) @ b.to(DEVICE)
    assert result.dtype == dtype
    expected = (a.half() @ b.half()).to(dtype)
    assert torch.equal(result.cpu(), expected)
    assert torch.spyre.stats()["fp16_compute_ops"] > 0


def test_softmax_computes_in_fp16_and_the_switch_turns_it_off() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 50) * 4
    on_device = x.to(DEVICE)
    assert torch.equal(torch.softmax(on_device, -1).cpu(), torch.softmax(x.half(), -1).float())
    previous = rules.set_fp16_compute(False)
    try:
        assert torch.equal(torch.softmax(on_device, -1).cpu(), torch.softmax(x, -1))
        assert torch.equal((on_device @ on_device.t()).cpu(), x @ x.t())
    finally:
        rules.set_fp16_compute(previous)


def test_matmul_out_and_in_place_keep_their_tensors() -> None:
    torch.manual_seed(0)
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)
    out = torch.empty(4, 4, device=DEVICE)
    assert torch.mm(a.to(DEVICE), b.to(DEVICE), out=out) is out
    assert torch.equal(out.cpu(), (a.half() @ b.half()).float())
    target = c.to(DEVICE)
    target.addmm_(a.to(DEVICE), b.to(DEVICE))
    assert torch.equal(target.cpu(), torch.addmm(c.half(), a.half(), b.half()).float())


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.int64,
        torch.int32,
        torch.int8,
        torch.bool,
    ],
)
def test_supported_dtypes(dtype: torch.dtype) -> None:
    assert torch.ones(3, dtype=dtype).to(DEVICE).dtype == dtype


def test_float64_is_refused_with_advice() -> None:
    with pytest.raises(TypeError, match=r"dtype torch\.float64.*use torch\.float32"):
        torch.ones(3, dtype=torch.float64).to(DEVICE)
    with pytest.raises(TypeError, match=r"torch\.float64"):
        torch.ones(3, device=DEVICE).double()
    with pytest.raises(TypeError, match=r"torch\.float64"):
        torch.zeros(2, dtype=torch.float64, device=DEVICE)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_is_refused_with_advice(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=rf"dtype {dtype}.*real and imaginary"):
        torch.ones(3, dtype=dtype).to(DEVICE)


def test_ops_producing_float64_are_refused() -> None:
    x = torch.ones(3, device=DEVICE)
    with pytest.raises(TypeError, match="float64"):
        torch.float_power(x, 2)


def test_pow_is_unlowerable_with_the_public_rewrite() -> None:
    x = torch.ones(3, device=DEVICE)
    with pytest.raises(NotImplementedError, match=r"aten::pow .*rewrite it as x \* x \* x"):
        torch.pow(x, 3.0)
    with pytest.raises(NotImplementedError, match=r"rewrite it as x \* x "):
        x**2  # noqa: B018
    with pytest.raises(NotImplementedError, match=r"torch\.sqrt\(x\)"):
        x.pow(0.5)
    with pytest.raises(NotImplementedError, match=r"torch\.exp\(2\.5 \* torch\.log\(x\)\)"):
        x.pow(2.5)


def test_rules_match_op_names_not_overloads() -> None:
    x = torch.ones(3, device=DEVICE)
    out = torch.empty(3, device=DEVICE)
    for call in (
        lambda: x.pow_(3.0),
        lambda: torch.pow(x, 3.0, out=out),
        lambda: torch.pow(x, x),
        lambda: torch.pow(2.0, x),
    ):
        with pytest.raises(NotImplementedError, match="aten::pow"):
            call()


def test_permissive_switch_turns_rules_off(permissive: None) -> None:
    x = torch.full((3,), 2.0, device=DEVICE)
    assert torch.equal(torch.pow(x, 3.0).cpu(), torch.full((3,), 8.0))
    assert x.double().dtype == torch.float64
    torch.manual_seed(0)
    a = torch.randn(8, 8)
    assert torch.equal((a.to(DEVICE) @ a.to(DEVICE)).cpu(), a @ a)


def test_permissive_environment_variable() -> None:
    probe = (
        "import torch; x = torch.full((2,), 2.0, dtype=torch.float64).to('spyre');"
        "print(torch.pow(x, 3.0).cpu().tolist(), torch.spyre.stats()['permissive'])"
    )
    env = dict(os.environ, SPYRE_EMU_PERMISSIVE="1")
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[8.0, 8.0] True"
