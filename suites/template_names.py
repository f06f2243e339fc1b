"""The upstream class and test each of our templates reimplements: torch-free, so that the
selector (which never imports torch) reads it as the expansion does."""

from __future__ import annotations

# Our templates under the upstream class and test names, so OpInfo skips/xfails apply.
TEMPLATE_UPSTREAM: dict[str, tuple[str, str]] = {
    "compare_cpu": ("TestCommon", "test_compare_cpu"),
    "out": ("TestCommon", "test_out"),
    "noncontiguous_samples": ("TestCommon", "test_noncontiguous_samples"),
    "variant_consistency_eager": ("TestCommon", "test_variant_consistency_eager"),
    "backward": ("TestGradients", "test_fn_grad"),
    "errors": ("TestCommon", "test_errors"),
    "compile": ("TestInductorOpInfo", "test_comprehensive"),
    "numpy_ref": ("TestCommon", "test_numpy_ref"),
    "python_ref": ("TestCommon", "test_python_ref_torch_fallback"),
    "module_forward": ("TestModule", "test_forward"),
}
