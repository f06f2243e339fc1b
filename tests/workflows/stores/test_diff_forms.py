"""Every shipped mutation in every diff form gets the same selection.

The forms: git with function context (as shipped), plain `diff -u` (no function context),
GitHub compare patches, and a diff made by difflib from the installed torch's file (another
tool, for python mutations). The old sources come from the installed torch, as
`workflows.run.planning` adds them; the Inventory is the bundled one (fixture).
"""

from __future__ import annotations

import difflib
from importlib import metadata
from pathlib import Path

import pytest

import selector
from benchmarks.selection.mutations import load_mutations
from benchmarks.selection.mutations.model import torch_root
from benchmarks.selection.results import DEFAULT_MUTATIONS
from selector.diff import as_form, parse_unified_diff
from selector.patches import apply_patch
from suites.model import Inventory
from workflows.stores.sources import with_old_sources

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "inventory-2.13.0.json.gz"


@pytest.fixture(scope="module")
def index() -> tuple[Inventory, selector.InventoryIndex]:
    inventory = Inventory.load(FIXTURE)
    return inventory, selector.InventoryIndex.build(inventory)


def _difflib_form(diff: str) -> str:
    root = torch_root()
    parts = []
    for f in parse_unified_diff(diff).files:
        old = (root / f.path).read_text(encoding="utf-8")
        new = apply_patch(old, f)  # PatchError names the file and hunk that do not apply
        parts.append(
            "".join(
                difflib.unified_diff(
                    old.splitlines(True), new.splitlines(True), f"a/{f.path}", f"b/{f.path}"
                )
            )
        )
    return "".join(parts)


@pytest.mark.long
def test_every_shipped_mutation_selects_the_same_in_every_form(
    index: tuple[Inventory, selector.InventoryIndex],
) -> None:
    inventory, idx = index
    installed = metadata.version("torch").split("+")[0]
    if installed != inventory.torch_version:
        # The mutations' hunks and the fixture Inventory are that torch's: over another
        # torch's files they locate other definitions (seen on 2.14.1), which says nothing of
        # the diff forms. Written again for the installed torch, they hold there.
        pytest.skip(
            f"the shipped mutations and the fixture Inventory are torch "
            f"{inventory.torch_version}'s, the installed torch is {installed}: write them again "
            "with benchmarks/selection/make_mutations.py and `spyre-ci inventory`"
        )
    config = selector.PlanConfig(holdout_rate=0.0)

    def selection(text: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        change = selector.ChangeSet.from_diff(text)
        change = with_old_sources(change, torch_version=inventory.torch_version)
        p = selector.plan(change, idx, config=config)
        return p.decision, p.selected_ids, p.facts.functions

    mutations = load_mutations(DEFAULT_MUTATIONS)
    assert len(mutations) >= 50
    differ: list[str] = []
    for m in mutations:
        forms = {f: as_form(m.diff, f) for f in ("git", "plain", "github")}
        if m.kind == "python":
            forms["difflib"] = _difflib_form(m.diff)
        got = {form: selection(text) for form, text in forms.items()}
        if m.kind == "python":
            # The installed torch holds every python file: its structure decides, not hunks.
            if len(set(got.values())) != 1:
                differ.append(f"{m.id}: { ({k: (v[0], len(v[1])) for k, v in got.items()}) }")
        else:
            # No C++ source on this machine (production reads it at the base sha through
            # GitHub's contents API): without function context a kernel file whose ops cannot
            # be named runs blind, never narrower than the git form.
            for form in ("plain", "github"):
                decision, ids, _ = got[form]
                assert decision == "full" or set(got["git"][1]) <= set(ids), (m.id, form)
    assert not differ, "\n".join(differ)


# Plain `diff -u` edits of function bodies in files that name no op, or that every op
# depends on: the trace, joined by the changed definitions, targets them.
THROUGH_THE_TRACE = [
    ("torch/functional.py", "def split(", "    if has_torch_function_unary(tensor):"),
    (
        "torch/_tensor.py",
        "    def split(self, split_size, dim=0):",
        "        if isinstance(split_size, Tensor):",
    ),
    ("torch/_refs/__init__.py", "def clamp_min(", "    return torch.clamp(self, min=min)"),
    ("torch/_decomp/decompositions.py", "def slice_forward(", "    ndim = self.dim()"),
    (
        "torch/testing/_internal/common_methods_invocations.py",
        "def sample_inputs_hardswish(",
        "    N = 5",
    ),
]


@pytest.fixture(scope="module")
def bundled(bundled_inventory: Inventory) -> tuple[Inventory, selector.ImpactMap]:
    from workflows.tracing.trace_store import joined_trace

    inventory = bundled_inventory
    joined = joined_trace(inventory, None)
    assert joined is not None, "no shipped trace for the installed torch"
    return inventory, joined[0]


@pytest.mark.parametrize(("path", "function", "line"), THROUGH_THE_TRACE)
def test_edits_the_names_cannot_reach_are_targeted_through_the_trace(
    bundled: tuple[Inventory, selector.ImpactMap], path: str, function: str, line: str
) -> None:
    inventory, impact = bundled
    old = (torch_root() / path).read_text(encoding="utf-8")
    start = old.index(function)
    at = old.index(line, start)
    new = old[:at] + line + "  # edited\n    pass\n" + old[at + len(line) + 1 :]
    text = "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    )
    change = with_old_sources(
        selector.ChangeSet.from_diff(text), torch_version=inventory.torch_version
    )
    p = selector.plan(
        change, inventory, config=selector.PlanConfig(holdout_rate=0.0), impact=impact
    )
    assert p.decision == "targeted", (p.decision, p.fallback)
    executed = set().union(*(impact.executing(f) for f in p.facts.functions))
    assert executed and executed <= set(p.selected_ids)
    assert p.totals.ratio_count < 0.5, p.totals
