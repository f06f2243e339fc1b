"""torch.compile(fn, backend="spyre"): decompositions, compile-time rejection, eager parity."""

from __future__ import annotations

import pytest
import torch

from backend_under_test import compile as spyre_compile
from backend_under_test import rules

DEVICE = "spyre"


def _model_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    hidden = torch.relu(x @ w)
    return torch.softmax(hidden, dim=-1) * 2 + hidden.sum(dim=0)


def test_compiled_matches_eager() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, w = torch.randn(8, 16).to(DEVICE), torch.randn(16, 4).to(DEVICE)
    compiled = torch.compile(_model_step, backend="spyre")
    result = compiled(x, w)
    assert result.device.type == DEVICE
    assert torch.equal(result.cpu(), _model_step(x, w).cpu())
    assert torch.spyre.stats()["compiled_graphs"] >= 1


def test_integer_powers_become_multiplications() -> None:
    torch._dynamo.reset()
    x = torch.linspace(-2, 2, 12).reshape(3, 4).to(DEVICE)

    def powers(t: torch.Tensor) -> torch.Tensor:
        return torch.pow(t, 3.0) + t**2 + t.square() - t**-1 + t.abs() ** 0.5

    result = torch.compile(powers, backend="spyre")(x)
    host = x.cpu()
    expected = host * host * host + host * host + host * host - 1 / host + host.abs().sqrt()
    torch.testing.assert_close(result.cpu(), expected)


def test_decomposition_table_has_the_spyre_rewrites() -> None:
    table = spyre_compile.decompositions()
    assert torch.ops.aten.pow.Tensor_Scalar in table
    assert torch.ops.aten.square.default in table


def test_compiled_backward_matches_eager() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    base = torch.randn(5, 3)
    x = base.to(DEVICE).requires_grad_()
    torch.compile(lambda t: (t**3).sum(), backend="spyre")(x).backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad.cpu(), 3 * base * base)


def test_unlowerable_op_is_rejected_at_compile_time() -> None:
    torch._dynamo.reset()
    x = torch.ones(3, device=DEVICE)
    before = torch.spyre.stats()["ops_executed"]
    with pytest.raises(Exception) as caught:
        torch.compile(lambda t: torch.pow(t, 2.5) + 1, backend="spyre")(x)
    message = str(caught.value)
    assert "NotImplementedError: spyre cannot lower aten::pow (compile)" in message
    assert "torch.exp(2.5 * torch.log(x))" in message
    assert isinstance(getattr(caught.value, "inner_exception", None), NotImplementedError)
    # rejected before any kernel ran
    assert torch.spyre.stats()["ops_executed"] == before


def test_compile_respects_permissive(permissive: None) -> None:
    torch._dynamo.reset()
    x = torch.full((3,), 4.0, device=DEVICE)
    result = torch.compile(lambda t: torch.pow(t, 2.5), backend="spyre")(x)
    torch.testing.assert_close(result.cpu(), torch.full((3,), 32.0))
    assert not rules.SWITCHES.fp16_compute or rules.SWITCHES.permissive
