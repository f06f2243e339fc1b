"""OpInfo templates: the checks upstream test/test_ops.py makes, against the CPU as reference,
and against references the torch under test does not compute (`numpy_ref`, `python_ref`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from suites.templates import Context
from suites.templates.compare import (
    assert_close,
    move_sample,
    reference_samples,
    reference_tolerances,
    reseed,
    samples,
    to_cpu,
)

_NO_SAMPLES = "the OpInfo yields no sample inputs for this dtype"


class NoSamples(Exception):
    """Nothing to test (a template never passes vacuously)."""


def _call(fn: Callable[..., Any], sample: Any) -> Any:
    # Same seed before every call: random ops (the device draws from the CPU generator)
    # then give comparable results across devices and variants.
    reseed(0)
    return fn(sample.input, *sample.args, **sample.kwargs)


def compare_cpu(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """TestCommon.test_compare_cpu: results on the device match the CPU."""
    ran = 0
    for sample in samples(op, dtype, limit=ctx.max_samples):
        expected = sample.output_process_fn_grad(_call(op, sample))
        dev = move_sample(sample, device)
        actual = dev.output_process_fn_grad(_call(op, dev))
        assert_close(
            actual, expected, dtype=dtype, atol=ctx.atol, rtol=ctx.rtol, what=f"sample {ran}"
        )
        ran += 1
    if not ran:
        raise NoSamples(_NO_SAMPLES)


def _like(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value, device=device)
    if isinstance(value, tuple | list):
        return type(value)(_like(v, device) for v in value)
    raise NoSamples("result is not a tensor or a tuple of tensors")


def out(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """TestCommon.test_out: `out=` on the device gives the CPU result, in the given tensor."""
    ran = 0
    for sample in samples(op, dtype, limit=ctx.max_samples):
        expected = _call(op, sample)
        if not isinstance(expected, torch.Tensor | tuple | list):
            continue
        dev = move_sample(sample, device)
        try:
            out_arg = _like(to_cpu(expected), device)
        except NoSamples:
            continue
        reseed(0)
        result = op(dev.input, *dev.args, **dev.kwargs, out=out_arg)
        if isinstance(out_arg, torch.Tensor):
            assert result is out_arg, "op did not return its out= tensor"
        assert_close(
            out_arg, expected, dtype=dtype, atol=ctx.atol, rtol=ctx.rtol, what=f"out= sample {ran}"
        )
        ran += 1
    if not ran:
        raise NoSamples(_NO_SAMPLES)


def noncontiguous_samples(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """TestCommon.test_noncontiguous_samples: noncontiguous inputs give the contiguous result."""
    ran = 0
    for sample in samples(op, dtype, limit=ctx.max_samples):
        dev = move_sample(sample, device)
        expected = dev.output_process_fn_grad(_call(op, dev))
        noncontig = dev.noncontiguous()
        actual = noncontig.output_process_fn_grad(_call(op, noncontig))
        assert_close(
            actual,
            expected,
            dtype=dtype,
            atol=ctx.atol,
            rtol=ctx.rtol,
            what=f"noncontiguous sample {ran}",
        )
        ran += 1
    if not ran:
        raise NoSamples(_NO_SAMPLES)


def _variants(op: Any) -> list[tuple[str, Callable[..., Any], bool]]:
    found: list[tuple[str, Callable[..., Any], bool]] = []
    if op.method_variant is not None:
        found.append(("method", op.method_variant, False))
    if op.inplace_variant is not None:
        found.append(("inplace", op.inplace_variant, True))
    for alias in getattr(op, "aliases", ()) or ():
        if alias.op is not None:
            found.append((f"alias {alias.name}", alias.op, False))
        if alias.method_variant is not None:
            found.append((f"alias {alias.name} method", alias.method_variant, False))
        if alias.inplace_variant is not None:
            found.append((f"alias {alias.name} inplace", alias.inplace_variant, True))
    return found


def variant_consistency_eager(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """TestCommon.test_variant_consistency_eager: method, in-place and alias variants agree."""
    ran = 0
    variants = _variants(op)
    for sample in samples(op, dtype, limit=ctx.max_samples):
        dev = move_sample(sample, device)
        expected = _call(op, dev)
        for label, fn, inplace in variants:
            if inplace:
                # In-place needs the result to fit the input (no broadcast, same dtype).
                if (
                    sample.broadcasts_input
                    or not isinstance(expected, torch.Tensor)
                    or expected.dtype != dev.input.dtype
                    or expected.shape != dev.input.shape
                ):
                    continue
                target = dev.input.clone()
                reseed(0)
                actual = fn(target, *dev.args, **dev.kwargs)
            else:
                actual = _call(fn, dev)
            assert_close(
                actual,
                expected,
                dtype=dtype,
                atol=0.0,
                rtol=0.0,
                what=f"{label} variant, sample {ran}",
            )
        ran += 1
    if not ran:
        raise NoSamples(_NO_SAMPLES)


def _grad_inputs(sample: Any) -> list[torch.Tensor]:
    leaves: list[torch.Tensor] = []

    def collect(value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.requires_grad:
            leaves.append(value)
        elif isinstance(value, list | tuple):
            for v in value:
                collect(v)

    collect(sample.input)
    for arg in sample.args:
        collect(arg)
    for arg in sample.kwargs.values():
        collect(arg)
    return leaves


def _outputs(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.requires_grad else []
    if isinstance(value, list | tuple):
        return [t for v in value for t in _outputs(v)]
    return []


def backward(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """Gradients on the device match the CPU (upstream TestGradients names, against CPU)."""
    ran = 0
    for sample in samples(op, dtype, requires_grad=True, limit=ctx.max_samples):
        cpu_out = _outputs(sample.output_process_fn_grad(_call(op, sample)))
        cpu_in = _grad_inputs(sample)
        if not cpu_out or not cpu_in:
            continue
        reseed(1)
        grads_out = [torch.randn_like(t) for t in cpu_out]
        expected = torch.autograd.grad(cpu_out, cpu_in, grads_out, allow_unused=True)
        dev = move_sample(sample, device)
        dev_out = _outputs(dev.output_process_fn_grad(_call(op, dev)))
        dev_in = _grad_inputs(dev)
        actual = torch.autograd.grad(
            dev_out, dev_in, [g.to(device) for g in grads_out], allow_unused=True
        )
        assert_close(
            list(actual),
            list(expected),
            dtype=dtype,
            atol=ctx.atol,
            rtol=ctx.rtol,
            what=f"gradients of sample {ran}",
        )
        ran += 1
    if not ran:
        raise NoSamples("no sample input has a differentiable output")


def errors(op: Any, dtype: torch.dtype | None, device: str, ctx: Context) -> None:
    """TestCommon.test_errors: error_inputs raise the documented error on the device."""
    import re

    ran = 0
    for error_input in op.error_inputs(device):
        sample = error_input.sample_input
        try:
            _call(op, sample)
        except error_input.error_type as exc:
            if not re.search(error_input.error_regex, str(exc)):
                raise AssertionError(
                    f"error input {ran}: {type(exc).__name__} message {str(exc)!r} does not "
                    f"match {error_input.error_regex!r}"
                ) from None
        else:
            raise AssertionError(f"error input {ran}: no {error_input.error_type.__name__} raised")
        ran += 1
    if not ran:
        raise NoSamples("the OpInfo has no error inputs")


def compile(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:  # noqa: A001
    """torch.compile with the device's own compile backend (named as the device, as the
    bundled `spyre` registers it) matches eager on the device."""
    import torch._dynamo

    ran = 0
    for sample in samples(op, dtype, limit=ctx.max_samples or 1):
        dev = move_sample(sample, device)
        expected = _call(op, dev)

        def fn(x: Any, *args: Any, **kwargs: Any) -> Any:
            return op(x, *args, **kwargs)

        torch._dynamo.reset()
        try:
            compiled = torch.compile(fn, backend=device, fullgraph=False, dynamic=False)
            reseed(0)
            actual = compiled(dev.input, *dev.args, **dev.kwargs)
        finally:
            torch._dynamo.reset()
        assert_close(
            actual,
            expected,
            dtype=dtype,
            atol=ctx.atol,
            rtol=ctx.rtol,
            what=f"compiled sample {ran}",
        )
        ran += 1
    if not ran:
        raise NoSamples(_NO_SAMPLES)


# Reference numerics: references that do not run through the torch under test. The templates
# above compare spyre with the CPU on the same torch, so an edit that changes an op's result
# the same way on both sides (a Python formula in torch.nn.functional, a torch._refs function
# both sides run) passes them all; these catch it.

# Upstream's reference helper judges a mismatch in these by the float64 result.
_LESS_THAN_FLOAT64 = (torch.float32, torch.float16, torch.bfloat16)


def _to_numpy(value: Any) -> Any:
    """A sample's tensors as float64 (floating) or same-typed (others) NumPy arrays."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.is_floating_point():
            t = t.to(torch.float64)
        elif t.is_complex():
            t = t.to(torch.complex128)
        return t.numpy()
    if isinstance(value, torch.dtype):
        from torch.testing._internal.common_utils import torch_to_numpy_dtype_dict

        return torch_to_numpy_dtype_dict.get(value, value)
    if isinstance(value, list | tuple):  # cat, stack: a sequence of tensors
        return type(value)(_to_numpy(v) for v in value)
    return value


def _from_reference(expected: Any, actual: Any) -> Any:
    """The reference's result as tensors, each rounded to the dtype of the device's result
    (the reference computes wider; what is compared is the op's own error)."""
    import numpy as np

    if isinstance(expected, np.ndarray | np.generic):
        expected = torch.from_numpy(np.asarray(expected).copy())
    if isinstance(expected, torch.Tensor):
        if isinstance(actual, torch.Tensor):
            return expected.detach().cpu().to(actual.dtype)
        return expected
    if (
        isinstance(expected, tuple | list)
        and isinstance(actual, tuple | list)
        and len(expected) == len(actual)
    ):
        return type(actual)(_from_reference(e, a) for e, a in zip(expected, actual, strict=True))
    if isinstance(actual, torch.Tensor) and isinstance(expected, bool | int | float | complex):
        return torch.tensor(expected, dtype=actual.dtype)
    return expected


def numpy_ref(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """TestCommon.test_numpy_ref (and test_unary_ufuncs' test_reference_numerics): the device
    result matches the OpInfo's `ref`, a NumPy reference computed in float64 on the CPU sample
    and rounded to the result's dtype, at `reference_tolerances`. Samples the reference cannot
    take are skipped."""
    import warnings

    import numpy as np

    ran = refused = 0
    for sample in reference_samples(op, dtype, limit=ctx.max_samples):
        args = [_to_numpy(a) for a in sample.args]
        kwargs = {k: _to_numpy(v) for k, v in sample.kwargs.items()}
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                expected = op.ref(_to_numpy(sample.input), *args, **kwargs)
        except Exception:  # noqa: BLE001 - a reference that cannot take a sample skips it
            refused += 1
            continue
        dev = move_sample(sample, device)
        actual = to_cpu(_call(op, dev))
        assert_close(
            actual,
            _from_reference(expected, actual),
            dtype=dtype,
            atol=ctx.atol,
            rtol=ctx.rtol,
            what=f"sample {ran + refused} against the NumPy reference",
            rule=reference_tolerances,
        )
        ran += 1
    if not ran:
        raise NoSamples(
            f"the NumPy reference takes none of the {refused} sample(s)" if refused else _NO_SAMPLES
        )


def _distance(value: Any, precise: Any) -> float:
    """Summed absolute error of a result against a float64 one (NaN where both are NaN: 0)."""
    if isinstance(value, torch.Tensor) and isinstance(precise, torch.Tensor):
        a, b = value.detach().cpu().to(torch.float64), precise.detach().cpu().to(torch.float64)
        if a.shape != b.shape:
            return float("inf")
        same = (a == b) | (a.isnan() & b.isnan())
        return float(torch.where(same, 0.0, (a - b).abs()).sum())
    if isinstance(value, tuple | list) and isinstance(precise, tuple | list):
        return sum(_distance(v, p) for v, p in zip(value, precise, strict=False))
    return 0.0


def _precise(sample: Any, dtype: torch.dtype) -> Any:
    def widen(value: Any) -> Any:
        if isinstance(value, torch.dtype):
            return torch.float64 if value == dtype else value
        if isinstance(value, torch.Tensor) and value.dtype == dtype:
            return value.detach().to(torch.float64)
        return value

    return sample.transform(widen)


def python_ref(op: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """TestCommon.test_python_ref_torch_fallback: a Python reference (torch._refs) run on the
    device matches its torch operator (`op.torch_opinfo`) run on the CPU, at
    `reference_tolerances`. Below float64 a mismatch passes when the reference is no farther
    than the torch operator from the operator's float64 result on the CPU, as upstream's
    helper allows."""
    torch_op = op.torch_opinfo
    ran = 0
    for sample in reference_samples(op, dtype, limit=ctx.max_samples):
        expected = to_cpu(_call(torch_op, sample))
        dev = move_sample(sample, device)
        actual = to_cpu(_call(op, dev))
        try:
            assert_close(
                actual,
                expected,
                dtype=dtype,
                atol=ctx.atol,
                rtol=ctx.rtol,
                what=f"sample {ran}",
                rule=reference_tolerances,
            )
        except AssertionError:
            if dtype not in _LESS_THAN_FLOAT64:
                raise
            precise = to_cpu(_call(torch_op, _precise(sample, dtype)))
            ref_error, torch_error = _distance(actual, precise), _distance(expected, precise)
            if not ref_error <= torch_error:
                raise AssertionError(
                    f"sample {ran}: the reference on {device} differs from {op.torch_opinfo.name} "
                    f"on the CPU and is farther from the float64 result ({ref_error:.6g} against "
                    f"{torch_error:.6g})"
                ) from None
        ran += 1
    if not ran:
        raise NoSamples(_NO_SAMPLES)


def _numpy_ref_tests(op: Any) -> tuple[tuple[str, str], ...]:
    """The upstream test that compares `op` with its NumPy reference. test_ops.py's
    test_numpy_ref leaves elementwise, reduction and spectral ops to their own files' reference
    tests; the tolerance overrides an OpInfo sets for that comparison name those tests."""
    from torch.testing._internal.opinfo.core import (
        BinaryUfuncInfo,
        ReductionOpInfo,
        SpectralFuncInfo,
        SpectralFuncType,
        UnaryUfuncInfo,
    )

    if isinstance(op, UnaryUfuncInfo):
        return (("TestUnaryUfuncs", "test_reference_numerics_normal"),)
    if isinstance(op, BinaryUfuncInfo):
        # test_binary_ufuncs.py's class is TestBinaryUfuncsDevice on torch 2.13, earlier
        # TestBinaryUfuncs: either name selects the same decorators.
        return (
            ("TestBinaryUfuncsDevice", "test_reference_numerics"),
            ("TestBinaryUfuncs", "test_reference_numerics"),
        )
    if isinstance(op, ReductionOpInfo):
        return (("TestReductions", "test_ref_small_input"),)
    if isinstance(op, SpectralFuncInfo):
        one_d = op.ndimensional == SpectralFuncType.OneD
        return (("TestFFT", "test_reference_1d" if one_d else "test_reference_nd"),)
    return (("TestCommon", "test_numpy_ref"),)


def _dtypes(op: Any) -> set[torch.dtype]:
    return set(op.supported_dtypes("cpu"))


def _has_variants(op: Any, dtype: torch.dtype) -> bool:
    return dtype in _dtypes(op) and bool(_variants(op))


TEMPLATES: dict[str, Callable[..., None]] = {
    "compare_cpu": compare_cpu,
    "out": out,
    "noncontiguous_samples": noncontiguous_samples,
    "variant_consistency_eager": variant_consistency_eager,
    "backward": backward,
    "errors": errors,
    "compile": compile,
    "numpy_ref": numpy_ref,
    "python_ref": python_ref,
}

APPLIES: dict[str, Callable[[Any, Any], bool]] = {
    "compare_cpu": lambda op, dt: dt in _dtypes(op),
    "out": lambda op, dt: bool(op.supports_out) and dt in _dtypes(op),
    "noncontiguous_samples": lambda op, dt: dt in _dtypes(op),
    "variant_consistency_eager": _has_variants,
    "backward": lambda op, dt: (
        bool(op.supports_autograd)
        and dt in set(op.supported_backward_dtypes("cpu"))
        and dt in _dtypes(op)
    ),
    # error_inputs take no dtype: one variant, dtype "none".
    "errors": lambda op, dt: dt is None and op.error_inputs_func is not None,
    "compile": lambda op, dt: dt in _dtypes(op),
    # Upstream runs these on every OpInfo with a `ref` (op_db) and every Python reference
    # (python_ref_db, against its torch operator).
    "numpy_ref": lambda op, dt: getattr(op, "ref", None) is not None and dt in _dtypes(op),
    "python_ref": lambda op, dt: (
        getattr(op, "torch_opinfo", None) is not None and dt in _dtypes(op)
    ),
}

# The upstream tests whose toleranceOverride / precisionOverride decorators set a template's
# tolerance, where they are not the one test the template is named after (TEMPLATE_UPSTREAM).
TOLERANCE_TESTS: dict[str, Callable[[Any], tuple[tuple[str, str], ...]]] = {
    "numpy_ref": _numpy_ref_tests,
}
