"""OpInfo templates: the checks upstream test/test_ops.py makes, against the CPU as reference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from suites.templates import Context
from suites.templates.compare import assert_close, move_sample, reseed, samples, to_cpu

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
}
