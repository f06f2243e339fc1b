"""Product modules over 500 lines say why in their docstring, or are split.

A module that long carries a paragraph starting with MARKER near the top of its docstring: the
reason it is one module (one protocol read top to bottom, one plugin pytest loads by name, ...).
Benchmarks and tests are not product code.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.testing.paths import REPO_ROOT

LIMIT = 500
MARKER = "Long on purpose:"
NOT_PRODUCT = ("tests", "benchmarks", "docs", "examples")
# Modules over the limit that have neither a reason nor a split yet: none.
NOT_YET: set[str] = set()


def _product_modules() -> dict[str, Path]:
    packages = [
        p
        for p in sorted(REPO_ROOT.iterdir())
        if (p / "__init__.py").is_file() and p.name not in NOT_PRODUCT
    ]
    return {
        path.relative_to(REPO_ROOT).as_posix(): path
        for package in packages
        for path in sorted(package.rglob("*.py"))
    }


def _long() -> dict[str, Path]:
    return {
        name: path
        for name, path in _product_modules().items()
        if len(path.read_text(encoding="utf-8").splitlines()) > LIMIT
    }


def _says_why(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraphs = [p.strip() for p in doc.split("\n\n")]
    # the summary line, then the reason: at the top, not buried under the details
    return any(p.startswith(MARKER) for p in paragraphs[:3])


def test_every_long_product_module_says_why_it_is_long() -> None:
    unexplained = sorted(
        name for name, path in _long().items() if name not in NOT_YET and not _says_why(path)
    )
    assert unexplained == []


def test_the_exceptions_are_still_needed() -> None:
    """A module of NOT_YET that got its paragraph, got shorter or went away leaves the list."""
    long = _long()
    stale = sorted(name for name in NOT_YET if name not in long or _says_why(long[name]))
    assert stale == []


def test_the_rule_sees_a_module_without_its_reason(tmp_path: Path) -> None:
    bare = tmp_path / "bare.py"
    bare.write_text('"""Does a lot.\n\nDetails."""\n', encoding="utf-8")
    buried = tmp_path / "buried.py"
    buried.write_text(f'"""Does a lot.\n\nA.\n\nB.\n\n{MARKER} late."""\n', encoding="utf-8")
    told = tmp_path / "told.py"
    told.write_text(f'"""Does a lot.\n\n{MARKER} one protocol."""\n', encoding="utf-8")
    assert not _says_why(bare) and not _says_why(buried) and _says_why(told)
