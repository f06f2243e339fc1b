"""The cheap test-function lookup answers as torch's does, and torch's modules use it."""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any

from suites import frame_walk

Lookup = Callable[[], Callable[..., Any] | None]


def _both() -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    return frame_walk.torch_s()(), frame_walk.extract_test_fn()


class _Probe(unittest.TestCase):
    __test__ = False  # run by the test below, not collected on its own

    seen: list[tuple[Any, Any]] = []

    def test_inside(self) -> None:
        def nested(self: object = "not a test case") -> None:  # a `self` that is no TestCase
            _Probe.seen.append(_both())

        nested()
        _Probe.seen.append(_both())

    def helper(self) -> None:  # not a test method: its frame is skipped, the caller's found
        _Probe.seen.append(_both())

    def test_through_a_helper(self) -> None:
        self.helper()


def test_the_lookup_finds_what_torchs_finds() -> None:
    _Probe.seen.clear()
    for name in ("test_inside", "test_through_a_helper"):
        result = unittest.TestResult()
        _Probe(name).run(result)
        assert result.wasSuccessful(), result.errors + result.failures
    assert len(_Probe.seen) == 3
    for torch_answer, ours in _Probe.seen:
        assert ours is torch_answer
    assert {fn.__name__ for fn, _ in _Probe.seen if fn is not None} == {
        "test_inside",
        "test_through_a_helper",
    }
    assert _both() == (None, None)  # outside any unittest test: nothing, in both


def test_install_puts_it_where_torch_calls_it() -> None:
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    frame_walk.install()
    frame_walk.install()  # idempotent: torch's own is still the one kept for comparison
    assert common_utils.extract_test_fn is frame_walk.extract_test_fn
    assert core.extract_test_fn is frame_walk.extract_test_fn  # type: ignore[attr-defined]
    assert frame_walk.torch_s() is not frame_walk.extract_test_fn
    assert common_utils.get_tracked_input() is None  # torch's callers go through it
