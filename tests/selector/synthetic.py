"""Synthetic inventories shaped like the real one (op_db names, test_ops templates, dtypes)."""

from __future__ import annotations

import hashlib

from suites.model import Expectation, Inventory, Variant, variant_id

# A slice of real op_db / python_ref_db / module_db names, with their family where an
# OpInfo variant or an alias would otherwise hide it.
OPS: tuple[tuple[str, str], ...] = (
    ("softmax", "softmax"),
    ("softmax.with_dtype", "softmax"),
    ("log_softmax", "softmax"),
    ("log_softmax.with_dtype", "softmax"),
    ("nn.functional.softmax", "softmax"),
    ("nn.functional.log_softmax", "softmax"),
    ("special.softmax", "softmax"),
    ("special.log_softmax", "softmax"),
    ("softmin", "softmax"),
    ("_softmax_backward_data", ""),
    ("masked.softmax", "softmax"),
    ("masked.log_softmax", "softmax"),
    ("abs", ""),
    ("add", ""),
    ("sub", ""),
    ("mul", ""),
    ("div.no_rounding_mode", "div"),
    ("div.trunc_rounding", "div"),
    ("exp", ""),
    ("log", ""),
    ("log1p", ""),
    ("sin", ""),
    ("cos", ""),
    ("tanh", ""),
    ("sigmoid", ""),
    ("relu", ""),
    ("nn.functional.relu", ""),
    ("nn.functional.gelu", ""),
    ("nn.functional.silu", ""),
    ("nn.functional.layer_norm", ""),
    ("nn.functional.linear", ""),
    ("matmul", ""),
    ("mm", ""),
    ("bmm", ""),
    ("addmm", ""),
    ("sum", ""),
    ("mean", ""),
    ("amax", ""),
    ("amin", ""),
    ("argmax", ""),
    ("cat", ""),
    ("stack", ""),
    ("where", ""),
    ("clamp", ""),
    ("pow", ""),
    ("sqrt", ""),
    ("rsqrt", ""),
    ("topk", ""),
    ("sort", ""),
    ("cumsum", ""),
    ("logsumexp", ""),
    ("linalg.norm", ""),
    ("linalg.vector_norm", ""),
    ("index_select", ""),
    ("gather", ""),
    ("scatter", ""),
    ("nn.functional.embedding", ""),
    ("nn.functional.dropout", ""),
    ("nn.functional.conv2d", ""),
    ("nn.functional.scaled_dot_product_attention", ""),
    ("transpose", ""),
    ("view", ""),
    ("reshape", ""),
    ("permute", ""),
    ("expand", ""),
    ("flip", ""),
    ("roll", ""),
)
TEMPLATES = (
    "compare_cpu",
    "out",
    "noncontiguous_samples",
    "variant_consistency_eager",
    "dtypes",
    "python_ref",
    "fake",
    "errors",
)
DTYPES = ("float32", "float16", "bfloat16")
OPS_WATCH = ("test/test_ops.py", "torch/testing/_internal/common_methods_invocations.py")


def _fingerprint(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def make_variant(
    subject: str, template: str, dtype: str, family: str = "", suite: str = "ops", **kw: object
) -> Variant:
    return Variant(
        id=variant_id(suite, template, subject, dtype),
        suite=suite,
        template=template,
        subject=subject,
        dtype=dtype,
        family=family,
        fingerprint=str(kw.pop("fingerprint", _fingerprint(subject, template, dtype))),
        watch=tuple(kw.pop("watch", OPS_WATCH)),
        **kw,  # type: ignore[arg-type]
    )


def small_inventory() -> Inventory:
    """~1,700 variants: every OPS entry x template x dtype, plus a modules suite."""
    variants = [
        make_variant(subject, template, dtype, family)
        for subject, family in OPS
        for template in TEMPLATES
        for dtype in DTYPES
    ]
    variants += [
        make_variant(
            module,
            "forward",
            dtype,
            suite="modules",
            watch=("torch/nn/modules/**", "test/test_modules.py"),
        )
        for module in ("nn.Linear", "nn.Softmax", "nn.LayerNorm", "nn.Conv2d")
        for dtype in DTYPES
    ]
    variants.append(
        make_variant(
            "nn.functional.dropout",
            "compare_cpu",
            "float64",
            expectation=Expectation.SKIP,
            reason="float64 is refused",
            rule="test_ops.yaml:12",
        )
    )
    return Inventory("2.13.0", "synthetic", tuple(variants), created_at="2026-11-29T00:00:00Z")


def large_inventory(size: int = 50_000) -> Inventory:
    """`size` variants: OPS, then op_db's long tail as distinct subjects (`op_0001`, ...),
    each in every template and dtype, so a touched op reaches about as many variants as in
    the real inventory."""
    subjects = [*OPS]
    n = 0
    while len(subjects) * len(TEMPLATES) * len(DTYPES) < size:
        n += 1
        subjects.append((f"op_{n:04d}", ""))
    variants = [
        make_variant(subject, template, dtype, family)
        for subject, family in subjects
        for template in TEMPLATES
        for dtype in DTYPES
    ]
    return Inventory("2.13.0", "synthetic", tuple(variants[:size]))
