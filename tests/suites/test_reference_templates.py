"""The reference templates catch what the CPU comparison cannot: an edit that changes an op's
result on the CPU and on spyre alike. Each edit is an OpInfo whose function is replaced, as an
overlay of torch/nn/functional.py or torch/_refs would replace it on both sides."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from suites.templates import Context  # noqa: E402
from suites.templates.ops import (  # noqa: E402
    APPLIES,
    NoSamples,
    compare_cpu,
    numpy_ref,
    python_ref,
)

DEVICE = "spyre"
CTX = Context(max_samples=4)


@pytest.fixture(scope="module", autouse=True)
def _device() -> None:
    import backend_under_test

    backend_under_test.register()


def _op(db: str, name: str) -> Any:
    from torch.testing._internal import common_methods_invocations as cmi

    return next(op for op in getattr(cmi, db) if op.name == name)


def _edited(op: Any, fn: Any) -> Any:
    edited = copy.copy(op)
    edited.op = fn
    return edited


def _softsign_plus_3(x: Any) -> Any:
    return x / (x.abs() + 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_numpy_ref_passes_the_op_and_fails_an_edit_the_cpu_comparison_misses(dtype: Any) -> None:
    op = _op("op_db", "nn.functional.softsign")
    numpy_ref(op, dtype, DEVICE, CTX)
    edited = _edited(op, _softsign_plus_3)
    compare_cpu(edited, dtype, DEVICE, CTX)  # the same wrong formula on both sides
    with pytest.raises(AssertionError, match="NumPy reference"):
        numpy_ref(edited, dtype, DEVICE, CTX)


def test_numpy_ref_skips_samples_its_reference_cannot_take() -> None:
    op = _op("op_db", "nn.functional.softsign")

    def refuses(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("no such argument")

    with pytest.raises(NoSamples, match="takes none of the 4 sample"):
        numpy_ref(_with_ref(op, refuses), torch.float32, DEVICE, CTX)


def _with_ref(op: Any, ref: Any) -> Any:
    edited = copy.copy(op)
    edited.ref = ref
    return edited


def test_python_ref_compares_the_reference_on_the_device_with_the_torch_op_on_the_cpu() -> None:
    op = _op("python_ref_db", "_refs.nn.functional.hardtanh")
    python_ref(op, torch.float32, DEVICE, CTX)

    def clamps_too_low(a: Any, min_val: float = -1.0, max_val: float = 1.0, **_: Any) -> Any:
        return torch.clamp(a, min_val, max_val) * 0.5

    edited = _edited(op, clamps_too_low)
    compare_cpu(edited, torch.float32, DEVICE, CTX)  # the reference runs on both sides
    # Not close, and (float32 is below float64) farther from the float64 result.
    with pytest.raises(AssertionError, match="farther from the float64 result"):
        python_ref(edited, torch.float32, DEVICE, CTX)


def test_python_ref_in_half_precision_fails_a_reference_farther_from_the_float64_result() -> None:
    op = _op("python_ref_db", "_refs.nn.functional.hardtanh")

    def off_by_a_lot(a: Any, *args: Any, **kwargs: Any) -> Any:
        return torch.nn.functional.hardtanh(a, *args, **kwargs) + 0.25

    # Farther from the float64 result than the torch op: a failure that names the distances.
    with pytest.raises(AssertionError, match="farther from the float64 result"):
        python_ref(_edited(op, off_by_a_lot), torch.float16, DEVICE, CTX)


def test_which_opinfos_they_apply_to() -> None:
    softsign = _op("op_db", "nn.functional.softsign")
    assert APPLIES["numpy_ref"](softsign, torch.float16)
    assert not APPLIES["numpy_ref"](_with_ref(softsign, None), torch.float16)
    assert not APPLIES["python_ref"](softsign, torch.float32)  # not a Python reference
    assert APPLIES["python_ref"](_op("python_ref_db", "_refs.abs"), torch.float32)


# --- the reference tolerance -------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "default"),
    [
        (torch.float16, (1e-5, 1e-3)),
        (torch.bfloat16, (1e-5, 1.6e-2)),
        (torch.float32, (1e-5, 1.3e-6)),
    ],
)
def test_the_reference_tolerance_is_the_dtypes_default_widened_never_narrowed(
    dtype: Any, default: tuple[float, float]
) -> None:
    from suites.templates.compare import reference_tolerances

    assert reference_tolerances(dtype, None, None) == default
    assert reference_tolerances(dtype, 1e-9, 0.0) == default  # an override never narrows
    assert reference_tolerances(dtype, 0.5, None) == (0.5, default[1])
    assert reference_tolerances(dtype, None, 0.25) == (default[0], 0.25)


def _plus(op: Any, offset: float) -> Any:
    def edited(*args: Any, **kwargs: Any) -> Any:
        return op.op(*args, **kwargs) + offset

    return _edited(op, edited)


def test_numpy_ref_compares_at_the_reference_tolerance_not_the_cpu_comparisons() -> None:
    op = _op("op_db", "nn.functional.softsign")
    off = _plus(op, 1e-4)  # within the CPU comparison's 1e-3, far outside float32's default
    with pytest.raises(AssertionError, match=r"up to 1e-05 allowed"):
        numpy_ref(off, torch.float32, DEVICE, CTX)
    numpy_ref(off, torch.float32, DEVICE, Context(max_samples=4, atol=1e-3))  # an override


def _accumulating_in_float32(op: Any) -> Any:
    """The op computed in float32 and rounded once to float16 (what oneDNN's float16 kernels
    do where the CPU has them)."""

    def widened(*args: Any, **kwargs: Any) -> Any:
        up = [
            a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
        ]
        return op.op(*up, **kwargs).to(torch.float16)

    return _edited(op, widened)


@pytest.mark.parametrize(
    "name", ["nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d"]
)
def test_conv_transpose_in_float16_meets_its_reference_where_it_accumulates_in_float32(
    name: str,
) -> None:
    op = _op("op_db", name)
    ctx = Context(max_samples=8)
    numpy_ref(_accumulating_in_float32(op), torch.float16, DEVICE, ctx)
    # The kernel itself: oneDNN's where the CPU has float16 convolution, else ATen's slow
    # transposed convolution, which adds float16 partial sums (why the variant's expectation
    # says it depends on the CPU).
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        numpy_ref(op, torch.float16, DEVICE, ctx)
    else:
        with pytest.raises(AssertionError, match="against the NumPy reference"):
            numpy_ref(op, torch.float16, DEVICE, ctx)


def test_tanhshrink_in_float16_misses_its_reference_by_tanh_rounded_to_float16() -> None:
    """Why its expectation came with the reference tolerance: x - tanh(x) rounds tanh(x) to
    float16 first, so near 0 it is 2 ulp off; that passed at atol 1e-3, not at 1e-5."""
    import numpy as np

    from suites.templates.compare import reference_samples

    op = _op("op_db", "nn.functional.tanhshrink")
    with pytest.raises(AssertionError, match=r"(?s)sample 3 .*up to 1e-05 allowed"):
        numpy_ref(op, torch.float16, DEVICE, Context(max_samples=8))
    x = list(reference_samples(op, torch.float16, limit=4))[3].input
    rounded_tanh = torch.from_numpy(np.tanh(x.double().numpy())).to(torch.float16)
    assert torch.equal(op(x.to(DEVICE)).cpu(), x - rounded_tanh)
    numpy_ref(op, torch.float16, DEVICE, Context(max_samples=8, atol=1e-3))


TOLERANCE_SPEC = """\
test_suite_config:
  name: tol
  opinfo:
    - db: op_db
      templates: [numpy_ref, compare_cpu]
      ops:
        include:
          - {name: sub}
          - {name: nn.functional.tanhshrink}
          - {name: nn.functional.conv_transpose2d}
      dtypes: [float16, bfloat16]
      tests:
        - names: [numpy_ref]
          ops: [nn.functional.conv_transpose2d]
          precision: {atol: 0.5}
"""


def test_numpy_ref_takes_the_overrides_of_the_upstream_test_that_compares_that_op(
    tmp_path: Any,
) -> None:
    """torch 2.13's OpInfos: sub (a BinaryUfuncInfo) sets float16 atol 1e-2 for
    TestBinaryUfuncsDevice.test_reference_numerics, tanhshrink (a UnaryUfuncInfo) bfloat16
    atol 1e-2 / rtol 1.6e-2 for every TestUnaryUfuncs test; neither for test_numpy_ref."""
    from suites.expand import expand, load_suites
    from suites.rules import Tolerance

    path = tmp_path / "tol.yaml"
    path.write_text(TOLERANCE_SPEC)
    planned = expand(load_suites([path]), keep_trail=True).by_id()
    sub = planned["tol::numpy_ref::sub::float16"]
    assert sub.precision == Tolerance(0.01, 0.0)
    assert any(
        "TestBinaryUfuncsDevice.test_reference_numerics toleranceOverride" in r.source
        for r in sub.matched
    )
    assert planned["tol::numpy_ref::nn.functional.tanhshrink::bfloat16"].precision == Tolerance(
        0.01, 0.016
    )
    assert planned["tol::numpy_ref::nn.functional.tanhshrink::float16"].precision is None
    # The other templates keep their own test's decorators.
    assert planned["tol::compare_cpu::sub::float16"].precision is None
    # A spec's precision is set as before (the template widens the default with it).
    conv = planned["tol::numpy_ref::nn.functional.conv_transpose2d::float16"]
    assert conv.precision == Tolerance(0.5, None)


def test_a_tolerance_override_has_priority_over_a_precision_override() -> None:
    from torch.testing._internal import common_device_type

    from suites.expand import _tolerance_override

    cdt: Any = common_device_type  # untyped upstream
    toleranceOverride, precisionOverride, tol = (  # noqa: N806 - upstream's names
        cdt.toleranceOverride,
        cdt.precisionOverride,
        cdt.tol,
    )
    from suites.rules import Tolerance

    half = torch.float16
    tolerance = toleranceOverride({half: tol(atol=1e-2, rtol=2e-2)})
    later_tolerance = toleranceOverride({half: tol(atol=3e-2, rtol=0)})
    precision = precisionOverride({half: 5e-1})
    other_dtype = toleranceOverride({torch.bfloat16: tol(atol=1.0, rtol=1.0)})
    assert _tolerance_override([("A.t", tolerance), ("B.t", precision)], half) == (
        "A.t",
        "toleranceOverride",
        Tolerance(1e-2, 2e-2),
    )
    assert _tolerance_override([("B.t", precision), ("A.t", tolerance)], half) == (
        "A.t",
        "toleranceOverride",
        Tolerance(1e-2, 2e-2),
    )
    assert _tolerance_override([("A.t", tolerance), ("C.t", later_tolerance)], half) == (
        "C.t",
        "toleranceOverride",
        Tolerance(3e-2, 0.0),
    )
    assert _tolerance_override([("B.t", precision), ("D.t", other_dtype)], half) == (
        "B.t",
        "precisionOverride",
        Tolerance(5e-1, None),
    )
    assert _tolerance_override([("D.t", other_dtype)], half) is None
    assert _tolerance_override([("A.t", tolerance)], None) is None
