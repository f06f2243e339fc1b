"""The cheap frame walk finds the same unittest method as upstream's inspect-based helper."""

from __future__ import annotations

import unittest

from torch.testing._internal import common_utils

import suites.templates.compare  # noqa: F401 - installs the frame walk
from suites.templates import tracking


def _upstream_extract_test_fn():  # type: ignore[no-untyped-def]
    # Upstream's implementation, kept here only as the oracle for the comparison.
    import inspect

    for frame_info in inspect.stack():
        self_val = frame_info.frame.f_locals.get("self")
        if isinstance(self_val, unittest.TestCase):
            test_id = self_val.id()
            *_, cls_name, test_name = test_id.rsplit(".", 2)
            if cls_name == type(self_val).__name__ and test_name.startswith("test"):
                return getattr(self_val, test_name).__func__
    return None


class _Probe(unittest.TestCase):
    __test__ = False  # run by hand below, not collected

    def test_probe(self) -> None:
        self.found = (tracking.extract_test_fn(), _upstream_extract_test_fn())


def test_installed_in_torch() -> None:
    from torch.testing._internal.opinfo import core

    tracking.install()
    assert common_utils.extract_test_fn is tracking.extract_test_fn
    # OpInfo.sample_inputs calls it through the name opinfo.core imported
    assert core.extract_test_fn is tracking.extract_test_fn  # type: ignore[attr-defined]
    assert common_utils.get_tracked_input() is None


def test_same_function_inside_a_unittest_method() -> None:
    case = _Probe("test_probe")
    case.run()
    ours, upstream = case.found
    assert ours is upstream is _Probe.test_probe


def test_none_outside_a_test() -> None:
    assert tracking.extract_test_fn() is None
