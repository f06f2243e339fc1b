"""Loader, schema and lint: positions, every problem of a file at once, torch-spyre configs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from suites.lint import lint_paths
from suites.loader import SpecError, load_spec, parse_yaml, schema, spec_paths
from tests.testing.paths import REPO_ROOT

TORCH_SPYRE = Path("/work/shared/reference/torch-spyre-configs")
BUNDLED = REPO_ROOT / "suites" / "specs"


def _lint(
    tmp_path: Path, text: str, name: str = "spec.yaml", env: dict[str, str] | None = None
) -> list[str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return [str(p) for p in lint_paths([path], env=env) if p.severity == "error"]


def test_schema_is_valid_draft_2020_12() -> None:
    data = schema()
    assert data["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(data)


def test_positions_of_keys_and_values(tmp_path: Path) -> None:
    spec = parse_yaml("a:\n  b: [1, 2]\n  c:\n    - name: x\n", tmp_path / "f.yaml")
    assert spec.mark(("a", "b", 1)) == (2, 10)
    assert spec.mark(("a", "c", 0, "name"), key=True) == (4, 7)
    assert spec.location(("a", "c", 0, "name")) == f"{tmp_path / 'f.yaml'}:4:13"


def test_broken_yaml_is_reported_with_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("test_suite_config:\n  files: [\n    - path: x\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"bad\.yaml:\d+:\d+: invalid YAML"):
        load_spec(path)
    problems = lint_paths([path])
    assert len(problems) == 1 and "invalid YAML" in problems[0].message


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text("test_suite_config: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(SpecError, match=r"evil\.yaml:1:20: invalid YAML value"):
        load_spec(path)


@pytest.mark.parametrize("path", spec_paths([TORCH_SPYRE]), ids=lambda p: p.name)
def test_torch_spyre_configs_lint_clean(path: Path) -> None:
    assert [str(p) for p in lint_paths([path], env={}) if p.severity == "error"] == []


def test_bundled_specs_lint_clean() -> None:
    assert [str(p) for p in lint_paths(spec_paths(None)) if p.severity == "error"] == []


def test_all_problems_of_a_file_at_once(tmp_path: Path) -> None:
    problems = _lint(
        tmp_path,
        """\
test_suite_config:
  owners: "@me"
  timeout_s: -3
  opinfo:
    - db: op_db
      templates: [compare_cpu, compare_cpuu]
      ops:
        include:
          - name: addd
          - name: "linalg.nope*"
      dtypes: [float32, flaot16]
      tests:
        - nmaes: [compare_cpu]
          mode: xfial
        - ops: [mul]
          mode: xfail
      expectations_file: missing.expectations.yaml
""",
    )
    text = "\n".join(problems)
    expected = [
        ":2:11: test_suite_config.owners must be a list, got a string",
        ":3:14: test_suite_config.timeout_s: -3 is less than or equal to the minimum of 0",
        ":6:32: test_suite_config.opinfo[0].templates[1]: 'compare_cpuu' is not one of",
        "did you mean 'compare_cpu'?",
        ":9:19: unknown op 'addd' (not in op_db of torch 2.13.0); did you mean 'add'?",
        ":10:19: unknown op 'linalg.nope*'",
        ":11:25: test_suite_config.opinfo[0].dtypes[1]: 'flaot16' is not one of",
        "did you mean 'float16'?",
        ":13:11: unknown key 'nmaes' in test_suite_config.opinfo[0].tests[0]",
        "; did you mean 'names'?",
        ":14:17: test_suite_config.opinfo[0].tests[0].mode: 'xfial' is not one of",
        ":15:11: a xfail rule needs a 'reason'",
        ":17:26: expectations file 'missing.expectations.yaml' does not exist",
    ]
    for piece in expected:
        assert piece in text, f"{piece!r} not in:\n{text}"
    assert all(p.startswith(str(tmp_path / "spec.yaml") + ":") for p in problems)


def test_unknown_top_level_key_and_wrong_type(tmp_path: Path) -> None:
    problems = _lint(
        tmp_path,
        """\
test_suite_confg:
  files: []
""",
    )
    assert any(
        ":1:1: unknown key 'test_suite_confg'" in p and "did you mean 'test_suite_config'" in p
        for p in problems
    ), problems
    problems = _lint(
        tmp_path,
        """\
test_suite_config:
  files:
    - path: 3
      unlisted_test_mode: maybe
      tests:
        - names: [A::b::c]
          mode: skip
""",
    )
    text = "\n".join(problems)
    assert ":3:13: test_suite_config.files[0].path must be a string, got an integer" in text
    assert ":4:27: test_suite_config.files[0].unlisted_test_mode: 'maybe' is not one of" in text
    assert ":6:19: test name 'A::b::c' must be 'Class::method' or 'method'" in text


def test_duplicate_ids_keys_and_suites(tmp_path: Path) -> None:
    (tmp_path / "a.expectations.yaml").write_text("""\
expectations:
  - {id: "s::compare_cpu::add::float32", mode: xfail, reason: r}
  - {id: "s::compare_cpu::add::float32", mode: skip, reason: r}
""")
    spec = """\
test_suite_config:
  name: s
  opinfo:
    - db: op_db
      templates: [compare_cpu]
      ops: {include: [{name: add}]}
      expectations_file: a.expectations.yaml
"""
    (tmp_path / "one.yaml").write_text(spec)
    (tmp_path / "two.yaml").write_text(spec + "  name: s\n")
    problems = [str(p) for p in lint_paths([tmp_path / "one.yaml", tmp_path / "two.yaml"])]
    text = "\n".join(problems)
    assert (
        "a.expectations.yaml:3:10: duplicate id 's::compare_cpu::add::float32' (first at line 2)"
    ) in text
    assert "two.yaml:8:3: duplicate key 'name' in test_suite_config" in text
    assert any("two.yaml:" in p and "duplicate suite name 's' (also" in p for p in problems)


def test_unset_torch_root_is_not_an_error_but_a_missing_file_is(tmp_path: Path) -> None:
    text = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_nothing.py
      unlisted_test_mode: skip
"""
    assert _lint(tmp_path, text, env={}) == []
    problems = _lint(tmp_path, text, env={"TORCH_ROOT": str(tmp_path)})
    assert len(problems) == 1
    assert ":3:13: test file" in problems[0] and "test_nothing.py' does not exist" in problems[0]


def test_unknown_module_name_did_you_mean(tmp_path: Path) -> None:
    problems = _lint(
        tmp_path,
        """\
test_suite_config:
  opinfo:
    - db: module_db
      templates: [module_forward]
      ops: {include: [{name: nn.Linaer}]}
""",
    )
    assert any(
        "unknown module 'nn.Linaer'" in p and "did you mean 'nn.Linear'" in p for p in problems
    ), problems


def test_reference_templates_lint_by_database(tmp_path: Path) -> None:
    def spec(db: str, templates: str) -> str:
        return f"test_suite_config:\n  opinfo:\n    - db: {db}\n      templates: {templates}\n"

    assert _lint(tmp_path, spec("op_db", "[numpy_ref]")) == []
    assert _lint(tmp_path, spec("python_ref_db", "[compare_cpu, python_ref]")) == []
    (problem,) = _lint(tmp_path, spec("op_db", "[compare_cpu, python_ref]"))
    assert ":4:18: 'python_ref' applies to db: python_ref_db only" in problem
    (problem,) = _lint(tmp_path, spec("module_db", "[numpy_ref]"))
    assert "module_db takes the 'module_forward' template only" in problem


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workflows.cli.main", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_cli_lint_and_schema(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("test_suite_config:\n  files:\n    - pth: x\n")
    result = _cli("suites", "lint", str(bad))
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert f"{bad}:3:7: test_suite_config.files[0]: missing required key 'path'" in lines
    assert any(
        f"{bad}:3:7: unknown key 'pth'" in ln and "did you mean 'path'" in ln for ln in lines
    )
    ok = _cli("suites", "lint", str(TORCH_SPYRE))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (said,) = ok.stdout.splitlines()  # a clean lint says so
    assert re.fullmatch(
        r"\d+ file\(s\) checked: no errors(, \d+ warning\(s\), --warnings shows them)?", said
    )
    printed = _cli("suites", "schema")
    assert printed.returncode == 0
    assert json.loads(printed.stdout) == schema()


def test_loader_and_lint_do_not_import_torch() -> None:
    probe = (
        "import sys\nfrom suites.lint import lint_paths\nfrom suites.loader import spec_paths\n"
        "from suites import rules, record\n"
        f"lint_paths(spec_paths([{str(TORCH_SPYRE)!r}]))\n"
        "lint_paths(spec_paths(None))\n"
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
