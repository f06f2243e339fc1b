"""Line-level change facts: changed lines placed in the definitions of the old source."""

from __future__ import annotations

import difflib

import pytest

from selector import ChangeSet, PlanConfig, plan
from selector.definitions import locate
from selector.diff import as_form, compare_patch_text, parse_unified_diff
from selector.impact import ImpactMap
from selector.patches import apply_patch
from suites.model import Inventory

PY = """import functools


def glu(input, dim=-1):
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars")
    return torch._C._nn.glu(input, dim)


@functools.lru_cache
def _table():
    return {"a": 1}


class GLU(Module):
    __constants__ = ["dim"]

    def forward(self, input):
        def inner(x):
            return x + 1
        return F.glu(input, self.dim)


op_db = [
    OpInfo(
        "softmax",
        dtypes=floating_types(),
        decorators=(DecorateInfo(unittest.expectedFailure, "TestX"),),
        sample_inputs_func=lambda op, device: [],
    ),
    ModuleInfo(torch.nn.ELU, module_inputs_func=module_inputs_elu),
]
LIMIT = 3
"""


def _diff(old: str, new: str, path: str = "torch/nn/functional.py") -> ChangeSet:
    text = "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    )
    return ChangeSet.from_diff(text).with_sources({path: old})


def _where(old: str, new: str, path: str = "torch/nn/functional.py") -> set[tuple[str, str]]:
    change = _diff(old, new, path)
    patch = change.patches[path]
    found = locate(patch, old)
    assert found is not None
    # innermost definition of each changed line
    first: dict[tuple[str, int], tuple[str, str]] = {}
    for item in found:
        first.setdefault((item.side, item.line), (item.kind, item.name))
    return set(first.values())


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ('"glu does not support scalars"', '"no scalars"', {("function", "glu")}),
        ("dim=-1):", "dim=1):", {("signature", "glu")}),
        ("return x + 1", "return x + 2", {("function", "GLU.forward.<locals>.inner")}),
        ("return F.glu(input, self.dim)", "return F.glu(input, 0)", {("function", "GLU.forward")}),
        ('__constants__ = ["dim"]', "__constants__ = []", {("class", "GLU")}),
        ("dtypes=floating_types(),", "dtypes=(torch.float32,),", {("entry", "softmax")}),
        ("TestX", "TestY", {("entry", "softmax")}),
        ("lambda op, device: []", "lambda op, device: [1]", {("function", "<lambda>")}),
        ("module_inputs_func=module_inputs_elu", "module_inputs_func=None", {("entry", "nn.ELU")}),
        ("LIMIT = 3", "LIMIT = 4", {("module", "")}),
    ],
)
def test_python_lines_land_in_their_definitions(
    before: str, after: str, expected: set[tuple[str, str]]
) -> None:
    assert before in PY
    assert _where(PY, PY.replace(before, after)) == expected


def test_a_memoized_function_is_marked() -> None:
    change = _diff(PY, PY.replace('{"a": 1}', '{"a": 2}'))
    found = locate(change.patches["torch/nn/functional.py"], PY)
    assert found and found[0].name == "_table" and found[0].cached


def test_an_added_function_is_placed_on_the_new_side() -> None:
    new = PY.replace("class GLU", "def helper():\n    return 2\n\n\nclass GLU")
    assert ("function", "helper") in _where(PY, new)


def test_a_patch_made_against_a_moved_file_is_placed_by_offset() -> None:
    change = _diff(PY, PY.replace('"glu does not support scalars"', '"x"'))
    shifted = "# a new header line\n# and another\n" + PY
    patch = change.patches["torch/nn/functional.py"]
    new = apply_patch(shifted, patch)
    assert '"x"' in new and new.startswith("# a new header")
    found = locate(patch, shifted)
    assert found is not None and found[0].name == "glu" and found[0].line == 8


def test_a_patch_that_does_not_apply_is_not_located() -> None:
    change = _diff(PY, PY.replace("LIMIT = 3", "LIMIT = 4"))
    assert locate(change.patches["torch/nn/functional.py"], "something else\n") is None


CPP = """// softmax kernels { not a brace }
#include <ATen/ATen.h>
namespace at::native {

TORCH_IMPL_FUNC(softmax_cpu_out)
(const Tensor& input, int64_t dim, bool half_to_float, const Tensor& output) {
  auto s = "{";
  softmax_lastdim_kernel(kCPU, output, input);
}

static void helper_kernel(TensorIterator& iter) {
  cpu_kernel(iter, [](float a) { return a * 2; });
}

REGISTER_DISPATCH(softmax_lastdim_kernel, &softmax_lastdim_kernel_impl)
}  // namespace at::native
"""


def test_cpp_lines_land_in_their_functions() -> None:
    path = "aten/src/ATen/native/SoftMax.cpp"
    assert _where(CPP, CPP.replace("kCPU, output", "kCPU, output2"), path) == {
        ("cpp-function", "softmax_cpu_out")
    }
    assert _where(CPP, CPP.replace("a * 2", "a * 3"), path) == {("cpp-function", "helper_kernel")}
    registered = CPP.replace("&softmax_lastdim_kernel_impl", "&other_impl")
    assert ("cpp-function", "softmax_lastdim_kernel") in _where(CPP, registered, path)


YAML = """- func: softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor
  variants: function, method

- func: _softmax(Tensor self, int dim, bool half_to_float) -> Tensor
  structured_delegate: _softmax.out
  dispatch:
    CPU: softmax_cpu
"""


def test_yaml_lines_land_in_their_entry() -> None:
    path = "aten/src/ATen/native/native_functions.yaml"
    assert _where(YAML, YAML.replace("CPU: softmax_cpu", "CPU: softmax_cpu2"), path) == {
        ("yaml-entry", "_softmax")
    }


def test_every_form_of_a_diff_gives_the_same_facts(inventory: Inventory) -> None:
    new = PY.replace("return F.glu(input, self.dim)", "return F.glu(input, 0)")
    git = _diff(PY, new)
    text = "".join(
        difflib.unified_diff(
            PY.splitlines(True),
            new.splitlines(True),
            "a/torch/nn/modules/activation.py",
            "b/torch/nn/modules/activation.py",
        )
    )
    forms = {form: as_form(text, form) for form in ("git", "plain", "github")}
    assert "diff --git" not in forms["plain"] and forms["github"].startswith("diff --git")
    facts = []
    for body in forms.values():
        change = ChangeSet.from_diff(body).with_sources({"torch/nn/modules/activation.py": PY})
        p = plan(change, inventory)
        facts.append((p.facts.functions, p.facts.op_names, p.selected_ids))
    assert facts[0] == facts[1] == facts[2]
    assert facts[0][0] == ("torch/nn/modules/activation.py:GLU.forward",)
    assert git.patches  # the git form parses too


def test_compare_patches_become_a_diff() -> None:
    text = compare_patch_text(
        [
            {"filename": "torch/a.py", "status": "modified", "patch": "@@ -1 +1 @@\n-x\n+y"},
            {"filename": "torch/b.bin", "status": "modified"},
            {"filename": "torch/c.py", "status": "renamed", "previous_filename": "torch/d.py"},
        ]
    )
    files = parse_unified_diff(text).files
    assert [(f.path, f.status, f.binary) for f in files] == [
        ("torch/a.py", "modified", False),
        ("torch/b.bin", "modified", True),
        ("torch/c.py", "renamed", False),
    ]
    assert files[0].hunks[0].added == ("y",)


def test_a_trace_joins_by_qualname_and_class_body(inventory: Inventory) -> None:
    # Op variants: no watch glob of theirs matches a torch/nn/modules path.
    ids = sorted(v for v in inventory.by_id() if v.startswith("ops::"))
    a, b, c = ids[0], ids[1], ids[2]
    path = "torch/nn/modules/activation.py"
    impact = ImpactMap(
        functions={
            a: frozenset({f"{path}:GLU.forward"}),
            b: frozenset({f"{path}:GLU.__init__"}),
            c: frozenset({"torch/functional.py:split"}),
        },
        aten_ops={a: frozenset(), b: frozenset(), c: frozenset()},
    )
    method = ChangeSet.from_diff(
        as_form(
            "".join(
                difflib.unified_diff(
                    PY.splitlines(True),
                    PY.replace("F.glu(input, self.dim)", "F.glu(input, 0)").splitlines(True),
                    f"a/{path}",
                    f"b/{path}",
                )
            ),
            "plain",
        )
    ).with_sources({path: PY})
    p = plan(method, inventory, impact=impact)
    assert a in p.selected_ids and b not in p.selected_ids and c not in p.selected_ids
    body = ChangeSet.from_diff(
        "".join(
            difflib.unified_diff(
                PY.splitlines(True),
                PY.replace('__constants__ = ["dim"]', "__constants__ = []").splitlines(True),
                f"a/{path}",
                f"b/{path}",
            )
        )
    ).with_sources({path: PY})
    p = plan(body, inventory, impact=impact)
    assert {a, b} <= set(p.selected_ids) and c not in p.selected_ids


def test_a_path_nothing_narrows_runs_blind_and_says_why(inventory: Inventory) -> None:
    path = "torch/functional.py"
    old = "def split(tensor, size):\n    return tensor.split(size)\n"
    change = _diff(old, old.replace("split(size)", "split(size + 1)"), path)
    p = plan(change, inventory)
    assert p.decision == "full"
    assert "cannot narrow" in (p.fallback or "") and path in (p.fallback or "")
    # With a trace, the same change is joined, not blind: nothing executes it here.
    traced = plan(change, inventory, impact=ImpactMap(functions={}, aten_ops={}))
    assert traced.decision == "targeted"


def test_a_function_that_runs_at_import_reaches_every_variant(inventory: Inventory) -> None:
    path = "torch/testing/_internal/opinfo/core.py"
    old = "class OpInfo:\n    def __post_init__(self):\n        self.x = 1\n"
    change = _diff(old, old.replace("self.x = 1", "self.x = 2"), path)
    impact = ImpactMap(
        functions={},
        aten_ops={},
        session_functions=frozenset({f"{path}:OpInfo.__post_init__"}),
    )
    p = plan(change, inventory, impact=impact)
    assert p.decision == "targeted" and set(p.selected_ids) == set(inventory.by_id()) - {
        v.id for v in inventory.variants if v.expectation.value == "skip"
    }
    assert "runs at import or collection" in p.selected[0].reasons[-1].reason


def test_a_hub_is_said_and_scored_below_direct_matches(inventory: Inventory) -> None:
    ids = sorted(v.id for v in inventory.variants if v.expectation.value != "skip")
    impact = ImpactMap(
        functions={v: frozenset() for v in ids},
        aten_ops={v: frozenset({"aten::mul.Tensor"}) for v in ids},
    )
    body = (
        "--- a/aten/src/ATen/native/BinaryOps.cpp\n+++ b/aten/src/ATen/native/BinaryOps.cpp\n"
        "@@ -1,3 +1,3 @@\n TORCH_IMPL_FUNC(mul_out) (const Tensor& self) {\n-  a;\n+  b;\n }\n"
    )
    p = plan(ChangeSet.from_diff(body), inventory, impact=impact)
    hub = [r for s in p.selected for r in s.reasons if "(a hub:" in r.reason]
    assert hub and all(r.score < 0.9 for r in hub)
    # Under a budget the direct matches of the op come first.
    small = plan(
        ChangeSet.from_diff(body), inventory, impact=impact, config=PlanConfig(budget_count=3)
    )
    assert all("mul" in vid.split("::")[2] for vid in small.selected_ids), small.selected_ids


@pytest.mark.parametrize(
    ("head", "op"),
    [
        ("void div_true_kernel(TensorIteratorBase& iter) {", "div"),
        ("Tensor& where_self_out(const Tensor& c, const Tensor& s, Tensor& out) {", "where"),
        ("void GeluKernelImpl(TensorIteratorBase& it, GeluType approximate) {", "gelu"),
    ],
)
def test_a_kernel_function_names_its_op_by_its_leading_words(
    inventory: Inventory, head: str, op: str
) -> None:
    path = "aten/src/ATen/native/cpu/SomeKernel.cpp"
    source = f"namespace at::native {{\n{head}\n  int a = 1;\n  int b = 2;\n}}\n}}\n"
    body = source.replace("int a = 1;", "int a = 3;")
    change = _diff(source, body, path)
    p = plan(change, inventory)
    assert p.decision == "targeted", p.fallback
    assert any(name == op or name.endswith("." + op) for name in p.facts.op_names), p.facts.op_names


DOCUMENTED = '''"""A module."""


def softmax(input, dim):
    r"""Applies softmax.

    # not a comment: part of the docstring
    """
    message = """first line
    # inside a string: text, not a comment
    """
    # a comment
    return input.softmax(dim)
'''


@pytest.mark.parametrize(
    ("before", "after", "cosmetic"),
    [
        ("Applies softmax.", "Applies the softmax.", True),
        ("# not a comment: part of the docstring", "# part of it", True),
        ("# a comment", "# another comment", True),
        ('"""A module."""', '"""The module."""', True),
        ("# inside a string: text, not a comment", "# other text", False),
        ("return input.softmax(dim)", "return input.softmax(dim + 0)", False),
    ],
)
def test_docstrings_and_comments_change_nothing_but_strings_do(
    inventory: Inventory, before: str, after: str, cosmetic: bool
) -> None:
    path = "torch/nn/functional.py"
    change = _diff(DOCUMENTED, DOCUMENTED.replace(before, after), path)
    p = plan(change, inventory)
    fact = p.facts.paths[0]
    assert fact.cosmetic is cosmetic, fact
    if cosmetic:
        assert p.decision == "none"
    else:
        assert p.facts.functions == (f"{path}:softmax",)


def test_a_file_in_two_sections_is_selected_on_the_change_they_make_together(
    inventory: Inventory,
) -> None:
    path = "torch/nn/functional.py"

    def section(old: str, new: str) -> str:
        return "".join(
            difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"
            )
        )

    # The second section edits a line only the first one wrote, and a harmless last section
    # (a comment) follows: only their order makes the text, and glu's edit is in it.
    first = PY.replace('"glu does not support scalars"', '"no scalars"')
    second = first.replace('"no scalars"', '"no scalars at all"')
    last = second.replace("LIMIT = 3", "LIMIT = 3  # the number of tries")
    sections = section(PY, first) + section(first, second) + section(second, last)
    (patch,) = parse_unified_diff(sections).files
    assert len(patch.in_order()) == 3
    assert apply_patch(PY, patch) == last
    assert locate(patch, PY) == locate(parse_unified_diff(section(PY, last)).files[0], PY)
    seen = []
    for text in (sections, section(PY, last)):
        p = plan(ChangeSet.from_diff(text).with_sources({path: PY}), inventory)
        seen.append((p.facts.functions, p.facts.op_names, p.selected_ids))
    assert seen[0] == seen[1]
    assert f"{path}:glu" in seen[0][0]


class _Store:
    """A store of definitions as the workflows give one (`definitions.Store`), in memory."""

    def __init__(self) -> None:
        self.kept: dict[bytes, object] = {}
        self.loads = 0

    def load(self, key: bytes) -> object | None:
        self.loads += 1
        return self.kept.get(key)

    def save(self, key: bytes, value: object) -> None:
        self.kept[key] = value


# Large enough to be kept (small texts parse faster than a kept form loads).
BIG = PY + "".join(f"\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(1500))


def _located(new: str, store: _Store | None) -> list[object]:
    from selector import definitions

    definitions.keep_with(store)  # clears what this process read: as a new process
    try:
        patch = _diff(BIG, new).patches["torch/nn/functional.py"]
        return list(definitions.locate(patch, BIG) or [])
    finally:
        definitions.keep_with(None)


def test_kept_definitions_place_lines_as_parsed_ones_and_parse_no_text_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from selector import definitions

    new = BIG.replace("dim() == 0", "dim() < 2").replace("return x + 7\n", "return x - 7\n")
    parsed = _located(new, None)
    store = _Store()
    first = _located(new, store)
    assert len(store.kept) == 2  # the old side and the new side, one each
    for value in store.kept.values():
        assert isinstance(value, list) and value
    parses: list[str] = []
    real = definitions._python_spans
    monkeypatch.setattr(
        definitions, "_python_spans", lambda text: parses.append(text) or real(text)
    )
    second = _located(new, store)
    assert first == second == parsed
    assert parses == []  # both sides came from the store
    assert {(loc.kind, loc.name) for loc in parsed} >= {
        ("function", "glu"),
        ("function", "helper_7"),
    }


def test_a_kept_value_that_is_not_definitions_is_parsed_again_and_replaced() -> None:
    new = BIG.replace("dim() == 0", "dim() < 2")
    store = _Store()
    good = _located(new, store)
    kept = dict(store.kept)
    for key in store.kept:
        store.kept[key] = ["not a span"]
    assert _located(new, store) == good
    assert store.kept == kept


def test_a_small_text_is_not_kept() -> None:
    store = _Store()
    change = _diff(PY, PY.replace("dim() == 0", "dim() < 2"))
    from selector import definitions

    definitions.keep_with(store)
    try:
        assert definitions.locate(change.patches["torch/nn/functional.py"], PY)
    finally:
        definitions.keep_with(None)
    assert store.loads == 0 and not store.kept
