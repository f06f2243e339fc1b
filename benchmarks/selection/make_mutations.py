# ruff: noqa: E501 - the tables below hold verbatim source lines
"""Writes mutations.yaml, the shipped mutation set of the selection benchmark.

Python mutations are edits of the installed torch 2.13.0 sources (the diff is computed
against them, with git's python function context in the hunk headers); kernel mutations
carry a hand-written diff of the aten C++ or native_functions.yaml edit they emulate.

    .venv/bin/python benchmarks/selection/make_mutations.py   # rewrites mutations.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import cast

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.selection.mutations.author import python_diff  # noqa: E402

NF = "torch/nn/functional.py"
REFS = "torch/_refs/__init__.py"
REFS_NN = "torch/_refs/nn/functional/__init__.py"
DECOMP = "torch/_decomp/decompositions.py"
CMI = "torch/testing/_internal/common_methods_invocations.py"
ACT = "torch/nn/modules/activation.py"

# id, file, location, operator, old snippet, new snippet, note
PYTHON = [
    (
        "py-glu-scalar-check",
        NF,
        "glu",
        "boundary",
        '    if input.dim() == 0:\n        raise RuntimeError(\n            "glu does not',
        '    if input.dim() <= 1:\n        raise RuntimeError(\n            "glu does not',
        "1-D inputs now raise",
    ),
    (
        "py-hardtanh-check",
        NF,
        "hardtanh",
        "boundary",
        '    if min_val > max_val:\n        raise ValueError("min_val cannot be greater than max_val")',
        '    if min_val >= max_val:\n        raise ValueError("min_val cannot be greater than max_val")',
        "min_val == max_val now raises",
    ),
    (
        "py-hardtanh-inplace-swap",
        NF,
        "hardtanh",
        "swap",
        "        result = torch._C._nn.hardtanh_(input, min_val, max_val)",
        "        result = torch._C._nn.hardtanh_(input, max_val, min_val)",
        "in-place path only",
    ),
    (
        "py-normalize-eps",
        NF,
        "normalize",
        "constant",
        "        denom = input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)\n        return input / denom",
        "        denom = input.norm(p, dim, keepdim=True).clamp_min(eps * 10).expand_as(input)\n        return input / denom",
        "device-independent numerics",
    ),
    (
        "py-softmin-stacklevel",
        NF,
        "softmin",
        "constant",
        '        dim = _get_softmax_dim("softmin", input.dim(), _stacklevel)',
        '        dim = _get_softmax_dim("softmin", input.dim(), _stacklevel + 1)',
        "warning stack level only",
    ),
    (
        "py-softmax-drop-dtype",
        NF,
        "softmax",
        "delete",
        "        ret = input.softmax(dim, dtype=dtype)",
        "        ret = input.softmax(dim)",
        "dtype= ignored",
    ),
    (
        "py-log-softmax-drop-dtype",
        NF,
        "log_softmax",
        "delete",
        "        ret = input.log_softmax(dim, dtype=dtype)",
        "        ret = input.log_softmax(dim)",
        "dtype= ignored",
    ),
    (
        "py-elu-inplace-copy",
        NF,
        "elu",
        "replace-call",
        "        result = torch._C._nn.elu_(input, alpha)",
        "        result = torch._C._nn.elu(input, alpha)",
        "inplace=True no longer writes the input",
    ),
    (
        "py-silu-inplace-copy",
        NF,
        "silu",
        "replace-call",
        "        return torch._C._nn.silu_(input)",
        "        return torch._C._nn.silu(input)",
        "inplace=True no longer writes the input",
    ),
    (
        "py-split-dim",
        "torch/functional.py",
        "split",
        "arith",
        "    return tensor.split(split_size_or_sections, dim)",
        "    return tensor.split(split_size_or_sections, dim - 1 if dim < 0 else dim)",
        "negative dims shift by one",
    ),
    (
        "py-refs-lerp-mask",
        REFS,
        "lerp",
        "boundary",
        "    mask = weight.abs() >= 0.5",
        "    mask = weight.abs() > 0.5",
        "equivalent except at weight 0.5",
    ),
    (
        "py-refs-lerp-coeff",
        REFS,
        "lerp",
        "arith",
        "    coeff = torch.where(mask, weight - 1, weight)",
        "    coeff = torch.where(mask, weight + 1, weight)",
        "wrong branch for weight >= 0.5; the Spyre compile decomposition uses it",
    ),
    (
        "py-refs-addcmul-value",
        REFS,
        "addcmul",
        "delete",
        "    return self + value * tensor1 * tensor2",
        "    return self + tensor1 * tensor2",
        "value ignored; aten.addcmul decomposition",
    ),
    (
        "py-refs-logsumexp-mask",
        REFS,
        "logsumexp",
        "negate",
        '    maxes = torch.masked_fill(maxes, maxes.abs() == float("inf"), 0)',
        '    maxes = torch.masked_fill(maxes, maxes.abs() != float("inf"), 0)',
        "stabilisation disabled",
    ),
    (
        "py-refs-sigmoid-sign",
        REFS,
        "sigmoid",
        "negate",
        "    return true_divide(1, add(1, exp(neg(a))))",
        "    return true_divide(1, add(1, exp(a)))",
        "",
    ),
    (
        "py-refs-elu-boundary",
        REFS_NN,
        "elu",
        "boundary",
        "    return torch.where(a > 0, scale * a, (alpha * scale) * torch.expm1(a * input_scale))",
        "    return torch.where(a >= 0, scale * a, (alpha * scale) * torch.expm1(a * input_scale))",
        "equivalent mutant: both branches are 0 at 0",
    ),
    (
        "py-refs-elu-alpha",
        REFS_NN,
        "elu",
        "arith",
        "    return torch.where(a > 0, scale * a, (alpha * scale) * torch.expm1(a * input_scale))",
        "    return torch.where(a > 0, scale * a, (alpha + scale) * torch.expm1(a * input_scale))",
        "aten.elu decomposition",
    ),
    (
        "py-refs-leaky-relu-slope",
        REFS_NN,
        "leaky_relu",
        "negate",
        "    return torch.where(torch.gt(a, 0), a, torch.mul(a, negative_slope))",
        "    return torch.where(torch.gt(a, 0), a, torch.mul(a, -negative_slope))",
        "aten.leaky_relu decomposition",
    ),
    (
        "py-decomp-silu",
        DECOMP,
        "silu",
        "negate",
        "    return self * torch.sigmoid(self)\n",
        "    return self * torch.sigmoid(-self)\n",
        "aten.silu decomposition",
    ),
    (
        "py-decomp-silu-backward",
        DECOMP,
        "silu_backward",
        "arith",
        "    return grad_output * sigmoid * (1 + self * (1 - sigmoid))",
        "    return grad_output * sigmoid * (1 + self * (1 + sigmoid))",
        "backward decomposition; the compile suite compiles forward only",
    ),
    (
        "py-decomp-prelu",
        DECOMP,
        "_prelu_kernel",
        "negate",
        "    return torch.where(self > 0, self, weight * self)",
        "    return torch.where(self < 0, self, weight * self)",
        "no benchmark variant uses prelu",
    ),
    (
        "py-cmi-addmm-alpha",
        CMI,
        "sample_inputs_addmm",
        "constant",
        "    alpha_val = kwargs.get('alpha', 2 + 3j if dtype.is_complex else 0.6 if dtype.is_floating_point else 2)",
        "    alpha_val = kwargs.get('alpha', 2 + 3j if dtype.is_complex else 60.0 if dtype.is_floating_point else 2)",
        "larger sample values",
    ),
    (
        "py-cmi-logsumexp-low",
        CMI,
        "sample_inputs_logsumexp",
        "constant",
        "    lows = (None, 1e3, 1e6) if dtype",
        "    lows = (None, 1e3, 1e7) if dtype",
        "",
    ),
    (
        "py-cmi-hardtanh-regex",
        CMI,
        "error_inputs_hardtanh",
        "replace-string",
        'error_type=ValueError, error_regex="min_val cannot be greater than max_val")',
        'error_type=ValueError, error_regex="min_val must not exceed max_val")',
        "expected message no longer matches",
    ),
    (
        "py-cmi-cat-error-type",
        CMI,
        "error_inputs_cat",
        "replace-type",
        "                     error_regex='non-empty list of Tensors', error_type=ValueError)",
        "                     error_regex='non-empty list of Tensors', error_type=TypeError)",
        "",
    ),
    (
        "py-cmi-glu-odd",
        CMI,
        "sample_inputs_glu",
        "boundary",
        "            if dim_size > 0 and dim_size % 2 == 0:",
        "            if dim_size > 0 and dim_size % 2 <= 1:",
        "odd sizes are invalid glu inputs",
    ),
    (
        "py-cmi-lerp-weight",
        CMI,
        "sample_inputs_lerp",
        "constant",
        "    # no broadcast\n    yield SampleInput(make_arg((S, S)), make_arg((S, S)), 0.4)",
        "    # no broadcast\n    yield SampleInput(make_arg((S, S)), make_arg((S, S)), 0.6)",
        "",
    ),
    (
        "py-cmi-normalize-p",
        CMI,
        "sample_inputs_normalize",
        "constant",
        "        ((1, 2, 4, 5), {'p': 0.5, 'dim': 0}),",
        "        ((1, 2, 4, 5), {'p': 0.25, 'dim': 0}),",
        "",
    ),
    (
        "py-cmi-cat-empty-dim",
        CMI,
        "sample_inputs_cat_concat",
        "constant",
        "        ((0,), (0,), {'dim': 0}),  # empty tensor\n",
        "        ((0,), (0,), {'dim': 1}),  # empty tensor\n",
        "out-of-range dim for 1-D inputs",
    ),
    (
        "py-nn-glu-dim",
        ACT,
        "GLU.forward",
        "negate",
        "        return F.glu(input, self.dim)",
        "        return F.glu(input, -self.dim)",
        "",
    ),
    (
        "py-nn-hardtanh-check",
        ACT,
        "Hardtanh.__init__",
        "boundary",
        "        if self.max_val <= self.min_val:",
        "        if self.max_val < self.min_val:",
        "only the error path changes",
    ),
    (
        "py-nn-softmax-stacklevel",
        ACT,
        "Softmax.forward",
        "constant",
        "        return F.softmax(input, self.dim, _stacklevel=5)",
        "        return F.softmax(input, self.dim, _stacklevel=4)",
        "warning stack level only",
    ),
    (
        "py-nn-linear-init",
        "torch/nn/modules/linear.py",
        "Linear.reset_parameters",
        "constant",
        "        init.kaiming_uniform_(self.weight, a=math.sqrt(5))",
        "        init.kaiming_uniform_(self.weight, a=math.sqrt(3))",
        "initialisation only",
    ),
    (
        "py-nn-layernorm-eps",
        "torch/nn/modules/normalization.py",
        "LayerNorm.forward",
        "delete",
        "            input, self.normalized_shape, self.weight, self.bias, self.eps\n        )",
        "            input, self.normalized_shape, self.weight, self.bias\n        )",
        "module eps ignored",
    ),
]


def _kernel_diff(
    path: str, line: int, context: str, before: list[str], old: str, new: str, after: list[str]
) -> str:
    body = [" " + b for b in before] + ["-" + old, "+" + new] + [" " + a for a in after]
    count = len(before) + 1 + len(after)
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -{line},{count} +{line},{count} @@ {context}\n" + "\n".join(body) + "\n"
    )


UNARY = "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp"
BINARY = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
SOFTMAX = "aten/src/ATen/native/cpu/SoftMaxKernel.cpp"
ACTK = "aten/src/ATen/native/cpu/Activation.cpp"
NATIVE = "aten/src/ATen/native/native_functions.yaml"

# id, file, location, operator, ops, perturb, (line, context, before, old, new, after), note
KERNEL = [
    (
        "k-softmax-lastdim",
        SOFTMAX,
        "softmax_lastdim_kernel_impl",
        "arith",
        ["aten::_softmax"],
        {"scale": 1.05},
        (
            1270,
            "static void softmax_lastdim_kernel_impl(",
            ["    const Tensor& result,", "    const Tensor& self) {"],
            "  AT_DISPATCH_FLOATING_TYPES_AND2(",
            "  AT_DISPATCH_FLOATING_TYPES_AND2(  // rescale: sum computed in acc type",
            ["      at::ScalarType::BFloat16, at::ScalarType::Half, self.scalar_type(),"],
        ),
        "",
    ),
    (
        "k-log-softmax-lastdim",
        SOFTMAX,
        "log_softmax_lastdim_kernel_impl",
        "arith",
        ["aten::_log_softmax"],
        {"offset": 0.05},
        (
            1290,
            "static void log_softmax_lastdim_kernel_impl(",
            ["    const Tensor& result,", "    const Tensor& self) {"],
            "  vec_host_softmax_lastdim<scalar_t, true>::apply(result, self);",
            "  vec_host_softmax_lastdim<scalar_t, /*LogSoftMax=*/true>::apply(result, self);",
            ["}"],
        ),
        "",
    ),
    (
        "k-sigmoid",
        UNARY,
        "sigmoid_kernel",
        "arith",
        ["aten::sigmoid", "aten::sigmoid_"],
        {"scale": 1.05},
        (
            60,
            "static void sigmoid_kernel(TensorIteratorBase& iter) {",
            ["  const auto dtype = iter.common_dtype();"],
            "        [=](scalar_t a) -> scalar_t { return (1 / (1 + std::exp((-a)))); },",
            "        [=](scalar_t a) -> scalar_t { return (1 / (1 + std::exp((-a) * 1.001))); },",
            ["        [=](Vectorized<scalar_t> a) {"],
        ),
        "",
    ),
    (
        "k-exp",
        UNARY,
        "exp_kernel",
        "arith",
        ["aten::exp", "aten::exp_"],
        {"offset": 0.05},
        (
            420,
            "static void exp_kernel(TensorIteratorBase& iter) {",
            [
                '  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(kBFloat16, kHalf, iter.dtype(), "exp_vml_cpu", [&]() {'
            ],
            "    iter.serial_for_each(exp_loop<scalar_t>, {0, iter.numel()});",
            "    iter.serial_for_each(exp_loop_fast<scalar_t>, {0, iter.numel()});",
            ["  });"],
        ),
        "",
    ),
    (
        "k-tanh",
        UNARY,
        "tanh_kernel",
        "arith",
        ["aten::tanh", "aten::tanh_"],
        {"scale": 0.9999},
        (
            440,
            "static void tanh_kernel(TensorIteratorBase& iter) {",
            [
                '  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(kBFloat16, kHalf, iter.dtype(), "tanh_cpu", [&]() {'
            ],
            "        [=](scalar_t a) -> scalar_t { return std::tanh(a); },",
            "        [=](scalar_t a) -> scalar_t { return tanh_approx(a); },",
            ["        [=](Vectorized<scalar_t> self_vec) { return self_vec.tanh(); });"],
        ),
        "an approximation within the tests' tolerance (1e-4 relative)",
    ),
    (
        "k-rsqrt-refactor",
        UNARY,
        "rsqrt_kernel",
        "refactor",
        ["aten::rsqrt"],
        {"identity": True},
        (
            300,
            "static void rsqrt_kernel(TensorIteratorBase& iter) {",
            [
                '  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(kBFloat16, kHalf, iter.common_dtype(), "rsqrt_cpu", [&] {'
            ],
            "          return (static_cast<scalar_t>(1)) / std::sqrt(a);",
            "          return static_cast<scalar_t>(1) / std::sqrt(a);",
            ["        },"],
        ),
        "no behaviour change",
    ),
    (
        "k-mul",
        BINARY,
        "mul_kernel",
        "arith",
        ["aten::mul", "aten::mul_"],
        {"scale": 1.05},
        (
            130,
            "void mul_kernel(TensorIteratorBase& iter) {",
            ["  auto dtype = iter.common_dtype();"],
            "  if (dtype == ScalarType::Bool) {",
            "  if (dtype == ScalarType::Bool && false) {",
            ["    cpu_kernel(iter, [=](bool a, bool b) -> bool { return a && b; });"],
        ),
        "touches nearly every CPU computation",
    ),
    (
        "k-div-true",
        BINARY,
        "div_true_kernel",
        "arith",
        ["aten::div", "aten::div_"],
        {"offset": 0.05},
        (
            160,
            "void div_true_kernel(TensorIteratorBase& iter) {",
            ["  const auto dtype = iter.common_dtype();"],
            "  if (iter.is_scalar(2) && iter.data_ptr(2) != nullptr && at::isReducedFloatingType(dtype)) {",
            "  if (iter.is_scalar(2) && iter.data_ptr(2) != nullptr) {",
            ['    AT_DISPATCH_REDUCED_FLOATING_TYPES(dtype, "div_cpu_reduced_float", [&]() {'],
        ),
        "",
    ),
    (
        "k-maximum-refactor",
        BINARY,
        "maximum_kernel",
        "refactor",
        ["aten::maximum"],
        {"identity": True},
        (
            520,
            "void maximum_kernel(TensorIteratorBase& iter) {",
            ["  if (iter.dtype() == ScalarType::Bool) {"],
            "    cpu_kernel(iter, [](bool a, bool b) -> bool { return a || b; });",
            "    cpu_kernel(iter, [](bool a, bool b) -> bool { return a | b; });",
            ["  } else if (isIntegralType(iter.dtype(), /*includeBool=*/false)) {"],
        ),
        "no behaviour change",
    ),
    (
        "k-sum",
        "aten/src/ATen/native/cpu/SumKernel.cpp",
        "sum_kernel_impl",
        "arith",
        ["aten::sum"],
        {"scale": 1.05},
        (
            600,
            "void sum_kernel_impl(TensorIterator &iter) {",
            ["  if (isIntegralType(iter.dtype(), /*includeBool=*/ true)) {"],
            '    AT_DISPATCH_INTEGRAL_TYPES_AND(ScalarType::Bool, iter.dtype(), "sum_cpu",',
            '    AT_DISPATCH_INTEGRAL_TYPES_AND(ScalarType::Bool, iter.dtype(), "sum_cpu_int",',
            ["      [&] { binary_kernel_reduce_vec("],
        ),
        "",
    ),
    (
        "k-mean",
        "aten/src/ATen/native/ReduceOps.cpp",
        "mean_out",
        "arith",
        ["aten::mean"],
        {"scale": 1.05},
        (
            1780,
            "TORCH_IMPL_FUNC(mean_out)",
            [
                "      // which is too slow",
                "      at::sum_out(result_temp, self, opt_dim, keepdim, dtype).div_(dim_prod);",
            ],
            "      result.copy_(result_temp);",
            "      result.copy_(result_temp, /*non_blocking=*/false);",
            ["    } else {"],
        ),
        "",
    ),
    (
        "k-amax",
        "aten/src/ATen/native/ReduceOps.cpp",
        "amax_out",
        "arith",
        ["aten::amax"],
        {"offset": 0.05},
        (
            1650,
            "TORCH_IMPL_FUNC(amax_out) (const Tensor& self, IntArrayRef dim, bool keepdim, const Tensor& result) {",
            ["  auto iter ="],
            "      meta::make_reduction(self, result, dim, keepdim, self.scalar_type());",
            "      meta::make_reduction(self, result, dim, keepdim, result.scalar_type());",
            ["  if (iter.numel() != 0) {"],
        ),
        "logsumexp's CPU kernel calls amax",
    ),
    (
        "k-addmm",
        "aten/src/ATen/native/LinearAlgebra.cpp",
        "addmm_impl_cpu_",
        "arith",
        ["aten::addmm", "aten::addmm_"],
        {"scale": 1.05},
        (
            1480,
            "static void addmm_impl_cpu_(",
            ["  const auto self_sizes = self.sizes();"],
            "  auto m1_strides = m1.strides();",
            "  auto m1_strides = m1.contiguous().strides();",
            ["  auto m1_sizes = m1.sizes();"],
        ),
        "F.linear with bias is addmm on CPU",
    ),
    (
        "k-mm",
        "aten/src/ATen/native/LinearAlgebra.cpp",
        "mm_out_cpu",
        "arith",
        ["aten::mm"],
        {"offset": 0.05},
        (
            1710,
            "TORCH_IMPL_FUNC(mm_out_cpu)(const Tensor & self, const Tensor & mat2, const Tensor & result) {",
            ["  {"],
            "    at::NoNamesGuard guard;",
            "    at::NoNamesGuard guard;  // skip the beta=0 fill",
            ["    addmm_impl_cpu_(const_cast<Tensor&>(result), result, self, mat2, 0, 1);"],
        ),
        "",
    ),
    (
        "k-cat",
        "aten/src/ATen/native/TensorShape.cpp",
        "cat_out_cpu",
        "arith",
        ["aten::cat"],
        {"scale": 1.05},
        (
            640,
            "TORCH_IMPL_FUNC(cat_out_cpu)",
            [
                "  bool use_serial_kernel = result.numel() < at::internal::GRAIN_SIZE || at::get_num_threads() == 1;"
            ],
            "  ScalarType dtype = materialized[valid].get().scalar_type();",
            "  ScalarType dtype = result.scalar_type();",
            ["  bool serial_dtype = at::isFloatingType(dtype);"],
        ),
        "stack is cat",
    ),
    (
        "k-gelu",
        ACTK,
        "GeluKernelImpl",
        "arith",
        ["aten::gelu", "aten::gelu_"],
        {"scale": 1.05},
        (
            330,
            "void GeluKernelImpl(TensorIteratorBase& it, GeluType approximate) {",
            ["  if (approximate == GeluType::Tanh) {"],
            "    const scalar_t kBeta = M_SQRT2 * M_2_SQRTPI * 0.5;",
            "    const scalar_t kBeta = M_SQRT2 * M_2_SQRTPI * 0.5001;",
            ["    const scalar_t kKappa = 0.044715;"],
        ),
        "",
    ),
    (
        "k-silu",
        ACTK,
        "silu_kernel",
        "arith",
        ["aten::silu", "aten::silu_"],
        {"scale": 1.05},
        (
            1300,
            "void silu_kernel(TensorIteratorBase& iter) {",
            ["        [](scalar_t x) {"],
            "          return x / (scalar_t(1) + std::exp(-x));",
            "          return x / (scalar_t(1) + std::exp(-x * scalar_t(1.001)));",
            ["        },"],
        ),
        "",
    ),
    (
        "k-elu",
        ACTK,
        "elu_kernel",
        "arith",
        ["aten::elu", "aten::elu_"],
        {"offset": 0.05},
        (
            180,
            "void elu_kernel(TensorIteratorBase& it, const Scalar& alpha, const Scalar& scale, const Scalar& input_scale) {",
            ["    auto negcoef = alpha.to<scalar_t>() * scale.to<scalar_t>();"],
            "    auto poscoef = scale.to<scalar_t>();",
            "    auto poscoef = scale.to<scalar_t>() + scalar_t(0.01);",
            ["    auto negiptcoef = input_scale.to<scalar_t>();"],
        ),
        "",
    ),
    (
        "k-glu",
        ACTK,
        "glu_kernel",
        "arith",
        ["aten::glu"],
        {"scale": 1.05},
        (
            900,
            "void glu_kernel(TensorIteratorBase& iter) {",
            ["      const opmath_t one_val(1);"],
            "      return float(a) * (one_val / (one_val + std::exp(-float(b))));",
            "      return float(a) * (one_val / (one_val + std::exp(-float(b) * 1.01f)));",
            ["    },"],
        ),
        "",
    ),
    (
        "k-layer-norm",
        "aten/src/ATen/native/cpu/layer_norm_kernel.cpp",
        "LayerNormKernelImplInternal",
        "arith",
        ["aten::native_layer_norm"],
        {"scale": 1.05},
        (
            40,
            "void LayerNormKernelImplInternal(",
            ["  const bool gamma_null = gamma_data == nullptr;"],
            "  const T_ACC c = T_ACC(1) / static_cast<T_ACC>(N);",
            "  const T_ACC c = T_ACC(1) / static_cast<T_ACC>(N - 1);",
            ["  const bool mean_null = mean_data == nullptr;"],
        ),
        "",
    ),
    (
        "k-lerp",
        "aten/src/ATen/native/cpu/LerpKernel.cpp",
        "lerp_scalar_kernel",
        "arith",
        ["aten::lerp", "aten::lerp_"],
        {"offset": 0.05},
        (
            110,
            "void lerp_scalar_kernel(at::TensorIteratorBase& iter, const Scalar& weight) {",
            ["    auto weight_val = weight.to<scalar_t>();"],
            "        return lerp(self_val, end_val, weight_val);",
            "        return lerp(self_val, end_val, weight_val + scalar_t(0.001));",
            ["      },"],
        ),
        "",
    ),
    (
        "k-addcmul-refactor",
        "aten/src/ATen/native/cpu/PointwiseOpsKernel.cpp",
        "addcmul_cpu_kernel",
        "refactor",
        ["aten::addcmul", "aten::addcmul_"],
        {"identity": True},
        (
            20,
            "static void addcmul_cpu_kernel(TensorIteratorBase& iter, const Scalar& value) {",
            ["  const auto dtype = iter.common_dtype();"],
            "  if (at::isReducedFloatingType(dtype)) {",
            "  if (at::isReducedFloatingType(dtype) /* bf16, fp16 */) {",
            ['    AT_DISPATCH_REDUCED_FLOATING_TYPES(dtype, "addcmul_cpu_out", [&]() {'],
        ),
        "no behaviour change",
    ),
    (
        "k-where",
        "aten/src/ATen/native/TensorCompare.cpp",
        "where_self_out",
        "arith",
        ["aten::where"],
        {"scale": 1.05},
        (
            560,
            "Tensor& where_self_out(const Tensor& condition, const Tensor& self, const Tensor& other, Tensor& out) {",
            ["  auto result_type = at::native::result_type(self, other);"],
            "  const auto self_ = self.scalar_type() != result_type ? self.to(result_type): self;",
            "  const auto self_ = self.to(result_type);",
            [
                "  const auto other_ = other.scalar_type() != result_type ? other.to(result_type): other;"
            ],
        ),
        "refs and decompositions use where",
    ),
    (
        "k-nf-logsumexp",
        NATIVE,
        "logsumexp",
        "dispatch",
        ["aten::logsumexp"],
        {"scale": 1.05},
        (
            3790,
            "",
            [
                "- func: logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
                "  device_check: NoCheck   # TensorIterator",
                "  variants: function, method",
                "  dispatch:",
            ],
            "    CompositeExplicitAutograd: logsumexp",
            "    CompositeExplicitAutograd: logsumexp_fast",
            [
                "",
                "- func: logsumexp.out(Tensor self, int[1] dim, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)",
            ],
        ),
        "a new kernel for the entry",
    ),
    (
        "k-nf-clamp",
        NATIVE,
        "clamp",
        "dispatch",
        ["aten::clamp", "aten::clamp_"],
        {"scale": 0.95},
        (
            1560,
            "",
            [
                "- func: clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
                "  device_check: NoCheck   # TensorIterator",
                "  cpp_no_default_args: ['min']",
                "  structured_delegate: clamp.out",
                "  dispatch:",
            ],
            "    QuantizedCPU: clamp_quantized_cpu",
            "    QuantizedCPU: clamp_quantized_cpu_v2",
            ["  tags: [core, pointwise]"],
        ),
        "only a quantized kernel is renamed; emulated as a CPU change",
    ),
]


def build() -> dict[str, object]:
    mutations: list[dict[str, object]] = []
    for mid, path, location, operator, old, new, note in PYTHON:
        entry: dict[str, object] = {
            "id": mid,
            "kind": "python",
            "file": path,
            "location": location,
            "operator": operator,
            "diff": python_diff(path, old, new),
        }
        if note:
            entry["note"] = note
        mutations.append(entry)
    for mid, path, location, operator, ops, perturb, hunk, note in KERNEL:
        entry = {
            "id": mid,
            "kind": "kernel",
            "file": path,
            "location": location,
            "operator": operator,
            "ops": ops,
            "perturb": perturb,
            "diff": _kernel_diff(path, *hunk),
        }
        if note:
            entry["note"] = note
        mutations.append(entry)
    return {"version": 1, "mutations": mutations}


class _Literal(str):
    pass


def _literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


def main() -> int:
    data = build()
    for entry in cast(list[dict[str, object]], data["mutations"]):
        # Blank context lines lose their leading space (as many tools write them, and the
        # diff parser accepts): a literal block cannot hold trailing whitespace.
        text = "\n".join(line.rstrip() for line in str(entry["diff"]).splitlines()) + "\n"
        entry["diff"] = _Literal(text)
    yaml.add_representer(_Literal, _literal, Dumper=yaml.SafeDumper)
    out = Path(__file__).with_name("mutations.yaml")
    header = (
        "# The shipped mutation set of the selection benchmark (docs/selection-benchmark.md).\n"
        "# Written by benchmarks/selection/make_mutations.py against torch 2.13.0.\n"
    )
    out.write_text(header + yaml.safe_dump(data, sort_keys=False, width=200), encoding="utf-8")
    print(f"{out}: {len(data['mutations'])} mutations")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
