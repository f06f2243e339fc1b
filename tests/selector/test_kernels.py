"""C++ changes are selected through the kernel map, not run blind.

The Inventory is the bundled one (torch 2.13.0) with the kernel map of the installed torch's
native_functions.yaml, as `spyre-ci inventory` builds it; `bundled_inventory(False)` is the
same Inventory as built before it carried a map. The C++ texts are stand-ins with upstream's
definitions (`tests/selector/cpp_sources.py`).
"""

from __future__ import annotations

import re

import pytest

from selector import ChangeSet, ImpactMap, InventoryIndex, Plan, plan
from selector.definitions import locate
from selector.diff import as_form
from selector.kernels import read_cpp
from tests.selector import cpp_sources as cs


@pytest.fixture(scope="module")
def mapped() -> InventoryIndex:
    return InventoryIndex.build(cs.bundled_inventory())


@pytest.fixture(scope="module")
def unmapped() -> InventoryIndex:
    return InventoryIndex.build(cs.bundled_inventory(False))


def _subjects(p: Plan, index: InventoryIndex) -> set[str]:
    return {index.by_id[vid].subject for vid in p.selected_ids}


def _evidence(p: Plan) -> str:
    return "\n".join(e for op in p.facts.ops for e in op.evidence)


EUCLIDEAN = ("Tensor x1_norm = x1.pow(2).sum(-1, true);", "Tensor x1_norm = x1.square().sum(-1);")


def test_a_kernel_no_variant_tests_by_name_reaches_the_ops_of_its_callers(
    mapped: InventoryIndex, unmapped: InventoryIndex
) -> None:
    change = cs.cpp_change(cs.DISTANCE, cs.DISTANCE_CPP, *EUCLIDEAN)
    before = plan(change, unmapped)
    assert before.decision == "full"
    assert before.fallback is not None and "carries no kernel map" in before.fallback
    after = plan(change, mapped)
    assert after.decision == "targeted", after.fallback
    assert set(after.facts.op_names) == {"cdist", "_cdist_forward"}
    assert _subjects(after, mapped) == {"cdist"}
    assert after.totals.selected < 0.01 * after.totals.eligible
    evidence = _evidence(after)
    assert "_euclidean_dist <- cdist_impl <- cdist;" in evidence
    assert "native_functions.yaml dispatch CompositeImplicitAutograd: cdist -> cdist" in evidence
    assert "(callers elsewhere unseen: heuristic)" in evidence
    top = after.selected[0].reasons[0]
    assert top.heuristic == "op_match" and "native_functions.yaml" in top.reason


@pytest.mark.parametrize("form", ["source", "git", "plain"])
def test_a_structured_kernel_names_its_namespaced_op(
    mapped: InventoryIndex, unmapped: InventoryIndex, form: str
) -> None:
    change = cs.cpp_change(
        cs.UNARY_OPS,
        cs.UNARY_OPS_CPP,
        "  special_ndtri_stub(device_type(), *this);",
        "  special_ndtri_stub(device_type(), *this);\n  TORCH_INTERNAL_ASSERT(is_ok());",
        form=form,
    )
    before = plan(change, unmapped)
    # git's hunk header names the function above the hunk (polygamma_out), not this one.
    assert before.decision == ("targeted" if form == "git" else "full")
    assert "special.ndtri" not in before.facts.op_names
    after = plan(change, mapped)
    assert after.decision == "targeted", after.fallback
    assert "special.ndtri" in after.facts.op_names
    assert {"special.ndtri", "_refs.special.ndtri"} <= _subjects(after, mapped)
    # The dispatch keys are the installed torch's own (2.14 adds XPU to this entry).
    assert re.search(
        r"native_functions\.yaml dispatch CPU, CUDA(, \w+)*: special_ndtri_out -> "
        r"special_ndtri, special\.ndtri",
        _evidence(after),
    ), _evidence(after)
    if form != "git":
        assert _subjects(after, mapped) == {"special.ndtri", "_refs.special.ndtri"}


@pytest.mark.parametrize("form", ["source", "git", "plain"])
def test_a_stub_kernel_names_the_ops_of_its_stub(mapped: InventoryIndex, form: str) -> None:
    change = cs.cpp_change(
        cs.UNARY_KERNEL,
        cs.UNARY_KERNEL_CPP,
        "return 1 / (1 + std::exp(-a));",
        "return scalar_t(1) / (1 + std::exp(-a));",
        form=form,
    )
    after = plan(change, mapped)
    assert after.decision == "targeted", after.fallback
    assert after.facts.op_names == ("sigmoid",)
    evidence = _evidence(after)
    assert re.search(
        r"native_functions\.yaml dispatch CPU, CUDA(, \w+)*: sigmoid_out -> sigmoid", evidence
    ), evidence
    assert "(by name: heuristic)" in evidence
    if form == "source":  # the registration is in the file, below the hunk
        assert "REGISTER_DISPATCH(sigmoid_stub, sigmoid_kernel)" in evidence


def test_a_kernel_file_helper_reaches_the_stubs_its_callers_are_registered_for(
    mapped: InventoryIndex,
) -> None:
    edit = ("out[i * cols + j] = std::pow(sum, 1 / p);", "out[i * cols + j] = std::pow(sum, p);")
    after = plan(cs.cpp_change(cs.DISTANCE_KERNEL, cs.DISTANCE_KERNEL_CPP, *edit), mapped)
    assert after.decision == "targeted", after.fallback
    assert set(after.facts.op_names) == {"cdist", "_pdist_forward"}
    assert "run_parallel_cdist <- apply_cdist <- cdist_kernel_impl;" in _evidence(after)
    # Without the source, the hunks name no function (git's context is `struct Dist {`).
    blind = plan(
        cs.cpp_change(cs.DISTANCE_KERNEL, cs.DISTANCE_KERNEL_CPP, *edit, form="git"), mapped
    )
    assert blind.decision == "full"
    assert blind.fallback is not None and "no changed definition found" in blind.fallback


HELPER = (
    "auto iter = TensorIterator::unary_op(complex_result, self);",
    "auto iter = TensorIterator::unary_op(complex_result, self, /*check=*/true);",
)


def test_a_file_local_helper_names_the_kernels_that_call_it(mapped: InventoryIndex) -> None:
    after = plan(cs.cpp_change(cs.UNARY_OPS, cs.UNARY_OPS_CPP, *HELPER), mapped)
    assert after.decision == "targeted", after.fallback
    assert set(after.facts.op_names) == {"abs", "angle"}
    assert "unary_op_impl_with_complex_to_float_out <- abs_out;" in _evidence(after)
    # Hunks alone cannot tell who calls it: a full run, and the plan says why.
    blind = plan(cs.cpp_change(cs.UNARY_OPS, cs.UNARY_OPS_CPP, *HELPER, form="git"), mapped)
    assert blind.decision == "full"
    assert blind.fallback == (
        "cannot name the ops changed in kernel code: aten/src/ATen/native/UnaryOps.cpp "
        "(unary_op_impl_with_complex_to_float_out: its callers are unknown without the old "
        "source of the file)"
    )


def test_a_changed_macro_names_the_ops_it_is_invoked_for(mapped: InventoryIndex) -> None:
    change = cs.cpp_change(
        cs.UNARY_OPS,
        cs.UNARY_OPS_CPP,
        "    build_borrowing_unary_float_op(maybe_get_output(), self); \\",
        "    build_unary_float_op(maybe_get_output(), self);           \\",
    )
    after = plan(change, mapped)
    assert after.decision == "targeted", after.fallback
    assert set(after.facts.op_names) == {"sin", "cos", "rsqrt"}
    assert (
        "macro CREATE_UNARY_FLOAT_META_FUNC changed, invoked with sin: native_functions.yaml "
        "structured op: TORCH_META_FUNC(sin) -> sin" in _evidence(after)
    )


@pytest.mark.parametrize("form", ["source", "plain"])
def test_a_changed_macro_invocation_names_its_kernel(mapped: InventoryIndex, form: str) -> None:
    change = cs.cpp_change(
        cs.UNARY_OPS,
        cs.UNARY_OPS_CPP,
        "CREATE_UNARY_TORCH_IMPL_FUNC(cos_out, cos_stub)",
        "CREATE_UNARY_TORCH_IMPL_FUNC(cos_out, cos_vectorized_stub)",
        form=form,
    )
    after = plan(change, mapped)
    assert after.decision == "targeted", after.fallback
    assert after.facts.op_names == ("cos",)


MATH_H = "aten/src/ATen/native/Math.h"
MATH_H_TEXT = """\
#pragma once

static inline double calc_polygamma(double x, int n) {
  const double factorial = std::tgamma(n + 1.0);
  return ((n % 2) ? 1.0 : -1.0) * factorial * zeta(n + 1.0, x);
}
"""
SHARED = "aten/src/ATen/native/LinearAlgebraUtils.cpp"
SHARED_TEXT = """\
namespace at::native {

void check_linalg_inputs(const Tensor& a, const char* name) {
  TORCH_CHECK(a.dim() >= 2, name, ": expected a batch of matrices");
}

Tensor linalg_cross(const Tensor& a, const Tensor& b, int64_t dim) {
  check_linalg_inputs(a, "linalg.cross");
  return at::cross(a, b, dim);
}

} // namespace at::native
"""


@pytest.mark.parametrize(
    ("path", "text", "before", "after", "why"),
    [
        (
            MATH_H,
            MATH_H_TEXT,
            "((n % 2) ? 1.0 : -1.0)",
            "((n & 1) ? 1.0 : -1.0)",
            "calc_polygamma: defined in a header: any file that includes it may call it",
        ),
        (
            SHARED,
            SHARED_TEXT,
            "a.dim() >= 2",
            "a.dim() > 1",
            "check_linalg_inputs: not file-local (not static, inline or in an anonymous namespace)",
        ),
    ],
)
def test_a_helper_other_files_may_call_runs_everything_and_says_why(
    mapped: InventoryIndex, path: str, text: str, before: str, after: str, why: str
) -> None:
    p = plan(cs.cpp_change(path, text, before, after), mapped)
    assert p.decision == "full"
    assert p.fallback == f"cannot name the ops changed in kernel code: {path} ({why})"
    assert p.totals.selected == p.totals.eligible
    (fact,) = p.facts.paths
    assert fact.unnamed == (why,)


def test_a_file_the_map_cannot_read_runs_everything_and_says_why(
    mapped: InventoryIndex,
) -> None:
    # `diff -u` of a file GitHub could not send: no function context, no old source.
    body = (
        "--- a/aten/src/ATen/native/Blas.cpp\n+++ b/aten/src/ATen/native/Blas.cpp\n"
        "@@ -120,3 +120,3 @@\n   const int64_t n = self.size(0);\n"
        "-  const bool use_gemv = n > 1;\n+  const bool use_gemv = n > 2;\n   return out;\n"
    )
    p = plan(ChangeSet.from_diff(body, head_sha="d" * 40), mapped)
    assert p.decision == "full"
    assert p.fallback == (
        "cannot name the ops changed in kernel code: aten/src/ATen/native/Blas.cpp (no changed "
        "definition found: the hunks show no function and the old source is not at hand)"
    )


def test_the_trace_names_a_kernel_no_variant_tests_by_name(mapped: InventoryIndex) -> None:
    # Hunks only (`diff -u`: no function context): the trace saw the cdist
    # variants of one dtype dispatch aten::_euclidean_dist, so that kernel's op is named.
    change = cs.cpp_change(cs.DISTANCE, cs.DISTANCE_CPP, *EUCLIDEAN, form="plain")
    assert plan(change, mapped).decision == "full"
    runs = {vid for vid in mapped.runnable if mapped.by_id[vid].subject == "cdist"}
    dispatching = {vid for vid in runs if vid.endswith("::float32")}
    assert dispatching
    impact = ImpactMap(
        functions={vid: frozenset() for vid in mapped.runnable},
        aten_ops={
            vid: frozenset({"aten::_euclidean_dist", "aten::cdist"} if vid in dispatching else ())
            for vid in mapped.runnable
        },
    )
    p = plan(change, mapped, impact=impact)
    assert p.decision == "targeted", p.fallback
    assert p.facts.op_names == ("_euclidean_dist",)
    assert set(p.selected_ids) == dispatching
    reason = "dispatches touched aten::_euclidean_dist"
    assert all(reason in s.reasons[0].reason for s in p.selected)


@pytest.mark.parametrize(
    ("path", "text", "edit"),
    [
        (cs.DISTANCE, cs.DISTANCE_CPP, EUCLIDEAN),
        (cs.UNARY_OPS, cs.UNARY_OPS_CPP, HELPER),
        (cs.UNARY_OPS, cs.UNARY_OPS_CPP, ("polygamma_stub(device_type(), *this, n);", "n;")),
    ],
)
def test_every_form_of_a_diff_with_the_source_names_the_same_ops(
    mapped: InventoryIndex, path: str, text: str, edit: tuple[str, str]
) -> None:
    git = cs.cpp_change(path, text, *edit, form="git")
    diff = "".join(
        f"diff --git a/{p.path} b/{p.path}\n--- a/{p.path}\n+++ b/{p.path}\n"
        + "".join(f"@@ -{h.old_start},{h.old_count} +{h.new_start},{h.new_count} @@ {h.context}\n"
                  + "".join(f"{line}\n" for line in h.lines) for h in p.hunks)
        for p in git.patches.values()
    )  # fmt: skip
    facts = set()
    for form in ("git", "plain", "github"):
        change = ChangeSet.from_diff(as_form(diff, form)).with_sources({path: text})
        p = plan(change, mapped)
        facts.add((p.decision, p.facts.op_names, tuple(p.selected_ids)))
    assert len(facts) == 1, facts
    ((decision, _, _),) = facts
    assert decision == "targeted"


def test_the_plan_json_keeps_what_the_map_could_not_name(mapped: InventoryIndex) -> None:
    p = plan(cs.cpp_change(SHARED, SHARED_TEXT, "a.dim() >= 2", "a.dim() > 1"), mapped)
    again = Plan.from_json(p.to_json())
    assert again.facts.paths[0].unnamed == p.facts.paths[0].unnamed != ()


def test_the_call_structure_of_a_cpp_file() -> None:
    distance = read_cpp(cs.DISTANCE_CPP)
    assert distance.file_local["cdist_impl"] is True
    assert distance.file_local["_euclidean_dist"] is False
    assert distance.callers["cdist_impl"] == {"cdist", "_cdist_forward"}
    assert distance.callers["_euclidean_dist"] == {"cdist_impl"}
    kernel = read_cpp(cs.DISTANCE_KERNEL_CPP)
    # In a struct inside an anonymous namespace: only this file can call them.
    assert kernel.file_local["run_parallel_cdist"] is True
    assert kernel.file_local["cdist_kernel_impl"] is True
    assert kernel.callers["run_parallel_cdist"] == {"apply_cdist", "apply_pdist"}
    assert kernel.registrations == {
        "cdist_kernel_impl": "cdist_stub",
        "pdist_forward_kernel_impl": "pdist_forward_stub",
    }
    assert read_cpp(cs.UNARY_KERNEL_CPP).registrations["sigmoid_kernel"] == "sigmoid_stub"
    unary = read_cpp(cs.UNARY_OPS_CPP)
    assert [name for name, _, _ in unary.macros] == [
        "CREATE_UNARY_FLOAT_META_FUNC",
        "CREATE_UNARY_TORCH_IMPL_FUNC",
    ]
    assert unary.expansions["CREATE_UNARY_FLOAT_META_FUNC"] == ("sin", "cos", "rsqrt")
    assert "sin_out" in unary.expansions["CREATE_UNARY_TORCH_IMPL_FUNC"]
    assert unary.file_local["unary_op_impl_with_complex_to_float_out"] is True
    assert unary.file_local["abs_out"] is False


def test_a_function_after_a_row_of_macro_invocations_keeps_its_own_name() -> None:
    change = cs.cpp_change(
        cs.UNARY_OPS, cs.UNARY_OPS_CPP, "polygamma_stub(device_type(), *this, n);", "n;"
    )
    located = locate(change.patches[cs.UNARY_OPS], cs.UNARY_OPS_CPP)
    assert located is not None
    assert {(i.kind, i.name) for i in located} == {("cpp-function", "polygamma_out")}


ROUNDING = "aten/src/ATen/native/Rounding.cpp"
ROUNDING_TEXT = """\
#include <ATen/native/UnaryOps.h>

namespace at::native {

static void check_real_input(const Tensor& self, const char* name) {
  TORCH_CHECK(!self.is_complex(), name, " is not supported for complex inputs");
}

#define CREATE_REAL_UNARY_OUT(func)                                   \\
Tensor& func##_out(const Tensor& self, Tensor& result) {              \\
  check_real_input(self, #func);                                      \\
  return unary_op_impl_out(result, self, func##_stub);                \\
}

CREATE_REAL_UNARY_OUT(floor)
CREATE_REAL_UNARY_OUT(ceil)

Tensor& frac_out(const Tensor& self, Tensor& result) {
  check_real_input(self, "frac");
  return unary_op_impl_out(result, self, frac_stub);
}

} // namespace at::native
"""


def test_a_helper_the_functions_of_a_macro_call_reaches_the_ops_it_is_invoked_for(
    mapped: InventoryIndex,
) -> None:
    p = plan(cs.cpp_change(ROUNDING, ROUNDING_TEXT, "!self.is_complex()", "self.is_real()"), mapped)
    assert p.decision == "targeted", p.fallback
    # The direct caller and the two functions the macro defines.
    assert set(p.facts.op_names) == {"frac", "floor", "ceil"}
    assert "check_real_input <- macro CREATE_REAL_UNARY_OUT (invoked with floor_out)" in (
        _evidence(p)
    )


def test_a_changed_include_names_nothing_and_says_so(mapped: InventoryIndex) -> None:
    change = cs.cpp_change(
        ROUNDING, ROUNDING_TEXT, "#include <ATen/native/UnaryOps.h>", "#include <ATen/Ops.h>"
    )
    p = plan(change, mapped)
    assert p.decision == "full"
    assert p.fallback is not None
    assert "`#include <ATen/native/UnaryOps.h>`: a changed preprocessor line" in p.fallback


@pytest.mark.parametrize(
    ("symbol", "stub"),
    [
        ("add_kernel", "add_stub"),
        ("add_cpu_kernel", "add_stub"),  # the longer suffix first: not `add_cpu_stub`
        ("sigmoid_kernel_impl", "sigmoid_stub"),
        ("AddKernelImpl", "add_stub"),
        ("cdist_forward", ""),
    ],
)
def test_a_kernels_name_says_its_stub(symbol: str, stub: str) -> None:
    from selector.kernels import stub_named

    assert stub_named(symbol) == stub
