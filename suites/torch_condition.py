"""On which torch an expectation holds: its `torch` condition (PEP 440 specifiers), read
against the torch of the interpreter that expands the suites (torch-free)."""

from __future__ import annotations

import functools
from typing import Any

from suites.loader import SpecError


@functools.cache
def installed_torch_version() -> str | None:
    """The version of the torch this interpreter has (read without importing it), None
    without one: an Inventory is expanded by the interpreter of the torch it describes."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def torch_condition(text: str, where: str) -> Any:
    """An expectation's `torch` condition (PEP 440 specifiers such as `>=2.14.1` or
    `>=2.13,<2.14.1`; pre-releases and nightlies included); bad input names `where`."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(text, prereleases=True)
    except InvalidSpecifier as exc:
        raise SpecError(f"{where}: torch: {text!r} is not a version condition ({exc})") from None


def torch_holds(text: str | None, where: str, version: str | None) -> bool:
    """Whether a rule with the `torch` condition `text` holds on torch `version` (a rule
    without one holds everywhere; with one, never on an unknown torch)."""
    if not text:
        return True
    condition = torch_condition(str(text), where)
    return version is not None and condition.contains(version.split("+", 1)[0])
