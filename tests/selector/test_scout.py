from __future__ import annotations

import pytest

from contracts.event import ChangedFile, TriggerEvent
from selector import ChangeSet, InventoryIndex, scout
from selector.areas import classify
from tests.testing.changes import diff_change, example_change


@pytest.mark.parametrize(
    ("path", "area", "policy"),
    [
        ("aten/src/ATen/native/SoftMax.cpp", "aten_native", "targeted"),
        ("aten/src/ATen/native/native_functions.yaml", "native_functions", "targeted"),
        ("c10/core/TensorImpl.h", "core", "blind"),
        ("aten/src/ATen/core/dispatch/Dispatcher.cpp", "dispatcher", "blind"),
        ("aten/src/ATen/TensorIterator.cpp", "core", "blind"),
        ("tools/autograd/derivatives.yaml", "derivatives", "targeted"),
        ("torch/csrc/autograd/engine.cpp", "autograd", "targeted"),
        ("torch/functional.py", "python_frontend", "targeted"),
        ("torch/nn/functional.py", "nn", "targeted"),
        ("torch/_refs/__init__.py", "refs_decomps", "targeted"),
        ("torch/_decomp/decompositions.py", "refs_decomps", "targeted"),
        ("torch/_inductor/lowering.py", "compile", "targeted"),
        ("torch/testing/_internal/common_methods_invocations.py", "test_db", "targeted"),
        ("test/test_ops.py", "upstream_tests", "targeted"),
        ("docs/source/notes/cuda.rst", "docs", "none"),
        ("torch/_inductor/README.md", "docs", "none"),
        (".github/workflows/pull.yml", "ci", "none"),
        ("CMakeLists.txt", "build", "blind"),
        ("cmake/Dependencies.cmake", "build", "blind"),
        ("torchgen/gen.py", "build", "blind"),
        ("third_party/sleef", "third_party", "blind"),
        ("functorch/README_x.txt", "other", "targeted"),
    ],
)
def test_area_rules(path: str, area: str, policy: str) -> None:
    rule = classify(path)
    assert (rule.area, rule.policy) == (area, policy)


def test_docs_only_needs_nothing(index: InventoryIndex) -> None:
    facts = scout(example_change("push_docs_only"), index)
    assert facts.decision == "none"
    assert facts.risk == "none"
    assert set(facts.areas) == {"docs"}


def test_softmax_push_names_the_softmax_ops(index: InventoryIndex) -> None:
    facts = scout(example_change("push_softmax_kernel"), index)
    assert facts.decision == "targeted"
    assert set(facts.op_names) == {"softmax", "log_softmax", "_log_softmax"}
    assert facts.completeness == "full"
    evidence = {e for op in facts.ops for e in op.evidence}
    assert "aten/src/ATen/native/SoftMax.cpp: hunk context" in evidence


@pytest.mark.parametrize(
    ("paths", "reason"),
    [
        (("CMakeLists.txt",), "build"),
        (("c10/core/ScalarType.h", "docs/x.rst"), "core"),
        (("aten/src/ATen/core/dispatch/OperatorEntry.cpp",), "dispatcher"),
        (("third_party/fmt",), "third_party"),
        (("aten/src/ATen/native/Blas.cpp",), "cannot name the ops"),
    ],
)
def test_blind_changes(index: InventoryIndex, paths: tuple[str, ...], reason: str) -> None:
    facts = scout(diff_change(*paths), index)
    assert facts.decision == "blind"
    assert reason in facts.reasons[0]
    assert facts.risk == "high"


def _event(**kw: object) -> TriggerEvent:
    base: dict[str, object] = dict(
        kind="push",
        delivery_id="d",
        repo="pytorch/pytorch",
        head_sha="a" * 40,
        files=(ChangedFile("torch/nn/functional.py", "modified"),),
    )
    base.update(kw)
    return TriggerEvent(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("event", "decision", "reason"),
    [
        (_event(truncated=True), "blind", "truncated"),
        (_event(kind="pull_request", files=(), files_complete=False), "blind", "incomplete"),
        (_event(kind="nightly", files=()), "blind", "nightly"),
        (_event(labels=("ci-no-td",)), "blind", "ci-no-td"),
        (_event(kind="rerun", rerun="full", files=()), "blind", "re-run"),
        (_event(kind="rerun", rerun="failed", files=()), "rerun-failed", "re-run"),
        (_event(files=()), "none", "no file changed"),
    ],
)
def test_decisions_from_the_trigger(
    index: InventoryIndex, event: TriggerEvent, decision: str, reason: str
) -> None:
    facts = scout(ChangeSet.from_event(event), index)
    assert facts.decision == decision
    assert reason in facts.reasons[0]


def test_a_diff_completes_a_pull_request_without_files(index: InventoryIndex) -> None:
    pr = _event(kind="pull_request", files=(), files_complete=False)
    text = (
        "diff --git a/torch/nn/functional.py b/torch/nn/functional.py\n"
        "--- a/torch/nn/functional.py\n+++ b/torch/nn/functional.py\n"
        "@@ -1 +1 @@ def gelu(\n-a\n+b\n"
    )
    changes = ChangeSet.from_event(pr, text)
    assert changes.complete
    facts = scout(changes, index)
    assert facts.decision == "targeted"
    assert facts.op_names == ("nn.functional.gelu",)


def test_paths_without_patch_fall_back_to_file_names(index: InventoryIndex) -> None:
    event = _event(files=(ChangedFile("aten/src/ATen/native/cpu/SoftMaxKernel.cpp", "modified"),))
    facts = scout(ChangeSet.from_event(event), index)
    assert facts.decision == "targeted"
    assert facts.completeness == "paths-only"
    (op,) = facts.ops
    assert (op.name, op.weak) == ("softmax", True)
    assert facts.risk == "medium"


def test_upstream_test_function_names_a_template(index: InventoryIndex) -> None:
    body = (
        "diff --git a/test/test_ops.py b/test/test_ops.py\n--- a/test/test_ops.py\n"
        "+++ b/test/test_ops.py\n@@ -400,2 +400,2 @@ class TestCommon(TestCase):\n"
        "     def test_compare_cpu(self, device, dtype, op):\n-        a\n+        b\n"
    )
    facts = scout(diff_change(body=body), index)
    assert facts.templates == ("compare_cpu",)


@pytest.mark.parametrize(
    ("upstream", "template"),
    [
        ("test_python_ref_torch_fallback", "python_ref"),  # named apart from its template
        ("test_compare_cpu", "compare_cpu"),
    ],
)
def test_an_upstream_test_names_the_template_that_reimplements_it(
    index: InventoryIndex, upstream: str, template: str
) -> None:
    body = (
        "diff --git a/test/test_ops.py b/test/test_ops.py\n--- a/test/test_ops.py\n"
        "+++ b/test/test_ops.py\n@@ -400,2 +400,2 @@ class TestCommon(TestCase):\n"
        f"     def {upstream}(self, device, dtype, op):\n-        a\n+        b\n"
    )
    facts = scout(diff_change(body=body), index)
    assert facts.templates == (template,)


def test_a_new_native_function_is_named_not_blind(index: InventoryIndex) -> None:
    body = "\n".join(
        [
            "diff --git a/aten/src/ATen/native/native_functions.yaml "
            "b/aten/src/ATen/native/native_functions.yaml",
            "--- a/aten/src/ATen/native/native_functions.yaml",
            "+++ b/aten/src/ATen/native/native_functions.yaml",
            "@@ -10,2 +10,6 @@",
            " - func: abs(Tensor self) -> Tensor",
            "   variants: function, method",
            "+",
            "+- func: spyre_fused_rms(Tensor self, float eps) -> Tensor",
            "+  dispatch:",
            "+    CPU: spyre_fused_rms_cpu",
            "",
        ]
    )
    facts = scout(diff_change(body=body), index)
    assert facts.decision == "targeted"
    (path,) = facts.paths
    assert path.untested == ("spyre_fused_rms",) and not path.unresolved
    assert any("no variant tests: spyre_fused_rms" in r for r in facts.risk_reasons)


def test_comment_only_changes_need_nothing(index: InventoryIndex) -> None:
    body = "\n".join(
        [
            "diff --git a/c10/core/TensorImpl.h b/c10/core/TensorImpl.h",
            "--- a/c10/core/TensorImpl.h",
            "+++ b/c10/core/TensorImpl.h",
            "@@ -10,3 +10,4 @@ struct C10_API TensorImpl {",
            "   int x;",
            "-  // old words",
            "+  // new words",
            "+",
            "   int y;",
            "diff --git a/torch/nn/functional.py b/torch/nn/functional.py",
            "--- a/torch/nn/functional.py",
            "+++ b/torch/nn/functional.py",
            "@@ -1,2 +1,2 @@ def softmax(",
            "-    # typo",
            "+    # fixed",
            "     return x",
            "",
        ]
    )
    facts = scout(diff_change(body=body), index)
    assert facts.decision == "none"
    assert facts.reasons == ("only comments changed: no test result can change",)
    assert all(p.cosmetic for p in facts.paths)


def test_a_preprocessor_line_is_not_a_comment(index: InventoryIndex) -> None:
    body = "\n".join(
        [
            "diff --git a/c10/core/TensorImpl.h b/c10/core/TensorImpl.h",
            "--- a/c10/core/TensorImpl.h",
            "+++ b/c10/core/TensorImpl.h",
            "@@ -1,1 +1,1 @@",
            "-#include <a.h>",
            "+#include <b.h>",
            "",
        ]
    )
    assert scout(diff_change(body=body), index).decision == "blind"
