"""Upstream device-generic test files, instantiated for `spyre` through PrivateUse1TestBase.

Importing a test file runs its `instantiate_device_type_tests(...)` restricted to privateuse1
(as torch-spyre's run_test.sh does with PYTORCH_TESTING_DEVICE_ONLY_FOR), which yields classes
such as `TestFooPRIVATEUSE1` with methods `test_bar_<op>_spyre_<dtype>`. Imports torch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import unittest
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

DEVICE_CLASS_SUFFIX = "PRIVATEUSE1"


class UpstreamError(Exception):
    """An upstream test file cannot be imported or instantiated."""


@dataclass(frozen=True)
class UpstreamTest:
    """One instantiated device test of an upstream file."""

    file: Path
    device_class: str  # TestFooPRIVATEUSE1
    generic_class: str  # TestFoo
    method: str  # test_bar_add_spyre_float32
    base_name: str  # test_bar (the generic test name torch-spyre configs list)
    subject: str  # TestFoo::test_bar_add (device and dtype removed)
    dtype: str | None
    op_name: str | None  # OpInfo.name
    op_formatted: str | None  # OpInfo formatted name (with variant), as in test names
    function: Callable[..., Any]


@cache
def import_test_file(path: Path) -> Any:
    """Import an upstream test file once, instantiating its device tests for `spyre` only."""
    path = path.resolve()
    name = "spyre_upstream_" + path.stem + "_" + hashlib.sha1(str(path).encode()).hexdigest()[:8]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UpstreamError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    # Upstream files import siblings (`from common_foo import ...`).
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    previous = os.environ.get("PYTORCH_TESTING_DEVICE_ONLY_FOR")
    os.environ["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "privateuse1"
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except unittest.SkipTest as exc:
        raise UpstreamError(f"{path}: skipped at import: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import failure makes the file unavailable
        sys.modules.pop(name, None)
        raise UpstreamError(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if previous is None:
            os.environ.pop("PYTORCH_TESTING_DEVICE_ONLY_FOR", None)
        else:
            os.environ["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = previous
    return module


def _dtype_name(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return "_".join(str(v).removeprefix("torch.") for v in value)
    return str(value).removeprefix("torch.")


def enumerate_tests(path: Path) -> Iterator[UpstreamTest]:
    """Every instantiated privateuse1 test of an upstream file, in definition order."""
    from torch.testing._internal.common_device_type import PrivateUse1TestBase

    module = import_test_file(path)
    device = torch._C._get_privateuse1_backend_name()
    # Sorted: upstream instantiates from a set of names, so definition order varies per process.
    for cls_name, cls in sorted(vars(module).items()):
        if not (
            isinstance(cls, type)
            and issubclass(cls, PrivateUse1TestBase)
            and cls_name.endswith(DEVICE_CLASS_SUFFIX)
        ):
            continue
        generic = cls_name[: -len(DEVICE_CLASS_SUFFIX)]
        for method, fn in sorted(vars(cls).items()):
            if not method.startswith("test") or not callable(fn):
                continue
            # instantiated_test(self, param_kwargs=...) keeps op/dtype in its default.
            first = fn.__defaults__[0] if getattr(fn, "__defaults__", None) else None
            params: dict[str, Any] = first if isinstance(first, dict) else {}
            op = params.get("op")
            dtype = _dtype_name(params.get("dtypes", params.get("dtype")))
            # `@wraps(test)` keeps the generic test's name on the instantiated function.
            base = getattr(fn, "__name__", method)
            stem = method
            dtype_suffix = "" if dtype is None else "_" + dtype
            if dtype_suffix and stem.endswith(dtype_suffix):
                stem = stem[: -len(dtype_suffix)]
            if stem.endswith("_" + device):
                stem = stem[: -len(device) - 1]
            yield UpstreamTest(
                file=path,
                device_class=cls_name,
                generic_class=generic,
                method=method,
                base_name=base,
                subject=f"{generic}::{stem}",
                dtype=dtype,
                op_name=getattr(op, "name", None),
                op_formatted=getattr(op, "formatted_name", None),
                function=fn,
            )


_CLASS_READY: set[type] = set()


def _move_to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu() if value.device.type != "cpu" else value
    if isinstance(value, list | tuple):
        return type(value)(_move_to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _move_to_cpu(v) for k, v in value.items()}
    return value


@dataclass
class UnittestOutcome:
    status: str  # passed | failed | error | skipped | xfailed | xpassed
    message: str = ""


def run_upstream_test(
    path: Path,
    device_class: str,
    method: str,
    *,
    cpu_move: tuple[str, ...] = (),
    no_grad: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
) -> UnittestOutcome:
    """Run one instantiated test the way unittest would, with torch-spyre's edits applied."""
    module = import_test_file(path)
    cls = getattr(module, device_class)
    if cls not in _CLASS_READY:
        cls.setUpClass()
        _CLASS_READY.add(cls)
    case = cls(method)
    # edits.functions.cpu_move: assertion helpers see CPU copies of device tensors.
    for name in cpu_move:
        original = getattr(case, name, None)
        if original is None:
            continue

        def wrapped(*args: Any, __orig: Any = original, **kwargs: Any) -> Any:
            return __orig(*_move_to_cpu(args), **_move_to_cpu(kwargs))

        setattr(case, name, wrapped)
    if atol is not None:
        case.precision = atol
    if rtol is not None:
        case.rel_tol = rtol
    result = unittest.TestResult()
    if no_grad:
        with torch.no_grad():
            case.run(result)
    else:
        case.run(result)
    if result.errors:
        return UnittestOutcome("error", result.errors[0][1])
    if result.failures:
        return UnittestOutcome("failed", result.failures[0][1])
    if result.skipped:
        return UnittestOutcome("skipped", result.skipped[0][1])
    if result.expectedFailures:
        return UnittestOutcome("xfailed", result.expectedFailures[0][1])
    if result.unexpectedSuccesses:
        return UnittestOutcome("xpassed", "unexpected success of an upstream expectedFailure")
    return UnittestOutcome("passed")
