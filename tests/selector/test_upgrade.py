"""The upgrade diff and selection: on small hand-made Inventories, and on the two committed
Inventories the tool built for torch 2.13.0 and 2.14.1."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from selector import SelectorError
from selector.upgrade import (
    Moved,
    api_ops,
    classify,
    diff_api,
    diff_inventories,
    expansion,
    reason_line,
    replay,
    select_upgrade,
    validation,
)
from suites.model import Expectation, Inventory, Outcome, Status, Variant, variant_id
from tests.testing.paths import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures"


def v(
    subject: str, template: str = "compare_cpu", dtype: str = "float32", fp: str = "f0", **kw: Any
) -> Variant:
    return Variant(
        variant_id("ops", template, subject, dtype),
        "ops",
        template,
        subject,
        dtype,
        fingerprint=fp,
        family=kw.pop("family", subject.split(".")[0]),
        **kw,
    )


def details(
    subjects: dict[str, dict[str, str]],
    variants: dict[str, dict[str, Any]],
    templates: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "format": 1,
        "subjects": subjects,
        "variants": variants,
        "templates": templates or {"compare_cpu": "t1", "out": "t2"},
    }


@pytest.fixture()
def pair() -> tuple[Inventory, Inventory]:
    old = Inventory(
        "2.13.0",
        "aaa",
        (
            v("abs", fp="a1"),
            v("abs", "out", fp="a2"),
            v("add", fp="b1"),
            v("add", "out", fp="b2"),
            v("qr", fp="q1"),
            v("linalg.qr", fp="lq1", family="qr"),
            v("cholesky", fp="c1"),
            v("sin", fp="s1"),
            v("cos", fp="k1", expectation=Expectation.XFAIL, reason="x"),
        ),
        api_surface={
            "aten::abs": "aten::abs(Tensor self) -> Tensor",
            "aten::qr": "aten::qr(Tensor self, bool some=True) -> (Tensor Q, Tensor R)",
            "aten::add.Tensor": "aten::add.Tensor(Tensor self, Tensor other) -> Tensor",
        },
    )
    new = Inventory(
        "2.14.1",
        "bbb",
        (
            v("abs", fp="A1"),
            v("abs", "out", fp="a2"),
            v("add", fp="B1"),
            v("add", "out", fp="b2"),
            v("qr", fp="q1"),
            v("linalg.qr", fp="lq1", family="qr"),
            v("linalg.polar", fp="p1"),
            v("sin", fp="s1"),
            v("cos", fp="K1"),
        ),
        api_surface={
            "aten::abs": "aten::abs(Tensor self) -> Tensor",
            "aten::linalg_polar": "aten::linalg_polar(Tensor A) -> (Tensor U, Tensor P)",
            "aten::add.Tensor": (
                "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
            ),
        },
    )
    return old, new


def test_diff_without_details_names_what_the_records_show(pair: tuple[Inventory, Inventory]):
    old, new = pair
    diff = diff_inventories(old, new)
    assert (diff.variants_from, diff.variants_to) == (9, 9)
    assert [c.id for c in diff.changed] == [
        "ops::compare_cpu::abs::float32",
        "ops::compare_cpu::add::float32",
        "ops::compare_cpu::cos::float32",
    ]
    cos = diff.changed[2]
    assert cos.what[0] == "expectation: xfail -> pass"
    assert "fingerprint k1 -> K1" in cos.what[1]
    assert diff.added == ("ops::compare_cpu::linalg.polar::float32",)
    assert diff.removed == ("ops::compare_cpu::cholesky::float32",)
    assert diff.affected == 5
    assert not diff.details_used and "no details" in diff.notes[0]


def test_api_diff_added_removed_and_signature(pair: tuple[Inventory, Inventory]):
    old, new = pair
    changes = {(c.name, c.kind) for c in diff_api(old.api_surface, new.api_surface)}
    assert changes == {
        ("aten::linalg_polar", "added"),
        ("aten::qr", "removed"),
        ("aten::add.Tensor", "signature"),
    }
    ops = {o.name: o.evidence for o in api_ops(diff_api(old.api_surface, new.api_surface))}
    # aten's linalg_ spelling meets op_db's linalg. namespace.
    assert set(ops) == {"linalg.polar", "qr", "add"}
    assert ops["qr"] == ("aten API: aten::qr removed",)


def test_details_name_fields_decorators_and_ignore_one_sided_fields(
    pair: tuple[Inventory, Inventory],
):
    old, new = pair
    abs_id, add_id = "ops::compare_cpu::abs::float32", "ops::compare_cpu::add::float32"
    cos_id = "ops::compare_cpu::cos::float32"
    d_old = details(
        {
            "op_db:abs": {"dtypes": "d1", "sample_inputs_func": "s1"},
            "op_db:add": {"dtypes": "d1", "sample_inputs_func": "s2"},
            "op_db:cos": {"dtypes": "d1"},
        },
        {
            abs_id: {"subject": "op_db:abs", "decorators": [], "precision": "None"},
            add_id: {"subject": "op_db:add", "decorators": ["skip('slow')"], "precision": "None"},
            cos_id: {"subject": "op_db:cos", "decorators": [], "precision": "None"},
        },
    )
    d_new = details(
        {
            "op_db:abs": {"dtypes": "d1", "sample_inputs_func": "S1", "backward_dtypesIfXPU": "x"},
            "op_db:add": {"dtypes": "d1", "sample_inputs_func": "s2", "backward_dtypesIfXPU": "x"},
            "op_db:cos": {"dtypes": "d1", "backward_dtypesIfXPU": "x"},
        },
        {
            abs_id: {"subject": "op_db:abs", "decorators": [], "precision": "None"},
            add_id: {"subject": "op_db:add", "decorators": [], "precision": "None"},
            cos_id: {"subject": "op_db:cos", "decorators": [], "precision": "None"},
        },
    )
    diff = diff_inventories(old, new, d_old, d_new)
    named = {c.id: c.what for c in diff.changed}
    assert named[abs_id] == ("field: sample_inputs_func",)
    assert named[add_id] == ("decorator: - skip('slow')",)
    assert named[cos_id] == ("expectation: xfail -> pass",)
    assert diff.details_used
    assert any("backward_dtypesIfXPU exists in one version only" in n for n in diff.notes)
    assert diff.what_counts() == {"decorator": 1, "expectation": 1, "field": 1}

    # A fingerprint that differs only through a one-sided field changes nothing.
    d_new["subjects"]["op_db:abs"]["sample_inputs_func"] = "s1"
    diff = diff_inventories(old, new, d_old, d_new)
    assert abs_id not in {c.id for c in diff.changed}
    assert "backward_dtypesIfXPU" in diff.ignored[abs_id]


def test_bad_details_are_named():
    inv = Inventory("2.13.0", "a", ())
    with pytest.raises(SelectorError, match="format 7"):
        diff_inventories(inv, inv, {"format": 7}, {"format": 7})
    with pytest.raises(SelectorError, match="'templates' is missing"):
        diff_inventories(
            inv,
            inv,
            {"format": 1, "subjects": {}, "variants": {}},
            {"format": 1, "subjects": {}, "variants": {}, "templates": {}},
        )


def test_selection_reuses_selector_heuristics(pair: tuple[Inventory, Inventory]):
    old, new = pair
    diff = diff_inventories(old, new)
    sel = select_upgrade(diff, old, new, holdout_rate=0.0, canaries=False)
    reasons = {vid: " | ".join(map(reason_line, rs)) for vid, rs in sel.reasons.items()}
    assert reasons["ops::compare_cpu::abs::float32"].startswith("definition: definition changed")
    assert "new: new variant" in reasons["ops::compare_cpu::linalg.polar::float32"]
    # aten::qr removed reaches qr and its family (linalg.qr) through op_match.
    assert (
        "op_match: op qr touched (aten API: aten::qr removed)"
        in reasons["ops::compare_cpu::qr::float32"]
    )
    assert "same op family 'qr'" in reasons["ops::compare_cpu::linalg.qr::float32"]
    # add.Tensor's new signature reaches both add variants, changed or not.
    assert "ops::out::add::float32" in reasons
    assert "ops::compare_cpu::sin::float32" not in reasons
    assert sel.removed == ("ops::compare_cpu::cholesky::float32",)
    assert "ops::compare_cpu::cholesky::float32" in sel.run_on_old(old)
    assert "ops::compare_cpu::linalg.polar::float32" not in sel.run_on_old(old)
    assert set(sel.run_on_new()) == set(sel.reasons)


def test_holdout_is_seeded_and_apart(pair: tuple[Inventory, Inventory]):
    old, new = pair
    diff = diff_inventories(old, new)
    a = select_upgrade(diff, old, new, holdout_rate=0.5, seed="s")
    b = select_upgrade(diff, old, new, holdout_rate=0.5, seed="s")
    assert a.holdout == b.holdout and a.holdout
    assert not set(a.holdout) & set(a.reasons)
    assert a.share == round((len(a.reasons) + len(a.holdout)) / 9, 6)
    with pytest.raises(SelectorError, match="holdout rate"):
        select_upgrade(diff, old, new, holdout_rate=2.0)


def test_every_variant_run_or_skipped_has_its_recorded_reason(
    pair: tuple[Inventory, Inventory],
) -> None:
    """As a Plan does: each selected variant its heuristics' Reasons (scored), each unselected
    one that runs all the same why (canary, holdout, removed), the rest counted by why."""
    old, new = pair
    diff = diff_inventories(old, new)
    sel = select_upgrade(diff, old, new, holdout_rate=0.5, seed="s")
    first = sel.reasons["ops::compare_cpu::abs::float32"][0]
    assert (first.heuristic, first.score > 0) == ("definition", True)
    assert set(sel.held) == {*sel.holdout, *sel.removed}
    assert {sel.held[v].heuristic for v in sel.canary} <= {"canary"}
    assert {sel.held[v].heuristic for v in set(sel.holdout) - set(sel.canary)} <= {"holdout"}
    assert sel.held["ops::compare_cpu::cholesky::float32"].heuristic == "removed"
    runnable = sum(1 for v in new.variants if v.expectation is not Expectation.SKIP)
    unaffected = runnable - len(sel.reasons) - len(sel.holdout)
    assert sel.skipped.get("not affected by the upgrade", 0) == unaffected
    assert sum(sel.by_heuristic().values()) == len(sel.reasons)
    data = sel.to_json()
    assert data["selected"][0]["reasons"][0] == reason_line(
        sel.reasons[data["selected"][0]["id"]][0]
    )
    assert data["held"]["ops::compare_cpu::cholesky::float32"].startswith("removed: ")


def test_declared_skips_are_not_selected(pair: tuple[Inventory, Inventory]):
    old, new = pair
    variants = tuple(
        replace(x, expectation=Expectation.SKIP, reason="no") if x.subject == "abs" else x
        for x in new.variants
    )
    new = replace(new, variants=variants)
    sel = select_upgrade(diff_inventories(old, new), old, new, holdout_rate=0.0)
    assert not any("::abs::" in vid for vid in sel.reasons)


def test_classify_every_category():
    def o(vid: str, status: Status) -> Outcome:
        return Outcome(vid, status, 0.1, "boom" if status.is_failure else "")

    old = {
        "r": o("r", Status.PASSED),
        "f": o("f", Status.FAILED),
        "u": o("u", Status.ERROR),
        "p": o("p", Status.PASSED),
        "x": o("x", Status.XFAILED),
        "xp": o("xp", Status.XPASSED),
        "s": o("s", Status.SKIPPED),
        "k": o("k", Status.PASSED),
        "gone": o("gone", Status.PASSED),
    }
    new = {
        "r": o("r", Status.CRASHED),
        "f": o("f", Status.PASSED),
        "u": o("u", Status.FAILED),
        "p": o("p", Status.PASSED),
        "x": o("x", Status.XPASSED),
        "xp": o("xp", Status.TIMEOUT),
        "s": o("s", Status.FAILED),
        "k": o("k", Status.SKIPPED),
        "d": o("d", Status.PASSED),
        "n1": o("n1", Status.XFAILED),
        "n2": o("n2", Status.PASSED),
        "n3": o("n3", Status.SKIPPED),
    }
    # An expected failure that passes now is a fix; skipped before and failing now is new to
    # testing (an upstream skip went away), as is one the old version did not run at all ("d":
    # a declared skip there); skipped now compares nothing.
    rows = {m.id: m for m in classify(old, new, old, new, ["gone"], ["n1", "n2", "n3"])}
    assert {k: m.category for k, m in rows.items()} == {
        "r": "regressed",
        "f": "fixed",
        "u": "unchanged-failing",
        "p": None,
        "x": "fixed",
        "xp": "regressed",
        "s": "new-failing",
        "d": "new-passing",
        "n1": "new-failing",
        "n2": "new-passing",
        "gone": "removed",
    }
    assert rows["r"].message == "boom" and rows["gone"].after is None
    check = validation(list(rows.values()), ["r", "gone"], 10)
    assert check == {
        "outcome_changes": 7,
        "caught": 2,
        "missed": 5,
        "missed_ids": ["f", "n1", "s", "x", "xp"],
        "share_ran": 0.2,
    }


def test_expansion_around_holdout_misses(pair: tuple[Inventory, Inventory]):
    old, new = pair
    diff = diff_inventories(old, new)
    sel = select_upgrade(diff, old, new, holdout_rate=0.0, canaries=False)
    sel = replace(sel, holdout=("ops::compare_cpu::sin::float32",))
    moved = [
        Moved("ops::compare_cpu::sin::float32", "regressed", Status.PASSED, Status.FAILED),
        Moved("ops::compare_cpu::abs::float32", "regressed", Status.PASSED, Status.FAILED),
    ]
    new = replace(
        new,
        variants=(
            *new.variants,
            v("sin", "out", fp="s2"),
            v("sin", "errors", "none", fp="s3", expectation=Expectation.SKIP, reason="no"),
        ),
    )
    grown = expansion(moved, sel, new)
    # The holdout miss grows to sin's other runnable variants; a selected one does not grow.
    assert grown == {
        "ops::out::sin::float32": "expansion: regressed holdout variant "
        "ops::compare_cpu::sin::float32 (op sin)"
    }
    assert expansion(moved[1:], sel, new) == {}
    # A canary that moved grows the same way, and says it was a canary.
    sel = replace(sel, canary=sel.holdout)
    assert expansion(moved, sel, new) == {
        "ops::out::sin::float32": "expansion: regressed canary variant "
        "ops::compare_cpu::sin::float32 (op sin)"
    }


def test_one_canary_per_op_that_the_definitions_left_out(pair: tuple[Inventory, Inventory]):
    old, new = pair
    new = replace(
        new,
        variants=(
            *new.variants,
            # sin's best canary is its float32 forward comparison, not these:
            v("sin", "out", fp="s2"),
            v("sin", dtype="float16", fp="s3"),
            # an op whose forward comparison is an expected failure: the expected pass wins,
            v("tan", fp="t1", expectation=Expectation.XFAIL, reason="x"),
            v("tan", "backward", "float16", fp="t2"),
            # a declared skip is never a canary; an op with only expected failures gets one.
            v("exp", fp="e1", expectation=Expectation.SKIP, reason="no"),
            v("exp", "out", fp="e2", expectation=Expectation.XFAIL, reason="x"),
        ),
    )
    diff = diff_inventories(old, new)
    sel = select_upgrade(diff, old, new, holdout_rate=0.0)
    assert set(sel.canary) == {
        "ops::compare_cpu::sin::float32",
        "ops::backward::tan::float16",
        "ops::out::exp::float32",
        "ops::compare_cpu::cos::float32",
    } - set(sel.reasons)
    # cos changed, so the definitions selected its canary already; abs/add/qr too.
    assert "ops::compare_cpu::cos::float32" in sel.reasons
    assert not any("::abs::" in c or "::add::" in c for c in sel.canary)
    assert set(sel.canary) <= set(sel.holdout) and not set(sel.canary) & set(sel.reasons)
    assert set(sel.canary) <= set(sel.run_on_new()) and set(sel.canary) & set(sel.run_on_old(old))
    runnable = sum(1 for x in new.variants if x.expectation is not Expectation.SKIP)
    assert sel.share == round((len(sel.reasons) + len(sel.holdout)) / runnable, 6)
    assert select_upgrade(diff, old, new, holdout_rate=0.0, canaries=False).canary == ()
    # The holdout samples what is left after the canaries.
    full = select_upgrade(diff, old, new, holdout_rate=1.0)
    assert set(full.holdout) | set(full.reasons) == {
        x.id for x in new.variants if x.expectation is not Expectation.SKIP
    }


# ---------------------------------------------------------------- the committed Inventories


@pytest.fixture(scope="module")
def fixtures() -> tuple[Inventory, Inventory]:
    return (
        Inventory.load(FIXTURES / "inventory-2.13.0.json.gz"),
        Inventory.load(FIXTURES / "inventory-2.14.1.json.gz"),
    )


def test_fixture_diff_is_a_real_upgrade(fixtures: tuple[Inventory, Inventory]):
    old, new = fixtures
    assert (old.torch_version, new.torch_version) == ("2.13.0", "2.14.1")
    diff = diff_inventories(old, new)
    api = diff.api_by_kind()
    removed = {c.name for c in api["removed"]}
    # What the spike found on these two releases.
    assert {"aten::qr", "aten::qr.Q", "aten::cholesky", "aten::cholesky.out"} <= removed
    assert any(c.name.startswith("aten::linalg_polar") for c in api["added"])
    assert any("::qr::" in vid or "::cholesky::" in vid for vid in diff.removed)
    assert any("linalg.polar" in vid for vid in diff.added)
    # The fingerprints see a real, partial change: not everything, not nothing.
    common = len({v.id for v in old} & {v.id for v in new})
    assert 0 < len(diff.changed) < 0.5 * common
    sel = select_upgrade(diff, old, new)
    assert set(diff.added) <= set(sel.reasons)
    assert {c.id for c in diff.changed if c.id in sel.reasons}
    assert any(r.heuristic == "op_match" for rs in sel.reasons.values() for r in rs)
    # quantile's kernel regressed in 2.14.1 with no definition change: its canary runs it.
    assert "ops::compare_cpu::quantile::float32" in sel.canary
    assert sel.share < 0.2


def test_replay_scores_a_selection_against_full_outcomes(pair: tuple[Inventory, Inventory]):
    old, new = pair
    new = replace(new, variants=(*new.variants, v("sin", "out", fp="s2")))
    old = replace(old, variants=(*old.variants, v("sin", "out", fp="s2")))
    diff = diff_inventories(old, new)

    def outcomes(inv: Inventory, failing: set[str]) -> dict[str, Outcome]:
        return {
            x.id: Outcome(x.id, Status.FAILED if x.id in failing else Status.PASSED, 0.1)
            for x in inv.variants
        }

    # sin's kernel broke with no definition change: both its variants regress.
    sin = {"ops::compare_cpu::sin::float32", "ops::out::sin::float32"}
    full_old, full_new = outcomes(old, set()), outcomes(new, sin)
    with_canaries = select_upgrade(diff, old, new, holdout_rate=0.0)
    scored = replay(diff, with_canaries, old, new, full_old, full_new)
    # The canary (compare_cpu) regresses; the expansion brings in sin's `out` variant.
    assert scored["missed"] == 0 and scored["expansion"] == 1
    assert scored["outcome_changes"] == 3  # sin x2 regressed, cholesky removed (polar passes)
    without = select_upgrade(diff, old, new, holdout_rate=0.0, canaries=False)
    scored = replay(diff, without, old, new, full_old, full_new)
    assert scored["missed"] == 2 and sorted(scored["missed_ids"]) == sorted(sin)
    assert scored["expansion"] == 0
