"""Our implementations of the checks upstream test_ops.py / test_modules.py make.

Each template is `fn(info, dtype, device, ctx) -> None`, raising on a wrong result. Importing
this package is cheap; the template modules import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Context:
    """Per-variant settings a template needs beyond its subject and dtype."""

    atol: float | None = None
    rtol: float | None = None
    max_samples: int | None = None
    # Exact name of the template, for messages.
    template: str = ""


def get_template(name: str) -> Any:
    """The template function for a name (imports torch)."""
    from suites.templates import modules, ops

    table = {**ops.TEMPLATES, **modules.TEMPLATES}
    return table[name]


def applies(name: str, info: Any, dtype: Any) -> bool:
    """Whether a template makes sense for one subject and dtype (imports torch)."""
    from suites.templates import modules, ops

    table = {**ops.APPLIES, **modules.APPLIES}
    return bool(table[name](info, dtype))


def tolerance_tests(name: str, info: Any) -> tuple[tuple[str, str], ...]:
    """The upstream (class, test) pairs whose OpInfo tolerance overrides set a template's
    tolerance for one subject: the test the template is named after, except where upstream
    makes that comparison in another test (imports torch)."""
    from suites.template_names import TEMPLATE_UPSTREAM
    from suites.templates import ops

    kind = ops.TOLERANCE_TESTS.get(name)
    return kind(info) if kind is not None else (TEMPLATE_UPSTREAM[name],)
