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
    with pytest.raises(AssertionError, match="not close"):
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
