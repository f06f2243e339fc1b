"""Hostile spec input: a clear `file:line:col` error, never a traceback, a hang or a blow-up."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import jsonschema
import pytest

from suites import lint, loader
from suites.expand import load_suites_each
from suites.lint import lint_paths
from suites.loader import SpecError, load_spec
from tests.testing.cli import spyre_ci
from tests.testing.paths import SOFTMAX_PATCH

TINY = Path(__file__).resolve().parents[1] / "workflows" / "data" / "tiny.yaml"

BOMB = "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
    for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)

# input -> (bytes, what the error says, line:col it names)
HOSTILE: dict[str, tuple[bytes, str, str]] = {
    "alias bomb": (BOMB.encode(), "alias *e takes the values that aliases add", "6:8"),
    "recursive anchor": (b"a: &x [*x]\n", "alias *x is inside the value it refers to", "1:8"),
    "recursive mapping": (b"a: &m {b: *m}\n", "alias *m is inside", "1:11"),
    "undefined alias": (b"a: *nope\n", "found undefined alias", "1:4"),
    "deep nesting": (b"[" * 100 + b"]" * 100 + b"\n", "nested deeper than 64 levels", "1:65"),
    "deep via aliases": (
        b"a: &a " + b"[" * 40 + b"1" + b"]" * 40 + b"\nb: " + b"[" * 40 + b"*a" + b"]" * 40 + b"\n",
        "alias *a nests values deeper than 64 levels",
        "2:44",
    ),
    "very deep nesting": (b"[" * 5000 + b"]" * 5000, "maximum nesting depth", "1:1001"),
    "not UTF-8": (b"test_suite_config:\n  name: caf\xe9\n", "not UTF-8 text: byte 0xe9", "2:12"),
    "huge int": (b"a: " + b"9" * 5000 + b"\n", "Exceeds the limit", "1:4"),
    "tab indentation": (b"test_suite_config:\n\tname: x\n", "invalid YAML", "2:1"),
    "python tag": (b"a: !!python/object/apply:os.system [ls]\n", "is not allowed", "1:4"),
    "tag on a key": (b"!!python/name:os.system x: 1\n", "invalid YAML value", "1:1"),
    "bad merge": (b"a: {<<: 1}\n", "invalid YAML merge", "1:9"),
    "two documents": (b"a: 1\n---\nb: 2\n", "found another document", "2:1"),
    "bad date": (b"a: 2024-02-30\n", "day is out of range", "1:4"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_yaml_is_a_located_error(name: str, tmp_path: Path):
    data, says, where = HOSTILE[name]
    path = tmp_path / "hostile.yaml"
    path.write_bytes(data)
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert time.monotonic() - started < 5
    assert says in str(info.value)
    assert str(info.value).startswith(f"{path}:{where}: ")
    # lint reports it as one problem of that file, without raising
    problems = lint_paths([path])
    assert [(p.path, f"{p.line}:{p.col}") for p in problems] == [(str(path), where)]


@pytest.mark.parametrize(
    "text, says",
    [
        ("- a\n- b\n", "the document must be a mapping, got a list"),
        ("just a scalar\n", "the document must be a mapping, got a string"),
        ("", "the document must be a mapping, got empty (null)"),
        ("test_suite_config:\n  name: a\n  name: b\n  opinfo: []\n", "duplicate key 'name'"),
        ("test_suite_config: {version: 99999999999999999999999, opinfo: []}\n", "version"),
        ("test_suite_config: {timeout_s: 1e999, opinfo: []}\n", ""),
        ("test_suite_config:\n  version: 1\n  name: a\n  opinfo: 3\n", "opinfo must be a list"),
        ("test_suite_config:\n  version: 1\n  name: a\n  files: 4\n", "files must be a list"),
    ],
)
def test_hostile_documents_lint_without_traceback(text: str, says: str, tmp_path: Path):
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    messages = [str(p) for p in lint_paths([path])]
    if says:
        assert any(says in m for m in messages), messages


def test_spec_that_is_a_folder_or_a_fifo_or_too_big(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(SpecError, match=r"folder.yaml:1:1: is a folder, not a spec file"):
        load_spec(folder)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match=r"fifo.yaml:1:1: not a regular file"):
        load_spec(fifo)  # would block forever on open/read
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" * 100, encoding="utf-8")
    monkeypatch.setattr(loader, "MAX_SPEC_BYTES", 100)
    with pytest.raises(SpecError, match=r"big.yaml:1:1: .* at most 0 MB"):
        load_spec(big)


def test_aliases_within_bounds_still_load(tmp_path: Path):
    path = tmp_path / "ok.yaml"
    path.write_text(
        "base: &b {mode: xfail, reason: r}\nitems:\n"
        + "".join(f"  - {{<<: *b, id: x{i}}}\n" for i in range(200)),
        encoding="utf-8",
    )
    spec = load_spec(path)
    assert spec.data["items"][199] == {"mode": "xfail", "reason": "r", "id": "x199"}
    assert spec.mark(("items", 3)) == (6, 5)


def test_lint_of_a_big_spec_is_fast_and_unchanged(tmp_path: Path):
    """Once 92 s for 5 MB (pure-Python YAML, difflib per name, jsonschema per value); the
    results are those of the slow paths."""
    lines = [
        "test_suite_config:",
        "  version: 1",
        "  name: big",
        "  opinfo:",
        "    - db: op_db",
        "      templates: [compare_cpu]",
        "      tests:",
    ]
    for i in range(8000):
        op = ("add", "mul", "nope_op", "softmax")[i % 4]
        lines += [f"        - ops: [{op}]", "          mode: xfail", f"          reason: r{i}"]
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    started = time.process_time()
    problems = lint_paths([path])
    assert time.process_time() - started < 20
    assert len(problems) == 2000
    assert all("unknown op 'nope_op'" in p.message for p in problems)
    assert (problems[0].line, problems[0].col) == (14, 17)  # the first nope_op


VALIDITY_CASES = [
    {
        "test_suite_config": {
            "version": 1,
            "name": "x",
            "opinfo": [
                {
                    "db": "op_db",
                    "templates": ["compare_cpu"],
                    "dtypes": ["float32"],
                    "tests": [{"ops": "add", "mode": "xfail", "reason": "r"}],
                }
            ],
        }
    },
    {"test_suite_config": {"version": 1.0, "opinfo": []}},
    {"test_suite_config": {"version": True, "opinfo": []}},
    {"test_suite_config": {"version": 2, "opinfo": []}},
    {"test_suite_config": {"opinfo": [{"db": "op_db", "templates": []}]}},
    {"test_suite_config": {"opinfo": [{"db": "nope", "templates": ["compare_cpu"]}]}},
    {
        "test_suite_config": {
            "opinfo": [{"db": "op_db", "templates": ["compare_cpu"], "tests": [{"ops": ""}]}]
        }
    },
    {"test_suite_config": {"timeout_s": 0, "opinfo": []}},
    {"test_suite_config": {"timeout_s": -1, "opinfo": []}},
    {"test_suite_config": {"files": [{"path": "x.py", "tests": [{"names": ["A::b"]}]}]}},
    {"test_suite_config": {"files": [{"path": "x.py", "unknown": 1}]}},
    {"version": 1, "expectations": [{"id": "a::b::c::d", "mode": "xfail", "reason": "r"}]},
    {"version": 1, "expectations": [{"id": "a::b::c::d", "mode": "maybe"}]},
    {"expectations": [], "test_suite_config": {}},
    {"other": 1},
    [1, 2],
    "text",
    None,
]


@pytest.mark.parametrize("doc", VALIDITY_CASES)
def test_fast_schema_check_agrees_with_jsonschema(doc: object):
    validator = lint._validator()
    slow = list(jsonschema.Draft202012Validator(loader.schema()).iter_errors(doc))
    inlined = list(validator.iter_errors(doc))  # the $refs inlined: the same errors
    assert [(e.message, list(e.absolute_path), e.validator) for e in inlined] == [
        (e.message, list(e.absolute_path), e.validator) for e in slow
    ]
    with contextlib.suppress(lint._Unsure):
        assert lint._valid(doc, validator.schema) == (not slow)


def test_one_bad_spec_refuses_only_itself(tmp_path: Path):
    (tmp_path / "tiny.yaml").write_bytes(TINY.read_bytes())
    (tmp_path / "bomb.yaml").write_text(BOMB, encoding="utf-8")
    (tmp_path / "again.yaml").write_bytes(TINY.read_bytes())  # same suite name
    specs, refused = load_suites_each([tmp_path])
    assert [s.suite_name for s in specs] == ["tiny"]
    assert set(refused) == {str(tmp_path / "bomb.yaml"), str(tmp_path / "tiny.yaml")}
    assert "alias bomb" in refused[str(tmp_path / "bomb.yaml")]
    assert "duplicate suite name 'tiny'" in refused[str(tmp_path / "tiny.yaml")]


def test_cli_lint_of_an_alias_bomb_ends_fast(tmp_path: Path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB, encoding="utf-8")
    started = time.monotonic()
    done = spyre_ci("suites", "lint", str(path), timeout=60)
    assert time.monotonic() - started < 60
    assert done.returncode == 2  # a lint finding, like every other: bad input
    assert re.search(rf"{re.escape(str(path))}:6:8: invalid YAML: alias \*e", done.stdout)
    assert "Traceback" not in done.stderr


def test_cli_run_with_only_bad_specs_exits_2(tmp_path: Path):
    bad = tmp_path / "bomb.yaml"
    bad.write_text(BOMB, encoding="utf-8")
    done = spyre_ci(
        "run",
        "--diff",
        str(SOFTMAX_PATCH),
        "--specs",
        str(bad),
        "--out",
        str(tmp_path / "out"),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "bundled" not in done.stderr
    assert f"{bad}:6:8" in done.stderr
