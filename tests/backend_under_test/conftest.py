"""Fixtures for the spyre device tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import backend_under_test
from backend_under_test import rules


@pytest.fixture(autouse=True)
def _rules_on(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every unit test starts with the Spyre rules on and fp16 compute enabled.

    The OpInfo sweep module is left alone: it runs under whatever SPYRE_EMU_PERMISSIVE says.
    """
    backend_under_test.register()
    if request.module.__name__.endswith("opinfo_compare_cpu"):
        yield
        return
    permissive = rules.set_permissive(False)
    fp16 = rules.set_fp16_compute(True)
    yield
    rules.set_permissive(permissive)
    rules.set_fp16_compute(fp16)


@pytest.fixture()
def permissive() -> Iterator[None]:
    """The Spyre rules off: mechanics only."""
    rules.set_permissive(True)
    yield
    rules.set_permissive(False)


@pytest.fixture()
def host() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 6)
