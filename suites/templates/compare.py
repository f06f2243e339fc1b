"""Moving sample inputs and results between devices, and comparing with tolerances."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

import torch

from suites.templates import tracking

tracking.install()

# Defaults when neither the spec nor an OpInfo decorator sets a tolerance; like upstream's
# test_compare_cpu (1e-3), widened for the 16-bit types.
DEFAULT_TOL = {
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


ToleranceRule = Callable[[torch.dtype | None, float | None, float | None], tuple[float, float]]


def tolerances(
    dtype: torch.dtype | None, atol: float | None, rtol: float | None
) -> tuple[float, float]:
    """(atol, rtol) of the templates that compare with the CPU: the spec's or an OpInfo
    decorator's value where set, else `DEFAULT_TOL`."""
    base_atol, base_rtol = DEFAULT_TOL.get(dtype, (1e-3, 1e-3)) if dtype else (1e-3, 1e-3)
    return (base_atol if atol is None else atol), (base_rtol if rtol is None else rtol)


def reference_tolerances(
    dtype: torch.dtype | None, atol: float | None, rtol: float | None
) -> tuple[float, float]:
    """(atol, rtol) of the reference templates, as upstream's reference tests compare: the
    dtype's default (torch.testing's: float16 1e-5/1e-3, bfloat16 1e-5/1.6e-2, float32
    1e-5/1.3e-6), each widened to the OpInfo's override for that test or the spec's
    `precision` where larger. An override widens, never narrows (upstream's assertEqual takes
    the larger of its default and the test's `precision`/`rel_tol`)."""
    from torch.testing._comparison import default_tolerances

    base_rtol, base_atol = default_tolerances(dtype) if dtype is not None else (0.0, 0.0)
    return max(base_atol, atol or 0.0), max(base_rtol, rtol or 0.0)


def tree_map(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # named tuples (torch.return_types)
        return type(value)(*(tree_map(fn, v) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(tree_map(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: tree_map(fn, v) for k, v in value.items()}
    return value


def to_cpu(value: Any) -> Any:
    return tree_map(lambda t: t.detach().cpu() if t.device.type != "cpu" else t.detach(), value)


def move_sample(sample: Any, device: str) -> Any:
    """A copy of a SampleInput on `device`, keeping requires_grad leaves as leaves."""

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t  # transform also hands over dtypes
        out = t.detach().to(device)
        if t.requires_grad:
            out.requires_grad_(True)
        return out

    moved = sample.transform(move)
    # Factory functions take the device as a keyword: build on the device under test.
    if "device" in moved.kwargs:
        moved.kwargs["device"] = device
    return moved


def reseed(seed: int = 0) -> None:
    """`torch.manual_seed(seed)` for the generators a run here uses: the CPU one and the
    PrivateUse1 backend's (as `torch.manual_seed` seeds it, through its `manual_seed_all`).

    `torch.manual_seed` also queues a lazy CUDA seed on a CPU build, and that formats the whole
    Python stack each call: about 1 ms under pytest, paid 20 times per variant.
    """
    torch.random.default_generator.manual_seed(seed)
    backend = getattr(torch, torch._C._get_privateuse1_backend_name(), None)
    seed_all = getattr(backend, "manual_seed_all", None)
    if seed_all is not None:
        seed_all(seed)


def samples(
    op: Any, dtype: torch.dtype, *, requires_grad: bool = False, limit: int | None = None
) -> Iterator[Any]:
    """Sample inputs built on the CPU (the device's random generator is the CPU one anyway)."""
    # Fixed seed: the CPU reference and the device see the same inputs on every run.
    reseed(0)
    gen = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
    return islice(gen, limit) if limit else iter(gen)


def reference_samples(op: Any, dtype: torch.dtype, *, limit: int | None = None) -> Iterator[Any]:
    """`op.reference_inputs` on the CPU (the samples upstream's reference tests take: the
    sample inputs, then, where the OpInfo has them, more), seeded as `samples`."""
    reseed(0)
    gen = op.reference_inputs("cpu", dtype)
    return islice(gen, limit) if limit else iter(gen)


def assert_close(
    actual: Any,
    expected: Any,
    *,
    dtype: torch.dtype | None,
    atol: float | None,
    rtol: float | None,
    what: str,
    rule: ToleranceRule = tolerances,
) -> None:
    """Compare results on CPU at the (atol, rtol) `rule` gives (`tolerances` by default);
    exact for non-float tensors."""
    a_tol, r_tol = rule(dtype, atol, rtol)
    actual_c, expected_c = to_cpu(actual), to_cpu(expected)
    try:
        torch.testing.assert_close(
            actual_c,
            expected_c,
            atol=a_tol,
            rtol=r_tol,
            equal_nan=True,
            check_device=False,
            check_layout=False,
            check_stride=False,
        )
    except AssertionError as exc:
        raise AssertionError(f"{what}: {exc}") from None
    except TypeError:
        # Non-tensor results (python scalars, None) compare with ==.
        if actual_c != expected_c:
            raise AssertionError(f"{what}: {actual_c!r} != {expected_c!r}") from None
