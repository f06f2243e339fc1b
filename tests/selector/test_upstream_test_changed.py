"""A change to a reused upstream test file selects the file-suite variants of the tests it
touches (their own code or a helper they use), from `Variant.sources`."""

from __future__ import annotations

import difflib

from selector.changeset import ChangeSet
from selector.heuristics import REGISTRY
from selector.heuristics.base import RetrieveContext
from selector.history import History
from selector.index import InventoryIndex
from selector.scout import scout
from suites.model import Inventory, Variant
from tests.testing.paths import REPO_ROOT

PATH = "test/test_tiny_plain.py"
OLD = (REPO_ROOT / "tests" / "suites" / "upstream_like" / PATH).read_text()


def _variant(test: str, *uses: str) -> Variant:
    return Variant(
        id=f"multi::test_tiny_plain::TestPlain::{test}::none",
        suite="multi",
        template="test_tiny_plain",
        subject=f"TestPlain::{test}",
        dtype="none",
        sources=(f"{PATH}:TestPlain.{test}", *(f"{PATH}:{u}" for u in uses)),
    )


INVENTORY = Inventory(
    "2.13.0",
    "x",
    (
        _variant("test_ones_sum"),
        _variant("test_uses_helper", "_double"),
        _variant("test_other_helper_user", "_double"),
        Variant(
            id="ops::compare_cpu::add::float32",
            suite="ops",
            template="compare_cpu",
            subject="add",
            dtype="float32",
        ),
    ),
)


def _selected(new: str) -> dict[str, str]:
    diff = "".join(
        difflib.unified_diff(
            OLD.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/{PATH}",
            f"b/{PATH}",
        )
    )
    changes = ChangeSet.from_diff(diff).with_sources({PATH: OLD})
    index = InventoryIndex.build(INVENTORY)
    facts = scout(changes, index)
    ctx = RetrieveContext(facts=facts, index=index, history=History())
    scores = REGISTRY["upstream_test"].score(ctx)
    return {vid: score.reason for vid, score in scores.items()}


def test_an_edited_test_selects_exactly_its_variants() -> None:
    got = _selected(OLD.replace("sum().item(), 3.0)", "sum().item(), 3)"))
    assert set(got) == {"multi::test_tiny_plain::TestPlain::test_ones_sum::none"}
    assert "TestPlain.test_ones_sum changed" in got.popitem()[1]


def test_an_edited_helper_selects_the_tests_that_use_it() -> None:
    got = _selected(OLD.replace("return t * 2", "return t + t"))
    assert set(got) == {
        "multi::test_tiny_plain::TestPlain::test_uses_helper::none",
        "multi::test_tiny_plain::TestPlain::test_other_helper_user::none",
    }


def test_a_module_level_edit_selects_every_variant_of_the_file() -> None:
    got = _selected(OLD.replace("import torch\n", "import torch\nimport os\n", 1))
    assert len(got) == 3 and all(v.startswith("multi::") for v in got)
