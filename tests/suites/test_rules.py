"""Expectation rules: OpInfo-suite rule order, and torch-spyre's per-variant file semantics."""

from __future__ import annotations

from pathlib import Path

from suites.loader import parse_yaml
from suites.model import Expectation
from suites.record import expectation_entries, read_results, summarize
from suites.rules import Rule, Tolerance, VariantKey, decide, decide_file_variant, spec_rules

FILE = ("test_suite_config", "files", 0)


def _key(
    template: str = "compare_cpu", subject: str = "div.floor_rounding", dtype: str = "float16"
) -> VariantKey:
    return VariantKey(
        f"ops::{template}::{subject}::{dtype}", template, subject, subject.split(".")[0], dtype
    )


def test_last_matching_rule_decides_and_trail_is_kept(tmp_path: Path) -> None:
    spec = parse_yaml(
        """\
test_suite_config:
  opinfo:
    - db: op_db
      templates: [compare_cpu]
      tests:
        - names: [TestCommon::test_compare_cpu]
          ops: ["div*"]
          mode: xfail
          reason: rounding differs
        - dtypes: [float32]
          mode: skip
          reason: not this dtype
        - ops: [div]
          dtypes: [float16]
          precision: {atol: 1e-2, rtol: "1e-2"}
""",
        tmp_path / "ops.yaml",
    )
    rules = spec_rules(spec, ("test_suite_config", "opinfo", 0))
    default = Rule("default", "default")
    decision = decide(_key(), [default, *rules], keep_trail=True)
    assert decision.expectation is Expectation.XFAIL
    assert decision.reason == "rounding differs"
    assert decision.rule == f"{tmp_path / 'ops.yaml'}:6"
    assert decision.precision == Tolerance(0.01, 0.01)
    assert [r.kind for r in decision.matched] == ["default", "tests", "tests"]
    assert decide(_key(dtype="float32"), rules).expectation is Expectation.SKIP
    # Another template is not matched by the upstream-name rule.
    assert decide(_key(template="out"), rules).expectation is Expectation.PASS


def test_expectation_file_rule_by_id() -> None:
    rule = Rule(
        "e.yaml:3",
        "expectations",
        id_glob="ops::out::*::bfloat16",
        mode=Expectation.XFAIL_STRICT,
        reason="no bf16 out",
    )
    assert decide(_key("out", "add", "bfloat16"), [rule]).expectation is Expectation.XFAIL_STRICT
    assert decide(_key("out", "add", "float16"), [rule]).expectation is Expectation.PASS


SPYRE = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py
      unlisted_test_mode: xfail
      tests:
        - names: [TestBinaryUfuncs::test_contig_vs_transposed]
          mode: mandatory_success
          edits:
            ops:
              exclude: [{name: div}]
            dtypes:
              include: [{name: float64, precision: {atol: 0.5}}]
              exclude: [{name: bfloat16}]
        - names: [test_contig_vs_transposed]
          mode: skip
        - names: ["test_(rope|qkv)_.*"]
          mode: xfail_strict
          tags: [rope]
  global:
    supported_dtypes:
      - name: float16
        force_xfail: true
      - name: float32
    supported_ops:
      - name: add
      - name: mul
        force_xfail: true
      - div
"""


def test_torch_spyre_file_semantics(tmp_path: Path) -> None:
    spec = parse_yaml(SPYRE, tmp_path / "cfg.yaml")

    def decide_(base: str, op: str | None, dtype: str | None, formatted: str | None = None):
        return decide_file_variant(spec, FILE, base, op, dtype, op_formatted=formatted or op)

    # The entry whose include covers the dtype wins; precision comes from the include item.
    d = decide_("test_contig_vs_transposed", "add", "float64")
    assert d is not None and d.expectation is Expectation.PASS
    assert d.precision == Tolerance(0.5, None)
    assert d.rule == f"{tmp_path / 'cfg.yaml'}:6"
    # float32 is outside the first entry's include, so the entry without dtype edits decides:
    # skip. torch-spyre deletes such variants: excluded, with the entry's line.
    skipped = decide_("test_contig_vs_transposed", "add", "float32")
    assert skipped.excluded and skipped.rule.startswith(f"{tmp_path / 'cfg.yaml'}:")
    # Excluded ops (also by prefix: div_floor_rounding) and dtypes disable the variant.
    by_op = decide_("test_contig_vs_transposed", "div", "float64", "div_floor_rounding")
    assert by_op.excluded and by_op.reason == "op div_floor_rounding excluded"
    # Ops outside global.supported_ops are cut.
    assert decide_("test_other", "sub", "float32").excluded
    # Unlisted tests take unlisted_test_mode; force_xfail on op and on dtype.
    unlisted = decide_("test_other", "add", "float32")
    assert unlisted is not None and unlisted.expectation is Expectation.XFAIL
    assert not unlisted.listed
    listed = decide_("test_rope_fms_1", "mul", "float32")
    assert listed is not None and listed.expectation is Expectation.XFAIL_STRICT
    assert listed.tags == ("rope",)
    # The global dtype ceiling.
    ceiling = decide_("test_rope_x", "add", "int64")
    assert ceiling.excluded and ceiling.reason == "dtype int64 not in global.supported_dtypes"
    # A test without op or dtype is governed by its entry only.
    assert decide_("test_qkv_x", None, None).expectation is Expectation.XFAIL_STRICT


def test_force_xfail_only_turns_mandatory_into_xfail(tmp_path: Path) -> None:
    spec = parse_yaml(
        SPYRE.replace("unlisted_test_mode: xfail", "unlisted_test_mode: mandatory_success"),
        tmp_path / "cfg.yaml",
    )
    by_op = decide_file_variant(spec, FILE, "test_x", "mul", "float32")
    assert by_op is not None and by_op.expectation is Expectation.XFAIL
    assert by_op.reason == "force_xfail on op mul"
    by_dtype = decide_file_variant(spec, FILE, "test_x", "add", "float16")
    assert by_dtype is not None and by_dtype.reason == "force_xfail on dtype float16"
    plain = decide_file_variant(spec, FILE, "test_x", "add", "float32")
    assert plain is not None and plain.expectation is Expectation.PASS


def test_default_unlisted_mode_is_xfail_as_in_torch_spyre(tmp_path: Path) -> None:
    spec = parse_yaml("test_suite_config:\n  files:\n    - path: /x.py\n", tmp_path / "c.yaml")
    decision = decide_file_variant(spec, FILE, "test_anything", None, None)
    assert decision is not None and decision.expectation is Expectation.XFAIL


def test_record_results_into_expectations(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text(
        '{"event":"start","id":"a::t::x::float32"}\n'
        '{"event":"end","id":"a::t::x::float32","status":"failed","duration_s":0.1,'
        '"message":"Traceback...\\nE   TypeError: spyre does not support dtype float64"}\n'
        '{"event":"start","id":"a::t::y::float32"}\n'
        '{"event":"end","id":"a::t::y::float32","status":"passed","duration_s":0.1,"message":""}\n'
        '{"event":"start","id":"a::t::z::float32"}\n'
    )
    entries = expectation_entries(read_results([results]))
    assert entries == [
        {
            "id": "a::t::x::float32",
            "mode": "xfail",
            "reason": "TypeError: spyre does not support dtype float64",
        },
        {"id": "a::t::z::float32", "mode": "skip", "reason": "crashed: the test process died"},
    ]
    assert summarize("x" * 300).endswith("…")


def test_an_expectation_holds_on_the_torches_its_condition_names(tmp_path) -> None:
    """`torch:` (PEP 440 specifiers, nightlies included) decides on which torch an entry
    holds; a condition that is no version condition is bad input naming its line."""
    import pytest

    from suites.loader import SpecError, load_spec
    from suites.rules import expectation_rules

    path = tmp_path / "x.expectations.yaml"
    path.write_text(
        "version: 1\nexpectations:\n"
        "- {id: 's::t::a::float32', mode: xfail, reason: r, torch: '<2.14.1'}\n"
        "- {id: 's::t::b::float32', mode: xfail, reason: r, torch: '>=2.14.1'}\n"
        "- {id: 's::t::c::float32', mode: xfail, reason: r}\n"
    )
    spec = load_spec(path)

    def ids(version: str) -> list[str]:
        return [str(r.id_glob) for r in expectation_rules(spec, version)]

    assert ids("2.13.0+cpu") == ["s::t::a::float32", "s::t::c::float32"]
    assert ids("2.14.1") == ["s::t::b::float32", "s::t::c::float32"]
    assert ids("2.16.0.dev20261201") == ["s::t::b::float32", "s::t::c::float32"]
    path.write_text(
        "version: 1\nexpectations:\n- {id: 's::t::a::float32', mode: xfail, reason: r, "
        "torch: 'after 2.14'}\n"
    )
    with pytest.raises(SpecError, match=r"x.expectations.yaml:3.*torch: 'after 2.14'"):
        expectation_rules(load_spec(path), "2.13.0")
