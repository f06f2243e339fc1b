from __future__ import annotations

import pytest

from selector.aliases import alias_index
from selector.diff import parse_unified_diff
from selector.globs import matches
from selector.opnames import canonical, family_of, op_key, touched_names

ALIASES = alias_index()


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("add_", "add"),
        ("add.out", "add"),
        ("add_out", "add"),
        ("aten::add.Tensor", "add"),
        ("torch.ops.aten._softmax.default", "_softmax"),
        ("_refs.softmax", "softmax"),
        ("torch._refs.nn.functional.softmax", "nn.functional.softmax"),
        ("log_softmax.with_dtype", "log_softmax"),
        ("linalg.norm", "linalg.norm"),
        ("__radd__", "__radd__"),
        ("nn.Linear", "nn.Linear"),
    ],
)
def test_op_key_folds_spellings(name: str, key: str) -> None:
    assert op_key(name) == key


@pytest.mark.parametrize(
    "name",
    [
        "softmax",
        "_softmax",
        "log_softmax",
        "special.softmax",
        "nn.functional.softmax",
        "_softmax_backward_data",
        "aten::_log_softmax.out",
        "torch.ops.aten.softmax.int",
        "masked.softmax",
        "nn.Softmax",
        "softmax_backward",
    ],
)
def test_softmax_family(name: str) -> None:
    assert family_of(name, ALIASES) == "softmax"


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("abs_", "abs"),
        ("nn.functional.hardswish", "hardswish"),
        ("linalg.det", "det"),
        ("gelu_backward", "gelu"),
        ("_foreach_add", "add"),
        ("fft.fft", "fft.fft"),
        ("threshold_backward", "relu"),
    ],
)
def test_family_rules(name: str, family: str) -> None:
    assert family_of(name, ALIASES) == family


def test_extra_families_extend_the_table() -> None:
    aliases = alias_index({"spyre_attention": ("spyre_sdpa", "nn.functional.spyre_sdpa")})
    assert family_of("nn.functional.spyre_sdpa", aliases) == "spyre_attention"
    assert canonical("aten::spyre_sdpa.default") == "spyre_sdpa"


def _names(path: str, header: str, *lines: str) -> set[str]:
    """Names found in a one-hunk diff of `path` (`lines` keep their diff tag)."""
    text = "\n".join(
        (f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}", header, *lines, "")
    )
    (patch,) = parse_unified_diff(text).files
    return {t.name for t in touched_names(patch) if not t.weak}


def test_native_functions_yaml_entry_around_a_changed_dispatch_line() -> None:
    names = _names(
        "aten/src/ATen/native/native_functions.yaml",
        "@@ -5001,6 +5001,7 @@",
        " - func: _softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
        "   structured_delegate: _softmax.out",
        "   tags: core",
        "+  autogen: _softmax.out_alt",
        " ",
        " - func: _softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out)",
        "   structured: True",
    )
    assert "_softmax" in names
    assert "_softmax.out" not in names  # the entry below the change is untouched


def test_derivatives_yaml_name() -> None:
    names = _names(
        "tools/autograd/derivatives.yaml",
        "@@ -1600,3 +1600,3 @@",
        " - name: _log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
        "-  self: _log_softmax_backward_data(grad, result, dim, self.scalar_type())",
        "+  self: _log_softmax_backward_data(grad, result, dim, grad.scalar_type())",
        "   result: self_t - logsumexp_jvp(self_p, self_t, {dim}, true)",
    )
    assert names == {"_log_softmax"}


def test_cpp_context_macros_definitions_and_aten_names() -> None:
    names = _names(
        "aten/src/ATen/native/cpu/SoftMaxKernel.cpp",
        "@@ -10,4 +10,6 @@ static void softmax_lastdim_kernel_impl(",
        "   int x = 0;",
        "-  return at::_softmax(a, 1, false);",
        "+  // calls aten::_log_softmax for the log variant",
        "+  return at::_softmax(a, 1, false);",
        "+REGISTER_DISPATCH(log_softmax_backward_lastdim_kernel, &log_softmax_bwd_impl)",
    )
    assert {
        "softmax_lastdim_kernel_impl",
        "softmax",
        "_log_softmax",
        "log_softmax_backward",
    } <= names
    assert "_softmax" not in names  # a call in a `return` is not a definition


def test_python_opinfo_def_decorator_and_torch_ops_aten() -> None:
    names = _names(
        "torch/testing/_internal/common_methods_invocations.py",
        "@@ -100,6 +100,7 @@ def sample_inputs_softmax_variant(op_info, device, dtype, **kw):",
        "     OpInfo('nn.functional.gelu',",
        '            aten_name="gelu",',
        "            dtypes=floating_types_and(torch.bfloat16, torch.half),",
        "+           ref=lambda x: torch.ops.aten.gelu.default(x),",
        "            supports_autograd=True),",
        "     UnaryUfuncInfo('abs',",
        "                    aliases=('absolute', ),",
    )
    assert {"softmax_variant", "softmax", "nn.functional.gelu", "gelu"} <= names
    assert "abs" not in names  # the entry after the change is untouched


def test_python_qualified_by_file_and_decorator_owner() -> None:
    names = _names(
        "torch/nn/functional.py",
        "@@ -1,5 +1,6 @@ import torch",
        " ",
        "+@_overload",
        " def softmax(input, dim=None):",
        "     return input",
        " ",
        " def gelu(input):",
    )
    assert names == {"nn.functional.softmax"}


@pytest.mark.parametrize(
    ("glob", "path", "hit"),
    [
        ("torch/nn/**", "torch/nn/modules/linear.py", True),
        ("torch/nn/*", "torch/nn/modules/linear.py", False),
        ("aten/src/ATen/native/**/SoftMax*.cpp", "aten/src/ATen/native/SoftMax.cpp", True),
        (
            "aten/src/ATen/native/**/SoftMax*.cpp",
            "aten/src/ATen/native/cpu/SoftMaxKernel.cpp",
            True,
        ),
        ("**/*.md", "README.md", True),
        ("test/test_ops.py", "test/test_ops_jit.py", False),
        ("torch/_refs/", "torch/_refs/nn/functional/__init__.py", True),
        ("test/test_[ab]*.py", "test/test_binary_ufuncs.py", True),
    ],
)
def test_watch_globs(glob: str, path: str, hit: bool) -> None:
    assert matches(glob, path) is hit


@pytest.mark.parametrize(
    ("module", "family"),
    [
        ("nn.ELU", "elu"),
        ("nn.GLU", "glu"),
        ("nn.LayerNorm", "layer_norm"),
        ("nn.BatchNorm2d", "batch_norm"),
        ("nn.PReLU", "prelu"),
        ("nn.LeakyReLU", "leaky_relu"),
        ("nn.Softmax", "softmax"),
    ],
)
def test_module_runs_the_op_it_is_named_after(module: str, family: str) -> None:
    assert family_of(module, {}) == family
