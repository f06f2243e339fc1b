"""Every Spyre rule the emulator enforces, in one place.

Each rule is documented, with the public fact it models, in backend_under_test/README.md.
The rules are policy over the mechanics in `kernels.py`: `SPYRE_EMU_PERMISSIVE=1` (or
`set_permissive(True)`) turns all of them off, so a failure that persists without them is a
backend bug and one that disappears is a Spyre rule.

Policy matches aten op *names* (`aten::pow`), never overloads: `torch.pow(x, 3.0)` arrives
as `pow.Tensor_Scalar`, `pow.Tensor_Scalar_out` or `pow_.Scalar` depending on the call.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import torch

# --- Rule 1: 128-byte sticks -------------------------------------------------------------
STICK_BYTES = 128

# --- Rule 2: 32 cores with 2 MB scratchpads on a ring, and the cost model ----------------
CORES = 32
SCRATCHPAD_BYTES = 2 * 1024 * 1024
# Model parameters (assumptions, not published figures; see README "Cost model").
LAUNCH_US = 2.0  # fixed cost of starting one kernel on the ring
DDR_BYTES_PER_US = 200_000.0  # device memory bandwidth: 200 GB/s, shared by all cores
RING_BYTES_PER_US = 64_000.0  # one ring hop: 64 GB/s
CORE_FP16_FLOPS_PER_US = 4_000_000.0  # 4 TFLOP/s fp16 per core (128 TFLOP/s per card)
CORE_ELEMENTS_PER_US = 64_000.0  # elementwise throughput per core: one stick per cycle-ish

# --- Rule 3: fp16-class compute ------------------------------------------------------------
# Matmul-family ops and softmax compute in float16 and return the requested dtype.
FP16_COMPUTE_OPS = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "addmv",
        "mv",
        "baddbmm",
        "addbmm",
        "addr",
        "dot",
        "vdot",
        "_softmax",
        "_log_softmax",
        "_safe_softmax",
    }
)

# --- Rule 4: dtypes --------------------------------------------------------------------------
SUPPORTED_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Integer and bool tensors exist for indices and masks.
SUPPORTED_INDEX_DTYPES = (
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
)
_REFUSED_DTYPE_ADVICE = {
    torch.float64: "use torch.float32 (or float16/bfloat16): Spyre has no 64-bit float unit",
    torch.complex32: "keep real and imaginary parts as two float16 tensors",
    torch.complex64: "keep real and imaginary parts as two float32 tensors "
    "(torch.view_as_real on the host)",
    torch.complex128: "keep real and imaginary parts as two float32 tensors "
    "(torch.view_as_real on the host)",
}

# --- Rule 5: ops the compiler cannot lower ---------------------------------------------------
# aten op name -> why, used with a rewrite computed from the call (see `rewrite_for`).
UNLOWERABLE_OPS = {
    "pow": "the Spyre compiler has no general power kernel",
    "float_power": "the Spyre compiler has no general power kernel (and float_power is float64)",
}

PERMISSIVE_ENV = "SPYRE_EMU_PERMISSIVE"


@dataclass
class Switches:
    """Runtime switches; `permissive` turns every rule off, `fp16_compute` only rule 3."""

    permissive: bool = os.environ.get(PERMISSIVE_ENV, "") not in ("", "0")
    fp16_compute: bool = True


SWITCHES = Switches()


def set_permissive(enabled: bool) -> bool:
    """Turn every Spyre rule off (True) or on; returns the previous setting."""
    previous = SWITCHES.permissive
    SWITCHES.permissive = enabled
    return previous


def set_fp16_compute(enabled: bool) -> bool:
    """Switch fp16-class compute for matmul-family ops and softmax; returns the previous one."""
    previous = SWITCHES.fp16_compute
    SWITCHES.fp16_compute = enabled
    return previous


def fp16_compute_applies(op_name: str) -> bool:
    """Whether `op_name` computes in float16 right now."""
    return SWITCHES.fp16_compute and not SWITCHES.permissive and op_name in FP16_COMPUTE_OPS


# --- sticks ---


def stick_bytes(nbytes: int) -> int:
    """`nbytes` rounded up to whole 128-byte sticks."""
    return -(-nbytes // STICK_BYTES) * STICK_BYTES


def transfer_sticks(shape: tuple[int, ...] | torch.Size, itemsize: int) -> int:
    """Sticks moved to or from the host for a tensor: every row of the innermost
    dimension is padded to whole sticks."""
    if len(shape) == 0:
        return 1
    rows = 1
    for size in shape[:-1]:
        rows *= size
    row_bytes = shape[-1] * itemsize
    if rows == 0 or row_bytes == 0:
        return 0
    return rows * -(-row_bytes // STICK_BYTES)


@functools.lru_cache(maxsize=4096)
def cached_transfer_sticks(shape: torch.Size, dtype: torch.dtype) -> int:
    """`transfer_sticks` memoised by shape and dtype (the small-op path asks it every op)."""
    return transfer_sticks(shape, dtype.itemsize)


# --- dtypes ---


def check_dtype(dtype: torch.dtype, where: str) -> None:
    """Raise TypeError for a dtype that Spyre cannot hold (float64, complex)."""
    if SWITCHES.permissive:
        return
    advice = _REFUSED_DTYPE_ADVICE.get(dtype)
    if advice is not None:
        raise TypeError(
            f"spyre does not support dtype {dtype} ({where}): {advice}. "
            f"Set {PERMISSIVE_ENV}=1 to run without Spyre rules."
        )


def refused_dtype(dtype: torch.dtype) -> bool:
    """Whether `check_dtype` would refuse `dtype` (ignoring the permissive switch)."""
    return dtype in _REFUSED_DTYPE_ADVICE


# --- unlowerable ops ---


def _pow_rewrite(args: tuple[object, ...]) -> str:
    base = args[0] if args else None
    exponent = args[1] if len(args) > 1 else None
    if isinstance(base, torch.Tensor) and isinstance(exponent, (int, float)):
        value = float(exponent)
        if value.is_integer() and 1 <= value <= 8:
            return " * ".join(["x"] * int(value))
        if value.is_integer() and -8 <= value <= -1:
            return "1 / (" + " * ".join(["x"] * int(-value)) + ")"
        if value == 0.5:
            return "torch.sqrt(x)"
        if value == -0.5:
            return "torch.rsqrt(x)"
        return f"torch.exp({value!r} * torch.log(x)) for x > 0"
    if isinstance(base, (int, float)):
        return f"torch.exp(y * {math.log(base) if base > 0 else 'math.log(base)'}) for base > 0"
    return "torch.exp(y * torch.log(x)) for x > 0, or repeated multiplication for integer y"


def rewrite_for(op_name: str, args: tuple[object, ...]) -> str:
    """The rewrite that makes an unlowerable call lowerable."""
    if op_name in ("pow", "float_power"):
        return _pow_rewrite(args)
    return "compute it on the host"


def check_op(op_name: str, args: tuple[object, ...], where: str = "eager") -> None:
    """Raise NotImplementedError for an op the Spyre compiler cannot lower."""
    if SWITCHES.permissive:
        return
    why = UNLOWERABLE_OPS.get(op_name)
    if why is not None:
        raise NotImplementedError(
            f"spyre cannot lower aten::{op_name} ({where}): {why}; rewrite it as "
            f"{rewrite_for(op_name, args)} (torch.pow(x, 3.0) becomes x * x * x). "
            f"Set {PERMISSIVE_ENV}=1 to run without Spyre rules."
        )


# --- cost model ---


@dataclass(frozen=True)
class OpCost:
    """Estimated kernel time of one op and what it is made of."""

    kernel_us: float
    sticks: int
    cores: int
    flops: float
    spilled: bool


@functools.lru_cache(maxsize=4096)
def op_cost(sticks: int, work_elements: int, flops: float) -> OpCost:
    """Estimated kernel time of one executed op (see README "Cost model").

    Work is split over the cores in whole sticks; each core streams its sticks through its
    scratchpad. Data moves at the shared DDR bandwidth; partial results go once round the
    ring; arithmetic runs on the cores in use. A core whose share of the data exceeds its
    scratchpad spills: its sticks move twice.
    """
    cores = max(1, min(CORES, sticks))
    per_core_bytes = sticks * STICK_BYTES / cores
    spilled = per_core_bytes > SCRATCHPAD_BYTES
    moved = sticks * STICK_BYTES * (2 if spilled else 1)
    memory_us = moved / DDR_BYTES_PER_US
    ring_us = (cores - 1) * STICK_BYTES / RING_BYTES_PER_US
    if flops:
        compute_us = flops / (cores * CORE_FP16_FLOPS_PER_US)
    else:
        compute_us = work_elements / (cores * CORE_ELEMENTS_PER_US)
    kernel_us = LAUNCH_US + max(memory_us, compute_us) + ring_us
    return OpCost(kernel_us, sticks, cores, flops, spilled)
