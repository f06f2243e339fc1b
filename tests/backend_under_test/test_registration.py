"""Which kernel each op reaches on `spyre`: its own bound fallback, or the boxed one."""

from __future__ import annotations

import torch

from backend_under_test import kernels

DEVICE = "spyre"


def _aten_ops_with(key: str) -> set[str]:
    return {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    }


def _decomposing() -> set[str]:
    """aten ops whose CompositeImplicitAutograd kernel serves a backend with no kernel of
    its own for them."""
    return (
        _aten_ops_with("CompositeImplicitAutograd")
        - _aten_ops_with("CompositeExplicitAutograd")
        - _aten_ops_with("CompositeExplicitAutogradNonFunctional")
    )


def test_every_aten_op_with_a_cpu_kernel_has_a_spyre_kernel_or_decomposes() -> None:
    missing = _aten_ops_with("CPU") - _aten_ops_with("PrivateUse1") - _decomposing()
    assert not missing, sorted(missing)[:10]


def test_an_op_that_decomposes_for_spyre_still_does() -> None:
    # An op with a CPU kernel and a CompositeImplicitAutograd one (`mish_backward` on 2.13)
    # decomposes for PrivateUse1, autograd included; a kernel of the backend's own would
    # replace that decomposition.
    decomposing = (
        _aten_ops_with("CompositeImplicitAutograd")
        - _aten_ops_with("CompositeExplicitAutograd")
        - _aten_ops_with("CompositeExplicitAutogradNonFunctional")
    )
    replaced = [
        name
        for name in sorted(decomposing & _aten_ops_with("CPU"))
        if "[math kernel]" not in _table_entry(name, "PrivateUse1")
        or "[math kernel]" not in _table_entry(name, "AutogradPrivateUse1")
    ]
    assert not replaced, replaced


def _table_entry(name: str, key: str) -> str:
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith(f"{key}:"):
            return line
    return ""


def test_registration_defines_no_op_of_its_own() -> None:
    # A kernel registered under a name aten does not define (another namespace's op, say
    # `quantized::linear_prepack_fp16` registered as `aten::linear_prepack_fp16`) would leave
    # an operator with no schema behind.
    schemaless = [
        name
        for name in _aten_ops_with("PrivateUse1")
        if "schema: (none)" in torch._C._dispatch_dump(name)
    ]
    assert not schemaless, schemaless[:10]


def test_a_bound_kernel_and_the_boxed_fallback_give_the_same_result() -> None:
    # relu reaches its own kernel; quantized and later ops reach the boxed fallback: the same
    # code behind both, called either way.
    host = torch.randn(4, 6)
    x = host.to(DEVICE)
    bound = kernels.kernel_for(torch.ops.aten.relu.default)(x)
    boxed = kernels.fallback(torch.ops.aten.relu.default, x)
    assert bound.device.type == boxed.device.type == DEVICE
    assert torch.equal(bound.cpu(), torch.relu(host))
    assert torch.equal(boxed.cpu(), torch.relu(host))
    assert "spyre_kernel_relu_default" in repr(kernels.kernel_for(torch.ops.aten.relu.default))
