from __future__ import annotations

from pathlib import Path

import pytest

from dashboard_export import ExportError
from dashboard_export.junit import outcomes, properties, read_junit, read_junit_dir
from suites.model import Status


def test_testcase_attributes_become_keys_and_children_nest(junit_dir: Path) -> None:
    cases = {c["name"]: c for c in read_junit(junit_dir / "shard-0.xml")}
    mul = cases["test_mul_float32"]
    assert mul["classname"] == "test_variants"
    assert isinstance(mul["line"], int) and isinstance(mul["time"], float)
    assert mul["failure"]["message"].startswith("AssertionError: mul gave 4")
    assert "assert product == 5" in mul["failure"]["text"]
    assert properties(mul) == {"variant_id": "sample::binary_ufunc::mul::float32"}
    assert cases["test_linear_float32"]["error"]["message"].startswith("failed on setup")
    assert cases["test_cos_float32"]["skipped"]["type"] == "pytest.xfail"
    assert "captured output from det" in cases["test_det_float32"]["system-out"]["text"]


def test_outcomes_cover_every_junit_result(junit_dir: Path) -> None:
    found = {o.id: o for o in outcomes(read_junit(junit_dir / "shard-0.xml"))}
    assert {vid: o.status for vid, o in found.items()} == {
        "sample::binary_ufunc::add::float32": Status.PASSED,
        "sample::binary_ufunc::add::float16": Status.PASSED,
        "sample::binary_ufunc::mul::float32": Status.FAILED,
        "sample::module::Linear::float32": Status.ERROR,
        "sample::unary_ufunc::sin::bfloat16": Status.SKIPPED,
        "sample::unary_ufunc::cos::float32": Status.XFAILED,
        "sample::unary_ufunc::exp::float32": Status.PASSED,  # pytest writes an xpass as a pass
        "upstream::TestLinalg::test_det::float32": Status.FAILED,
    }
    assert "spyre device 0 did not answer" in found["sample::module::Linear::float32"].message
    assert found["sample::binary_ufunc::add::float32"].message == ""


def test_directory_reader_tags_invoking_file(junit_dir: Path) -> None:
    cases = read_junit_dir(junit_dir)
    assert len(cases) == 8 and {c["invoking_file"] for c in cases} == {"shard-0"}


def test_status_property_and_timeout_and_teardown_error(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite name="s">'
        '<testcase classname="c" name="s::t::a::f32" time="2">'
        '<failure message="Failed: Timeout &gt;1.0s">...</failure></testcase>'
        '<testcase classname="c" name="s::t::b::f32" time="1">'
        '<properties><property name="status" value="crashed"/></properties>'
        '<error message="worker died"/></testcase>'
        '<testcase classname="c" name="s::t::c::f32" time="1"/>'
        '<testcase classname="c" name="s::t::c::f32" time="0.5">'
        '<error message="failed on teardown"/></testcase>'
        "</testsuite></testsuites>"
    )
    found = {o.id: o for o in outcomes(read_junit(report))}
    assert found["s::t::a::f32"].status is Status.TIMEOUT
    assert found["s::t::b::f32"].status is Status.CRASHED
    assert found["s::t::c::f32"].status is Status.ERROR
    assert found["s::t::c::f32"].duration_s == pytest.approx(1.5)


def test_malformed_xml_names_file_and_line(tmp_path: Path) -> None:
    report = tmp_path / "bad.xml"
    report.write_text("<testsuites>\n<testcase name='x'>\n</testsuites>\n")
    with pytest.raises(ExportError, match=r"bad\.xml:3:\d+: not well-formed"):
        read_junit(report)
    with pytest.raises(ExportError, match="no such JUnit file"):
        read_junit(tmp_path / "missing.xml")
    (tmp_path / "html.xml").write_text("<html/>")
    with pytest.raises(ExportError, match="root element is <html>"):
        read_junit(tmp_path / "html.xml")
