"""Stand-ins for upstream C++ kernel files and the kernel map of the installed torch.

The texts have the definitions of upstream's files (names, structure: structured kernels,
dispatch stubs, file-local helpers, macros) with bodies of our own: the Scout reads names and
structure, never what a body computes. The kernel map is read from the installed torch's
native_functions.yaml without importing torch.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from dataclasses import replace
from functools import cache
from pathlib import Path

from selector import ChangeSet
from suites.inventory import NATIVE_FUNCTIONS, kernel_table
from suites.model import Inventory

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "tests" / "fixtures" / "inventory-2.13.0.json.gz"

DISTANCE = "aten/src/ATen/native/Distance.cpp"
UNARY_OPS = "aten/src/ATen/native/UnaryOps.cpp"
DISTANCE_KERNEL = "aten/src/ATen/native/cpu/DistanceOpsKernel.cpp"
UNARY_KERNEL = "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp"
RESIZE = "aten/src/ATen/native/Resize.cpp"

DISTANCE_CPP = """\
// Distance kernels (stand-in: upstream's definitions, bodies of our own).
#include <ATen/native/Distance.h>

namespace at::native {

DEFINE_DISPATCH(pdist_forward_stub);
DEFINE_DISPATCH(pdist_backward_stub);
DEFINE_DISPATCH(cdist_stub);
DEFINE_DISPATCH(cdist_backward_stub);

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  auto diff = x1 - x2 + eps;
  return at::linalg_vector_norm(diff, p, -1, keepdim);
}

Tensor pdist(const Tensor& self, const double p) {
  TORCH_CHECK(self.dim() == 2, "pdist expects a 2-D input");
  TORCH_CHECK(p >= 0, "pdist expects p >= 0");
  return at::_pdist_forward(self.contiguous(), p);
}

Tensor _euclidean_dist(const Tensor& x1, const Tensor& x2) {
  Tensor x1_norm = x1.pow(2).sum(-1, true);
  Tensor x2_norm = x2.pow(2).sum(-1, true);
  Tensor ones1 = at::ones_like(x1_norm);
  Tensor ones2 = at::ones_like(x2_norm);
  Tensor left = at::cat({x1.mul(-2), x1_norm, ones1}, -1);
  Tensor right = at::cat({x2, ones2, x2_norm}, -1);
  return left.matmul(right.mT()).clamp_min_(0).sqrt_();
}

static Tensor cdist_impl(const Tensor& x1, const Tensor& x2, const double p,
                         std::optional<int64_t> compute_mode) {
  TORCH_CHECK(p >= 0, "cdist expects p >= 0");
  int64_t mode = compute_mode.value_or(0);
  TORCH_CHECK(mode >= 0 && mode <= 2, "cdist: compute_mode must be 0, 1 or 2");
  const int64_t r1 = x1.size(-2);
  const int64_t r2 = x2.size(-2);
  if (p == 2 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)))) {
    return at::_euclidean_dist(x1, x2);
  }
  Tensor result = at::empty({r1, r2}, x1.options());
  cdist_stub(x1.device().type(), result, x1, x2, p);
  return result;
}

Tensor cdist(const Tensor& x1, const Tensor& x2, const double p,
             std::optional<int64_t> compute_mode) {
  TORCH_CHECK(x1.dim() >= 2 && x2.dim() >= 2, "cdist expects inputs of 2 or more dimensions");
  if (x1.numel() == 0 || x2.numel() == 0) {
    return at::_cdist_forward(x1, x2, p, compute_mode);
  }
  return cdist_impl(x1, x2, p, compute_mode);
}

Tensor _cdist_forward(const Tensor& x1, const Tensor& x2, const double p,
                      std::optional<int64_t> compute_mode) {
  TORCH_CHECK(x1.size(-1) == x2.size(-1), "cdist: x1 and x2 need as many columns");
  return cdist_impl(x1, x2, p, compute_mode);
}

Tensor _cdist_backward(const Tensor& grad, const Tensor& x1, const Tensor& x2, const double p,
                       const Tensor& cdist) {
  TORCH_CHECK(x1.is_contiguous(), "_cdist_backward requires X1 to be contiguous");
  Tensor grad_x1 = at::empty_like(x1);
  cdist_backward_stub(x1.device().type(), grad_x1, grad, x1, x2, p, cdist);
  return grad_x1;
}

Tensor _pdist_forward(const Tensor& self, const double p) {
  const int64_t n = self.size(0);
  Tensor result = at::empty({n * (n - 1) / 2}, self.options());
  if (n > 1) {
    pdist_forward_stub(self.device().type(), result, self, p);
  }
  return result;
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  Tensor dot = at::sum(x1 * x2, dim);
  Tensor n12 = (at::sum(x1 * x1, dim) * at::sum(x2 * x2, dim)).clamp_min_(eps * eps).sqrt_();
  return dot.div_(n12);
}

} // namespace at::native
"""

UNARY_OPS_CPP = """\
// Unary kernels (stand-in: upstream's definitions, bodies of our own).
#include <ATen/native/UnaryOps.h>

namespace at::meta {

#define CREATE_UNARY_FLOAT_META_FUNC(func)                   \\
  TORCH_META_FUNC(func) (const Tensor& self) {               \\
    build_borrowing_unary_float_op(maybe_get_output(), self); \\
  }

CREATE_UNARY_FLOAT_META_FUNC(sin)
CREATE_UNARY_FLOAT_META_FUNC(cos)
CREATE_UNARY_FLOAT_META_FUNC(rsqrt)

TORCH_META_FUNC(polygamma)(int64_t n, const Tensor& self) {
  TORCH_CHECK(n >= 0, "polygamma(n, x) expects n >= 0");
  build_borrowing_unary_float_op(maybe_get_output(), self);
}

} // namespace at::meta

namespace at::native {

#define CREATE_UNARY_TORCH_IMPL_FUNC(func_out, func_stub)              \\
TORCH_IMPL_FUNC(func_out) (const Tensor& self, const Tensor& result) { \\
  func_stub(device_type(), *this);                                     \\
}

CREATE_UNARY_TORCH_IMPL_FUNC(sin_out, sin_stub)
CREATE_UNARY_TORCH_IMPL_FUNC(cos_out, cos_stub)
CREATE_UNARY_TORCH_IMPL_FUNC(rsqrt_out, rsqrt_stub)

TORCH_IMPL_FUNC(polygamma_out)
(int64_t n, const Tensor& self, const Tensor& result) {
  polygamma_stub(device_type(), *this, n);
}

TORCH_IMPL_FUNC(special_ndtri_out) (const Tensor& self, const Tensor& result) {
  special_ndtri_stub(device_type(), *this);
}

TORCH_IMPL_FUNC(sgn_out) (const Tensor& self, const Tensor& result) {
  if (self.is_complex()) {
    sgn_stub(device_type(), *this);
  } else {
    sign_stub(device_type(), *this);
  }
}

template <typename Stub>
static inline Tensor& unary_op_impl_with_complex_to_float_out(
    Tensor& result, const Tensor& self, Stub& stub, bool promotes_integer_to_float) {
  if (self.is_complex() && !result.is_complex()) {
    Tensor complex_result = at::empty({0}, self.options());
    auto iter = TensorIterator::unary_op(complex_result, self);
    stub(iter.device_type(), iter);
    at::native::resize_output(result, complex_result.sizes());
    result.copy_(at::real(complex_result));
    return result;
  }
  auto iter = promotes_integer_to_float ? TensorIterator::unary_float_op(result, self)
                                        : TensorIterator::unary_op(result, self);
  stub(iter.device_type(), iter);
  return result;
}

Tensor& abs_out(const Tensor& self, Tensor& result) {
  return unary_op_impl_with_complex_to_float_out(result, self, abs_stub, false);
}

Tensor& angle_out(const Tensor& self, Tensor& result) {
  return unary_op_impl_with_complex_to_float_out(result, self, angle_stub, true);
}

static void mvlgamma_check(const Tensor& self, int64_t p) {
  TORCH_CHECK(self.scalar_type() != kBool, "mvlgamma is not implemented for Bool");
  TORCH_CHECK(p >= 1, "p has to be greater than or equal to 1");
}

Tensor mvlgamma(const Tensor& self, int64_t p) {
  mvlgamma_check(self, p);
  auto args = at::arange(-p * 0.5 + 0.5, 0.5, 0.5, self.options());
  args = args.add(self.unsqueeze(-1));
  return args.lgamma_().sum(-1).add_(p * (p - 1) * std::log(c10::pi<double>) * 0.25);
}

DEFINE_DISPATCH(abs_stub);
DEFINE_DISPATCH(angle_stub);
DEFINE_DISPATCH(polygamma_stub);
DEFINE_DISPATCH(sgn_stub);
DEFINE_DISPATCH(sign_stub);
DEFINE_DISPATCH(special_ndtri_stub);

} // namespace at::native
"""

DISTANCE_KERNEL_CPP = """\
// CPU distance kernels (stand-in: upstream's definitions, bodies of our own).
#include <ATen/native/Distance.h>

namespace at::native {
namespace {

template <typename scalar_t>
struct Dist {
  static void run_parallel_cdist(Tensor& result, const Tensor& t1, const Tensor& t2,
                                 const scalar_t p) {
    const scalar_t* a = t1.const_data_ptr<scalar_t>();
    const scalar_t* b = t2.const_data_ptr<scalar_t>();
    scalar_t* out = result.data_ptr<scalar_t>();
    const int64_t rows = t1.size(-2), cols = t2.size(-2), depth = t1.size(-1);
    for (int64_t i = 0; i < rows; i++) {
      for (int64_t j = 0; j < cols; j++) {
        scalar_t sum = 0;
        for (int64_t k = 0; k < depth; k++) {
          sum += std::pow(std::abs(a[i * depth + k] - b[j * depth + k]), p);
        }
        out[i * cols + j] = std::pow(sum, 1 / p);
      }
    }
  }

  static void apply_cdist(Tensor& result, const Tensor& x1, const Tensor& x2, const scalar_t p) {
    run_parallel_cdist(result, x1, x2, p);
  }

  static void apply_pdist(Tensor& result, const Tensor& self, const scalar_t p) {
    Tensor full = at::empty({self.size(0), self.size(0)}, self.options());
    run_parallel_cdist(full, self, self, p);
    result.copy_(full.triu(1).flatten().masked_select(full.triu(1).flatten() != 0));
  }
};

static void cdist_kernel_impl(Tensor& result, const Tensor& x1, const Tensor& x2, double p) {
  AT_DISPATCH_FLOATING_TYPES(result.scalar_type(), "cdist", [&] {
    Dist<scalar_t>::apply_cdist(result, x1, x2, p);
  });
}

static void pdist_forward_kernel_impl(Tensor& result, const Tensor& self, double p) {
  AT_DISPATCH_FLOATING_TYPES(self.scalar_type(), "pdist", [&] {
    Dist<scalar_t>::apply_pdist(result, self, p);
  });
}

} // namespace

REGISTER_DISPATCH(cdist_stub, &cdist_kernel_impl)
REGISTER_DISPATCH(pdist_forward_stub, &pdist_forward_kernel_impl)

} // namespace at::native
"""

UNARY_KERNEL_CPP = """\
// CPU unary kernels (stand-in: upstream's definitions, bodies of our own).
#include <ATen/native/UnaryOps.h>

namespace at::native {
inline namespace CPU_CAPABILITY {

static void sigmoid_kernel(TensorIteratorBase& iter) {
  AT_DISPATCH_FLOATING_TYPES(iter.common_dtype(), "sigmoid_cpu", [&]() {
    cpu_kernel(iter, [=](scalar_t a) -> scalar_t { return 1 / (1 + std::exp(-a)); });
  });
}

static void sign_kernel(TensorIteratorBase& iter) {
  AT_DISPATCH_ALL_TYPES(iter.dtype(), "sign_cpu", [&]() {
    cpu_kernel(iter, [=](scalar_t a) -> scalar_t { return (0 < a) - (a < 0); });
  });
}

} // namespace CPU_CAPABILITY

REGISTER_DISPATCH(sigmoid_stub, &CPU_CAPABILITY::sigmoid_kernel)
REGISTER_DISPATCH(sign_stub, &CPU_CAPABILITY::sign_kernel)

} // namespace at::native
"""

RESIZE_CPP = """\
// Output resizing shared by every kernel (stand-in: upstream's definitions, bodies of our own).
#include <ATen/native/Resize.h>

namespace at::native {

bool resize_output_check(const Tensor& output, IntArrayRef shape) {
  if (output.sizes().equals(shape)) {
    return false;
  }
  TORCH_WARN_ONCE_IF(output.numel() != 0, "An output with one or more elements was resized");
  return true;
}

const Tensor& resize_output(const Tensor& output, IntArrayRef shape) {
  if (resize_output_check(output, shape)) {
    output.resize_(shape);
  }
  return output;
}

} // namespace at::native
"""


def native_functions_text() -> str:
    """The installed torch's native_functions.yaml, found without importing torch."""
    spec = importlib.util.find_spec("torchgen")
    assert spec is not None and spec.origin is not None, "torchgen is not installed"
    root = Path(spec.origin).resolve().parent.parent
    path = next(root / rel for rel in NATIVE_FUNCTIONS if (root / rel).is_file())
    return path.read_text(encoding="utf-8")


@cache
def installed_kernels() -> dict[str, tuple[str, tuple[str, ...]]]:
    return kernel_table(native_functions_text())


@cache
def bundled_inventory(kernels: bool = True) -> Inventory:
    """The bundled Inventory (torch 2.13.0), with the kernel map of the installed torch as
    `spyre-ci inventory` builds it now (`kernels=False`: as built before, without one)."""
    inventory = Inventory.load(BUNDLED)
    return replace(inventory, kernels=installed_kernels() if kernels else {})


def cpp_change(path: str, old: str, before: str, after: str, *, form: str = "source") -> ChangeSet:
    """A diff of `path` that replaces the one `before` in `old` by `after`: `source` with the
    old text at hand (GitHub configured), `git` hunks only with git's default function context
    after `@@` (the last line above the hunk that starts with a letter, `_` or `$`), `plain`
    hunks only without it (`diff -u`)."""
    assert old.count(before) == 1, before
    new = old.replace(before, after)
    lines = list(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    )
    if form == "git":
        rows = old.splitlines()
        for i, line in enumerate(lines):
            hunk = re.match(r"@@ -(\d+)", line)
            if hunk is not None:
                above = rows[: int(hunk.group(1)) - 1]
                context = next((r for r in reversed(above) if re.match(r"[A-Za-z_$]", r)), "")
                lines[i] = f"{line.rstrip()} {context}\n" if context else line
    change = ChangeSet.from_diff("".join(lines), head_sha="c" * 40)
    return change.with_sources({path: old}) if form == "source" else change
