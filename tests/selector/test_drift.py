"""A Python file of a blind area (torch/_tensor.py) changed inside function bodies selects the
variants the trace names for those functions, whether the patch applies to the old source at
hand, was made against another version of it, or comes with no old source at all; a full run
is left for what cannot be placed in functions, what runs at import, and hubs."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from selector import ChangeSet, History, ImpactMap, InventoryIndex, plan
from selector.diff import parse_unified_diff
from selector.drift import drifted_locate, hunk_functions
from selector.scout import HUB_FULL_SHARE
from suites.model import Inventory
from workflows.cli.main import main

PATH = "torch/_tensor.py"
TENSOR = """import functools

import torch


def _wrap(f):
    @functools.wraps(f)
    def wrapped(self, *args):
        return f(self, *args)

    return wrapped


class Tensor(torch._C.TensorBase):
    def __deepcopy__(self, memo):
        return self.clone()

    @_wrap
    def __rpow__(self, other):
        return torch.pow(other, self)

    def stft(
        self,
        n_fft,
    ):
        a = n_fft
        b = a + 1
        c = b + 1
        d = c + 1
        return torch.stft(self, d)

    def __rdiv__(self, other):
        return self.reciprocal() * other

    __rtruediv__ = __rdiv__
"""
RPOW = (
    "        return torch.pow(other, self)\n",
    "        return torch.pow(other, self, out=None)\n",
)
STFT_DEEP = ("        return torch.stft(self, d)\n", "        return torch.stft(self, d + 0)\n")
CLASS_LINE = ("    __rtruediv__ = __rdiv__\n", "    __rtruediv__ = __rdiv__  # same\n    x = 1\n")


def _patch(old: str, was: str, now: str) -> str:
    assert old.count(was) == 1, was
    new = old.replace(was, now)
    lines = difflib.unified_diff(
        old.splitlines(True), new.splitlines(True), f"a/{PATH}", f"b/{PATH}"
    )
    return "".join(lines)


def _drifted(text: str, line: str) -> str:
    """`text` as a newer upstream has it: `line` edited by an earlier commit."""
    assert text.count(line) == 1, line
    return text.replace(line, line.rstrip("\n") + "  # upstream\n")


def _change(edit: tuple[str, str], form: str) -> ChangeSet:
    """The edit as the Scout sees it: `source` (the patch applies to the old source at hand),
    `drift` (made against a newer file: a context line differs), `hunks` (no old source)."""
    if form == "drift":
        upstream = _drifted(TENSOR, "    @_wrap\n")
        upstream = _drifted(upstream, "    def __rdiv__(self, other):\n")
        upstream = _drifted(upstream, "        b = a + 1\n")
        return ChangeSet.from_diff(_patch(upstream, *edit)).with_sources({PATH: TENSOR})
    change = ChangeSet.from_diff(_patch(TENSOR, *edit))
    return change.with_sources({PATH: TENSOR}) if form == "source" else change


@pytest.fixture(scope="module")
def runnable(index: InventoryIndex) -> list[str]:
    return sorted(index.runnable_set)


def _trace(runnable: list[str], rpow: int, *, session: frozenset[str] = frozenset()) -> ImpactMap:
    """The first `rpow` runnable variants ran Tensor.__rpow__, two more Tensor.stft."""
    functions = {v: frozenset({f"{PATH}:Tensor.__rpow__"}) for v in runnable[:rpow]}
    functions.update({v: frozenset({f"{PATH}:Tensor.stft"}) for v in runnable[-2:]})
    return ImpactMap(functions=functions, aten_ops={}, session_functions=session)


@pytest.mark.parametrize("form", ["source", "drift", "hunks"])
def test_a_method_edit_selects_what_the_trace_names_in_every_form(
    form: str, index: InventoryIndex, runnable: list[str]
) -> None:
    p = plan(_change(RPOW, form), index, impact=_trace(runnable, 7))
    assert p.decision == "targeted", p.fallback
    traced = [s for s in p.selected if any("executes changed" in r.reason for r in s.reasons)]
    assert {s.id for s in traced} == set(runnable[:7])
    fact = p.facts.paths[0]
    assert fact.policy == "targeted" and fact.area == "core"
    assert fact.located == {"source": "source", "drift": "drift", "hunks": "hunks"}[form]
    assert "the trace joins them" in fact.broad
    assert len(p.selected) < len(runnable) / 2
    loose = any("blind area narrowed" in r for r in p.facts.risk_reasons)
    assert loose == (form != "source") and (p.facts.risk == "medium" or not loose)


def test_a_drifted_patch_says_how_it_was_placed(index: InventoryIndex, runnable: list[str]) -> None:
    p = plan(_change(STFT_DEEP, "drift"), index, impact=_trace(runnable, 7))
    assert p.decision == "targeted"
    assert p.facts.functions == (f"{PATH}:Tensor.stft",)
    assert "made against another version" in p.facts.paths[0].broad
    assert set(runnable[-2:]) <= set(p.selected_ids)


def test_what_cannot_be_placed_in_a_function_runs_in_full_and_says_why(
    index: InventoryIndex, runnable: list[str]
) -> None:
    # A deep body line with no old source: no def in the hunk holds it.
    p = plan(_change(STFT_DEEP, "hunks"), index, impact=_trace(runnable, 7))
    assert p.decision == "full"
    assert "not placed in functions: no old source at hand" in (p.fallback or "")
    assert "no def in the hunk holds the removed line" in (p.fallback or "")
    # A class-body line runs at import, whatever places it.
    for form in ("source", "hunks"):
        p = plan(_change(CLASS_LINE, form), index, impact=_trace(runnable, 7))
        assert p.decision == "full" and PATH in (p.fallback or ""), form
    assert "module or class level" in (
        plan(_change(CLASS_LINE, "source"), index, impact=_trace(runnable, 7)).fallback or ""
    )


def test_a_hub_or_a_function_run_at_import_is_not_narrowed(
    index: InventoryIndex, runnable: list[str]
) -> None:
    most = int(HUB_FULL_SHARE * len(runnable)) + 1
    p = plan(_change(RPOW, "source"), index, impact=_trace(runnable, most))
    assert p.decision == "full" and "(a hub: over 90%" in (p.fallback or "")
    fewer = int(0.8 * len(runnable))
    assert plan(_change(RPOW, "source"), index, impact=_trace(runnable, fewer)).decision == (
        "targeted"
    )
    at_import = _trace(runnable, 7, session=frozenset({f"{PATH}:_wrap"}))
    wrap = ("    return wrapped\n", "    return functools.update_wrapper(wrapped, f)\n")
    p = plan(_change(wrap, "source"), index, impact=at_import)
    assert p.decision == "full" and "runs at import (the trace's session)" in (p.fallback or "")


def test_without_a_trace_the_file_stays_blind(index: InventoryIndex) -> None:
    assert plan(_change(RPOW, "source"), index).decision == "full"


@pytest.mark.parametrize(
    ("was", "now", "names"),
    [
        (*RPOW, ("__rpow__",)),  # the hunk does not reach the module: the bare name
        ("    @_wrap\n", "    @_wrap  # x\n    @staticmethod\n", ("__rpow__",)),  # a decorator
        ("        n_fft,\n", "        n_fft=1,\n", ("stft",)),  # a multi-line signature
        ("    ):\n", "    ) -> None:\n", ("stft",)),  # the end of a multi-line def head
        (
            "        return f(self, *args)\n",
            "        return f(self)\n",
            ("_wrap.<locals>.wrapped",),
        ),
        ("import torch\n", "import torch  # x\nimport os\n", ()),  # module level
        (*STFT_DEEP, ()),  # its def is above the hunk
    ],
)
def test_hunks_alone_name_the_functions_holding_their_lines(
    was: str, now: str, names: tuple[str, ...]
) -> None:
    (patch,) = parse_unified_diff(_patch(TENSOR, was, now)).files
    found, why = hunk_functions(patch)
    assert found == names
    assert bool(why) == (not names)


def test_a_drifted_hunk_is_placed_only_where_its_removed_lines_match_once() -> None:
    upstream = _drifted(TENSOR, "    @_wrap\n")
    (patch,) = parse_unified_diff(_patch(upstream, *RPOW)).files
    placed = drifted_locate(patch, TENSOR)
    assert placed is not None
    located, differed = placed
    assert differed == 1 and {i.name for i in located if i.kind == "function"} == {
        "Tensor.__rpow__"
    }
    # A removed line the old source does not have: nowhere.
    assert drifted_locate(patch, TENSOR.replace("torch.pow(other, self)", "other ** self")) is None
    # Two places that fit as well: neither.
    twice = TENSOR + "\n\nclass Other:\n" + TENSOR.split("class Tensor(torch._C.TensorBase):\n")[1]
    assert drifted_locate(patch, twice) is None


def test_a_bare_name_joins_any_method_of_that_name_in_its_file() -> None:
    impact = ImpactMap(
        functions={
            "a": frozenset({f"{PATH}:Tensor.__rpow__"}),
            "b": frozenset({f"{PATH}:Tensor.__rpow__.<locals>.inner"}),
            "c": frozenset({f"{PATH}:__rpow__"}),
            "d": frozenset({"torch/other.py:Tensor.__rpow__"}),
        },
        aten_ops={},
        session_functions=frozenset({f"{PATH}:Tensor.stft"}),
    )
    assert impact.executing(f"{PATH}:Tensor.__rpow__") == {"a", "b"}
    # a bare name the trace saw as such is that function only; else any method of the name
    assert impact.executing(f"{PATH}:__rpow__") == {"c"}
    assert impact.executing("torch/other.py:__rpow__") == {"d"}
    assert impact.in_session(f"{PATH}:stft") and impact.in_session(f"{PATH}:Tensor.*")
    assert not impact.in_session(f"{PATH}:__rpow__")


def test_select_diff_narrows_a_tensor_method_edit_through_a_trace(
    tmp_path: Path, inventory: Inventory, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory_file = tmp_path / "inventory.json.gz"
    inventory.save(inventory_file)
    ids = sorted(v.id for v in inventory.variants if v.expectation.value != "skip")[:3]
    trace = {
        "format": 1,
        "torch_version": inventory.torch_version,
        "variants": {v: {"functions": [f"{PATH}:Tensor.__rpow__"], "aten_ops": []} for v in ids},
    }
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    (tmp_path / "edit.patch").write_text(_patch(TENSOR, *RPOW))
    (tmp_path / "h.json").write_text(json.dumps(History().to_json()))
    argv = ["select", "--diff", str(tmp_path / "edit.patch"), "--inventory", str(inventory_file)]
    argv += ["--history", str(tmp_path / "h.json")]
    traced = ["--impact-map", str(tmp_path / "trace.json")]
    assert main([*argv, *traced, "--plan-out", str(tmp_path / "plan.json")]) == 0
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["decision"] == "targeted" and data["fallback"] is None
    assert set(ids) <= {s["id"] for s in data["selected"]}
    assert "the trace joins them" in " ".join(data["change_facts"]["reasons"])
    # The same edit with no trace to join: a full run, said why.
    assert main([*argv, "--no-trace", "--plan-out", str(tmp_path / "blind.json")]) == 0
    capsys.readouterr()
    blind = json.loads((tmp_path / "blind.json").read_text())
    assert blind["decision"] == "full" and PATH in blind["fallback"]
