"""Expansion against torch's databases, fingerprints, inventory and the torch-side CLI."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from suites.expand import Expansion, expand, load_suites
from suites.fingerprint import definition_text, describe_value
from suites.model import Expectation, Inventory
from tests.testing.paths import REPO_ROOT
from workflows.cli.main import main

UPSTREAM_LIKE = REPO_ROOT / "tests" / "suites" / "upstream_like"
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "inventory-2.13.0.json.gz"

SMALL = """\
test_suite_config:
  name: small
  owners: ["@ops"]
  watch: ["aten/src/ATen/native/BinaryOps.cpp"]
  opinfo:
    - db: op_db
      templates: [compare_cpu, errors, out]
      ops:
        include: [{name: add}, {name: "div*"}, {name: gather}]
      dtypes: [float32, bfloat16]
      timeout_s: 30
      tests:
        - ops: ["div*"]
          dtypes: [bfloat16]
          mode: xfail
          reason: bf16 rounding of quotients
        - names: [TestCommon::test_errors]
          ops: [gather]
          mode: skip
          reason: error inputs allocate float64
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Expansion]:
    path = tmp_path_factory.mktemp("spec") / "small.yaml"
    path.write_text(SMALL)
    return path, expand(load_suites([path]))


@pytest.fixture(scope="module")
def bundled() -> Expansion:
    return expand(load_suites())


def test_ids_expectations_and_rules(small: tuple[Path, Expansion]) -> None:
    path, expansion = small
    by_id = {v.id: v for v in expansion.variants}
    assert "small::compare_cpu::add::float32" in by_id
    assert "small::compare_cpu::div.floor_rounding::bfloat16" in by_id
    assert "small::errors::gather::none" in by_id
    assert {v.template for v in expansion.variants} == {"compare_cpu", "errors", "out"}
    div = by_id["small::compare_cpu::div.trunc_rounding::bfloat16"]
    assert div.expectation is Expectation.XFAIL
    assert div.reason == "bf16 rounding of quotients"
    assert div.rule == f"{path}:13"
    assert div.family == "div"
    assert div.owners == ("@ops",)
    assert div.watch == ("aten/src/ATen/native/BinaryOps.cpp",)
    assert div.timeout_s == 30
    gather = by_id["small::errors::gather::none"]
    assert gather.expectation is Expectation.SKIP and gather.rule == f"{path}:17"
    plain = by_id["small::compare_cpu::add::float32"]
    assert plain.expectation is Expectation.PASS and plain.rule == f"{path}:6"
    # Stable: the same expansion twice gives the same ids, order and fingerprints.
    again = expand(load_suites([path]))
    assert [(v.id, v.fingerprint) for v in again.variants] == [
        (v.id, v.fingerprint) for v in expansion.variants
    ]


def test_bundled_specs_expand_to_at_least_8000_variants(bundled: Expansion) -> None:
    variants = bundled.variants
    assert len(variants) >= 8000
    assert len({v.id for v in variants}) == len(variants)
    assert {v.suite for v in variants} == {"ops", "modules", "compile"}
    assert {v.template for v in variants} == {
        "compare_cpu",
        "out",
        "noncontiguous_samples",
        "variant_consistency_eager",
        "backward",
        "errors",
        "compile",
        "numpy_ref",
        "python_ref",
        "module_forward",
    }
    for v in variants:
        assert v.fingerprint and v.family and v.watch, v.id
        assert re.match(r"^.+\.yaml:\d+", v.rule), (v.id, v.rule)
        if v.expectation is not Expectation.PASS:
            assert v.reason, v.id
    # OpInfo decorators apply under the upstream class/test names.
    assert any("[opinfo]" not in v.rule and "expectedFailure" in v.rule for v in variants)


def test_family_relates_variants_and_refs(bundled: Expansion) -> None:
    family = {v.subject: v.family for v in bundled.variants}
    assert family["div.floor_rounding"] == "div"
    assert family["_refs.add"] == "add"
    assert family["__radd__"] == "add"
    assert family["nn.functional.relu"] == "nn.functional.relu"


def test_expanding_some_subjects_gives_their_variants_as_the_whole_expansion(
    bundled: Expansion,
) -> None:
    """A test process asked for a few ids expands only their subjects (`subjects=`): their
    variants, expectations, rules and fingerprints are the whole expansion's."""
    import random

    variants = bundled.variants
    pairs = sorted({(v.suite, v.subject) for v in variants})
    # Some at random, and some whose expectation a rule or a decorator changed.
    chosen = set(random.Random(0).sample(pairs, 20))
    chosen |= set(
        random.Random(1).sample(
            sorted(
                {(v.suite, v.subject) for v in variants if v.expectation is not Expectation.PASS}
            ),
            10,
        )
    )
    wanted: dict[str, set[str]] = {v.suite: set() for v in variants}  # every suite named
    for suite, subject in chosen:
        wanted[suite].add(subject)
    part = expand(load_suites(), subjects=wanted)
    expected = [v for v in variants if v.subject in wanted.get(v.suite, set())]
    assert part.variants == expected
    assert {(v.suite, v.subject) for v in part.variants} == chosen


def _without_fingerprints(expansion: Expansion) -> list[Any]:
    return [replace(p, variant=replace(p.variant, fingerprint="")) for p in expansion.planned]


@pytest.mark.parametrize("which", ["bundled", "file suite"])
def test_a_test_process_expands_as_the_inventory_does_less_the_fingerprints(
    which: str, bundled: Expansion
) -> None:
    """The plugin expands with `fingerprints=False` (a test process runs variants and never
    compares them): the same variants, rules, expectations and run details, with every
    fingerprint empty, on the OpInfo suites and on a file suite."""
    if which == "bundled":
        whole, env = bundled, None
        lean = expand(load_suites(), fingerprints=False)
    else:
        env = {"TORCH_ROOT": str(UPSTREAM_LIKE)}
        specs = load_suites([UPSTREAM_LIKE / "tiny.yaml"], env)
        whole, lean = expand(specs, env=env), expand(specs, env=env, fingerprints=False)
    assert whole.planned and all(p.variant.fingerprint for p in whole.planned)
    assert not any(p.variant.fingerprint for p in lean.planned)
    assert lean.planned == _without_fingerprints(whole)
    assert [p.matched for p in lean.planned] == [p.matched for p in whole.planned]
    assert (lean.excluded, lean.unavailable, lean.records) == (
        whole.excluded,
        whole.unavailable,
        whole.records,
    )


def test_fingerprints_ignore_other_devices_and_docstrings() -> None:
    import torch

    class Info:
        def __init__(self, **fields: object) -> None:
            self.__dict__.update(fields)

    def sample_a(op, device):  # type: ignore[no-untyped-def]
        """Old words."""
        return device

    def sample_b(op, device):  # type: ignore[no-untyped-def]
        """New, longer words about the same thing."""
        return device

    def sample_c(op, device):  # type: ignore[no-untyped-def]
        return (device, 1)

    base = dict(name="x", dtypes={torch.float32}, sample_inputs_func=sample_a)
    one = Info(**base, dtypesIfCUDA={torch.float16})
    two = Info(**base, dtypesIfCUDA={torch.float64}, backward_dtypesIfXPU={torch.float16})
    assert definition_text(one) == definition_text(two)
    assert describe_value(sample_a) == describe_value(sample_b)
    assert describe_value(sample_a) != describe_value(sample_c)
    assert definition_text(Info(**{**base, "dtypes": {torch.float16}})) != definition_text(one)


def test_file_suite_expands_through_privateuse1(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"TORCH_ROOT": str(UPSTREAM_LIKE)}
    expansion = expand(load_suites([UPSTREAM_LIKE / "tiny.yaml"], env), env=env)
    ids = [v.id for v in expansion.variants]
    assert ids == sorted(ids)
    assert "tiny::test_tiny_ops::TestTiny::test_vs_cpu_add::float32" in ids
    assert "tiny::test_tiny_ops::TestTiny::test_ones::none" in ids
    # edits: div excluded (all variants by prefix), bfloat16 excluded.
    assert not any("div" in i or "bfloat16" in i for i in ids)
    plan = expansion.by_id()["tiny::test_tiny_ops::TestTiny::test_device_compare::float32"]
    assert plan.cpu_move == ("assertOnCpu",) and plan.device_class == "TestTinyPRIVATEUSE1"
    wrong = expansion.by_id()["tiny::test_tiny_ops::TestTiny::test_wrong::float32"].variant
    assert wrong.expectation is Expectation.XFAIL and wrong.rule.endswith("tiny.yaml:17")


def test_unset_torch_root_reports_the_suite_unavailable() -> None:
    expansion = expand(load_suites([UPSTREAM_LIKE / "tiny.yaml"], {}), env={})
    assert expansion.variants == []
    why = expansion.unavailable["tiny"]
    assert "tiny.yaml:4:13" in why and "${TORCH_ROOT}" in why and "unset" in why


def test_cli_expand_explain_and_inventory(
    small: tuple[Path, Expansion], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, expansion = small
    assert main(["suites", "expand", "--specs", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in data] == [v.id for v in expansion.variants]
    assert {"id", "suite", "template", "subject", "dtype", "expectation"} <= set(data[0])
    vid = "small::compare_cpu::div.trunc_rounding::bfloat16"
    assert main(["suites", "explain", vid, "--specs", str(path)]) == 0
    out = capsys.readouterr().out
    assert "expectation: xfail (bf16 rounding of quotients)" in out
    assert f"decided by:  {path}:13" in out
    assert f"{path}:6 [default]" in out and f"{path}:13 [tests] xfail" in out
    assert (
        main(["suites", "explain", "small::compare_cpu::addd::float32", "--specs", str(path)]) == 2
    )
    assert "did you mean" in capsys.readouterr().err
    out_file = tmp_path / "inv.json.gz"
    assert main(["inventory", "--specs", str(path), "--out", str(out_file)]) == 0
    inventory = Inventory.load(out_file)
    assert len(inventory) == len(expansion.variants)
    assert inventory.torch_version == metadata.version("torch").split("+")[0]  # installed
    assert inventory.api_surface["aten::add.Tensor"].startswith("aten::add.Tensor(Tensor self")


def test_committed_inventory_fixture() -> None:
    with gzip.open(FIXTURE, "rt") as fh:
        inventory = Inventory.from_json(json.load(fh))
    assert inventory.torch_version == "2.13.0"
    assert len(inventory) >= 8000
    assert len(inventory.api_surface) > 3000
