"""`torch.compile(fn, backend="spyre")`: an aot_autograd backend for the spyre device.

Dynamo captures the graph; aot_autograd traces forward and backward down to aten with the
Spyre decompositions below (integer powers become multiplications, and so on); the graph
is then checked against the Spyre rules *before* anything runs, so an unlowerable op or a
refused dtype fails at compile time with the same message eager mode gives. The checked
graph runs op by op on the device, so compiled results match eager.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from backend_under_test import kernels, rules, stats

aten = torch.ops.aten
_MAX_UNROLLED_POWER = 8


def _integer_power(x: torch.Tensor, exponent: int) -> torch.Tensor:
    """x ** exponent by repeated squaring: log2(n) multiplications, all lowerable."""
    result: torch.Tensor | None = None
    base = x
    n = exponent
    while n:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if n:
            base = base * base
    assert result is not None
    return result


def _pow_tensor_scalar(x: torch.Tensor, exponent: Any) -> Any:
    value = float(exponent) if isinstance(exponent, (int, float)) else None
    if value is not None and value.is_integer() and abs(value) <= _MAX_UNROLLED_POWER:
        n = int(value)
        if n == 0:
            return torch.ones_like(x)
        product = _integer_power(x, abs(n))
        return product if n > 0 else torch.reciprocal(product)
    if value == 0.5:
        return torch.sqrt(x)
    if value == -0.5:
        return torch.rsqrt(x)
    return NotImplemented  # leave it in the graph: the rule check rejects it with advice


def _square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The Spyre decomposition table: aten overload -> replacement."""
    from torch._decomp import get_decompositions

    table: dict[Any, Callable[..., Any]] = dict(
        get_decompositions(
            [
                aten.addcmul,
                aten.addcdiv,
                aten.lerp,
                aten.hardswish,
                aten.hardsigmoid,
                aten.silu,
                aten.mish,
                aten.softplus,
                aten.elu,
                aten.leaky_relu,
                aten.logit,
            ]
        )
    )
    table[aten.pow.Tensor_Scalar] = _pow_tensor_scalar
    table[aten.square.default] = _square
    return table


def _example(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return value.meta.get("val", value)
    if isinstance(value, (list, tuple)):
        return type(value)(_example(v) for v in value)
    return value


def check_graph(gm: torch.fx.GraphModule) -> None:
    """Raise the eager-mode error for the first op or dtype the device refuses."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = kernels.plan_for(node.target).name
        if name in rules.UNLOWERABLE_OPS and not rules.SWITCHES.permissive:
            stats.record_compiled_graph(rejected=True)
            rules.check_op(name, tuple(_example(a) for a in node.args), where="compile")
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and rules.refused_dtype(value.dtype):
            stats.record_compiled_graph(rejected=True)
            rules.check_dtype(value.dtype, f"compile, result of aten::{name}")


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    from torch._functorch.aot_autograd import make_boxed_func

    check_graph(gm)
    stats.record_compiled_graph()
    return make_boxed_func(gm.forward)


def spyre_backend(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
    """The `spyre` compile backend (registered as `torch.compile(backend="spyre")`)."""
    from torch._dynamo.backends.common import aot_autograd

    compiler = aot_autograd(
        fw_compiler=_compile_graph,
        bw_compiler=_compile_graph,
        decompositions=_decomposition_table(),
    )
    return compiler(gm, example_inputs, **kwargs)


@functools.cache
def _decomposition_table() -> dict[Any, Callable[..., Any]]:
    return decompositions()
