"""Upstream device-generic test files, instantiated for `spyre` through PrivateUse1TestBase.

Importing a test file runs its `instantiate_device_type_tests(...)` restricted to privateuse1
(as torch-spyre's run_test.sh does with PYTORCH_TESTING_DEVICE_ONLY_FOR), which yields classes
such as `TestFooPRIVATEUSE1` with methods `test_bar_<op>_spyre_<dtype>`. Imports torch.
"""

from __future__ import annotations

import contextlib
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

from suites.rules import FileWidening

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
    base_name: str  # test_bar (the generic class's member name torch-spyre configs list)
    subject: str  # TestFoo::test_bar_add (device and dtype removed)
    dtype: str | None
    op_name: str | None  # OpInfo.name
    op_formatted: str | None  # OpInfo formatted name (with variant), as in test names
    function: Callable[..., Any]
    spyre_dtype: str | None = None  # the dtype torch-spyre's rules see (from the name)
    op: Any = None  # the OpInfo
    # The test's own name when the member name differs (`test_x` of `test_x_n_1`, a test
    # instantiate_parametrized_tests expanded): entries naming it govern the member too.
    written_name: str | None = None
    source: Callable[..., Any] | None = None  # the test function as written in the file


# What a generated method was instantiated from: (device class, method) -> the member name of
# the generic class (`test_foo`, or `test_foo_x_1` for a class that instantiate_parametrized_tests
# expanded first). torch-spyre matches YAML names against this name.
_MEMBER: dict[tuple[type, str], str] = {}


@cache
def import_test_file(path: Path, widening: FileWidening = FileWidening()) -> Any:  # noqa: B008
    """Import an upstream test file once per widening, instantiating its test classes for
    `spyre` only.

    As torch-spyre's runner does with its generated wrapper files: classes that upstream
    instantiates `only_for` other devices are instantiated for privateuse1 too, and plain
    `TestCase` classes (never passed to `instantiate_device_type_tests`) are instantiated for
    privateuse1 after the file ran, so that every test of the file is governed by its YAML.
    Any number of files may be imported in one process: generated classes are always named
    `...PRIVATEUSE1` (upstream renames them `...SPYRE` once a test class set itself up).
    A config that widens dtypes (`FileWidening`) gets its own copy of the file's module, so
    two configs over one file in one process each see what torch-spyre generates for them.
    """
    from torch.testing._internal import common_device_type as cdt

    path = path.resolve()
    key = str(path) + (repr(widening) if widening else "")
    name = "spyre_upstream_" + path.stem + "_" + hashlib.sha1(key.encode()).hexdigest()[:8]
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
    real = cdt.instantiate_device_type_tests
    instantiated: set[str] = set()

    def instantiate(generic: type, scope: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        if generic.__name__ in instantiated:
            return  # once for privateuse1, whatever devices each upstream call names
        instantiated.add(generic.__name__)
        kwargs.pop("only_for", None)  # torch-spyre re-instantiates these for privateuse1
        if len(args) >= 2:
            args = (args[0], None, *args[2:])
        _instantiate(real, generic, scope, widening, *args, **kwargs)

    cdt.instantiate_device_type_tests = instantiate  # type: ignore[assignment]
    try:
        sys.modules[name] = module
        with _watched_if_edited(path):
            spec.loader.exec_module(module)
        for cls_name, cls in list(vars(module).items()):
            if (
                isinstance(cls, type)
                and issubclass(cls, unittest.TestCase)
                and not issubclass(cls, cdt.DeviceTypeTestBase)
                and cls.__module__ == name
                and cls_name == cls.__name__
                and cls_name not in instantiated
                and any(m.startswith("test") for m in vars(cls))
            ):
                _drop_parametrize_copies(cls)
                _instantiate(real, cls, vars(module), widening)
    except unittest.SkipTest as exc:
        raise UpstreamError(f"{path}: skipped at import: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import failure makes the file unavailable
        sys.modules.pop(name, None)
        raise UpstreamError(f"{path}: import failed: {type(exc).__name__}: {exc}") from exc
    finally:
        cdt.instantiate_device_type_tests = real
        if previous is None:
            os.environ.pop("PYTORCH_TESTING_DEVICE_ONLY_FOR", None)
        else:
            os.environ["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = previous
    return module


def _drop_parametrize_copies(cls: type) -> None:
    """Tests that `instantiate_parametrized_tests` already expanded keep a copy of their
    `parametrize_fn` (`functools.wraps` copies `__dict__`); device instantiation would expand
    them a second time (`test_x_n_1_n_1`)."""
    for member, fn in vars(cls).items():
        if (
            member.startswith("test")
            and getattr(fn, "__name__", member) != member
            and "parametrize_fn" in getattr(fn, "__dict__", {})
        ):
            del fn.parametrize_fn


def _instantiate(
    real: Callable[..., Any],
    generic: type,
    scope: dict[str, Any],
    widening: FileWidening,
    *args: Any,
    **kwargs: Any,
) -> None:
    """Upstream's instantiate_device_type_tests, with the generated class named
    `<generic>PRIVATEUSE1`, each generated method's generic member name recorded and the
    config's dtype widening applied to each `@ops` test while it is instantiated."""
    from torch.testing._internal.common_device_type import PrivateUse1TestBase

    # PrivateUse1TestBase.setUpClass sets the base's device_type to the backend name, which
    # upstream then uses in the next class's name (torch-spyre resets it the same way).
    PrivateUse1TestBase.device_type = "privateuse1"
    own = PrivateUse1TestBase.__dict__.get("instantiate_test")
    original = PrivateUse1TestBase.instantiate_test.__func__  # type: ignore[attr-defined]

    def recording(cls: type, name: str, test: Any, *, generic_cls: Any = None) -> None:
        before = set(vars(cls))
        with _widened(test, name, widening):
            original(cls, name, test, generic_cls=generic_cls)
        for method in set(vars(cls)) - before:
            _MEMBER[(cls, method)] = name

    PrivateUse1TestBase.instantiate_test = classmethod(recording)  # type: ignore[assignment,method-assign]
    try:
        real(generic, scope, *args, **kwargs)
    finally:
        if own is None:
            del PrivateUse1TestBase.instantiate_test
        else:
            PrivateUse1TestBase.instantiate_test = own  # type: ignore[method-assign]
        PrivateUse1TestBase.device_type = "privateuse1"


@contextlib.contextmanager
def _widened(test: Any, member: str, widening: FileWidening) -> Iterator[None]:
    """While an `@ops` test is instantiated: what torch-spyre's `_OOTDtypePatcher` and
    `_OOTOpDtypeExpander` do, and the widening half of its OpInfo dtype override; the op_db
    OpInfos a test's `edits.ops.include` names join its `@ops` list (the RFC's meaning:
    torch-spyre's code reads these includes only for their tags). The
    `@ops` allowed dtypes take the listed dtypes of its ops and the test's included dtypes;
    each op's dtypes (and its dtypes for this device) take the included dtypes and its own
    listed ones. The OpInfos are shared by every suite of the process: they are restored
    afterwards (torch-spyre leaves them changed). Narrowing to the listed dtypes stays a
    rule (`decide_file_variant`), so `explain` names the line.
    """
    from torch.testing._internal.common_device_type import ops

    fn = getattr(test, "__func__", test)
    owner = getattr(getattr(fn, "parametrize_fn", None), "__self__", None)
    if not widening or not isinstance(owner, ops):
        yield
        return
    from torch.testing._internal.common_methods_invocations import op_db

    extra = {_torch_dtype(d) for d in widening.for_test(member)} - {None}
    listed = owner.op_list
    included = widening.ops_for_test(member)
    present = {(op.name, op.variant_test_name) for op in listed}
    added = [
        op for op in op_db if op.name in included and (op.name, op.variant_test_name) not in present
    ]
    own = {
        op.name: {_torch_dtype(d) for d in widening.for_op(op.name)} - {None}
        for op in [*listed, *added]
    }
    allowed = owner.allowed_dtypes
    saved: list[tuple[Any, Any, dict[str, Any]]] = []
    device = torch._C._get_privateuse1_backend_name()
    try:
        if added:
            owner.op_list = [*listed, *added]
        if allowed is not None:
            owner.allowed_dtypes = set(allowed) | extra | set().union(*own.values())
        for op in owner.op_list:
            add = extra | own[op.name]
            if not add:
                continue
            saved.append((op, op.dtypes, dict(op.dtypesIf)))
            op.__dict__["dtypes"] = set(op.dtypes) | add
            if device in op.dtypesIf:
                op.dtypesIf[device] = set(op.dtypesIf[device]) | add
        yield
    finally:
        owner.op_list = listed
        owner.allowed_dtypes = allowed
        for op, dtypes, per_device in saved:
            op.__dict__["dtypes"] = dtypes
            op.__dict__["dtypesIf"] = per_device


def _torch_dtype(name: str) -> Any:
    value = getattr(torch, name, None)
    return value if isinstance(value, torch.dtype) else None


def _dtype_name(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return "_".join(str(v).removeprefix("torch.") for v in value)
    return str(value).removeprefix("torch.")


def spyre_dtype_of(method: str) -> str | None:
    """The dtype torch-spyre reads from a generated method's name: the first dtype word,
    longest first, that is a `_<dtype>` suffix or a `_<dtype>_` infix. For a tuple of dtypes
    (`@dtypes(*product(...))`, `..._spyre_float32_int32`) that is one of them, as there."""
    for dtype in _SPYRE_DTYPE_WORDS:
        if f"_{dtype}_" in method or method.endswith(f"_{dtype}"):
            return dtype
    return None


# torch-spyre's valid dtype words, sorted longest first (a stable sort of its table's order).
_SPYRE_DTYPE_WORDS = sorted(
    [
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "complex32",
        "complex64",
        "complex128",
        "bool",
        "half",
    ],
    key=len,
    reverse=True,
)


def test_function(fn: Callable[..., Any], path: Path) -> Callable[..., Any]:
    """The test as written in its file, under the instantiation and decorator wrappers."""
    found = fn
    seen: set[int] = set()
    current: Any = fn
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "__code__", None)
        if code is not None and Path(code.co_filename).resolve() == path:
            found = current
        current = getattr(current, "__wrapped__", None)
    return found


def _watched_if_edited(path: Path) -> contextlib.AbstractContextManager[None]:
    """The import log (`suites.import_log`) around the import of a test file the change under
    test edits (`$SPYRE_CI_EDITED_TESTS`): the change's code, whose hang, crash or error
    before the first test is the change's failure, as a changed torch module's is."""
    from suites.expand import upstream_repo_path
    from suites.import_log import watched
    from suites.loader import edited_tests

    if str(path) not in edited_tests():
        return contextlib.nullcontext()
    return watched(upstream_repo_path(None, path), str(path))


def enumerate_tests(
    path: Path,
    widening: FileWidening = FileWidening(),  # noqa: B008
) -> Iterator[UpstreamTest]:
    """Every instantiated privateuse1 test of an upstream file (sorted by class and name)."""
    from torch.testing._internal.common_device_type import PrivateUse1TestBase

    path = path.resolve()
    module = import_test_file(path, widening)
    device = torch._C._get_privateuse1_backend_name()
    # Sorted: upstream instantiates from a set of names, so definition order varies per process.
    for cls_name, cls in sorted(vars(module).items()):
        if not (
            isinstance(cls, type)
            and issubclass(cls, PrivateUse1TestBase)
            and cls.__module__ == module.__name__
            and cls.__bases__
        ):
            continue
        generic = cls.__bases__[-1].__name__
        for method, fn in sorted(vars(cls).items()):
            if not method.startswith("test") or not callable(fn):
                continue
            # instantiated_test(self, param_kwargs=...) keeps op/dtype in its default.
            first = fn.__defaults__[0] if getattr(fn, "__defaults__", None) else None
            params: dict[str, Any] = first if isinstance(first, dict) else {}
            op = params.get("op")
            dtype = _dtype_name(params.get("dtypes", params.get("dtype")))
            base = str(_MEMBER.get((cls, method)) or getattr(fn, "__name__", method))
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
                spyre_dtype=spyre_dtype_of(method),
                op=op,
                written_name=(
                    written if (written := getattr(fn, "__name__", base)) != base else None
                ),
                source=test_function(fn, path),
            )


_CLASS_READY: set[type] = set()


def _allow_device(cls: type) -> None:
    """As torch-spyre patches them: `@onlyOn(...)` (`onlyCPU`, `onlyCUDA`) and
    `@onlyNativeDeviceTypes` tests run on privateuse1 instead of skipping."""
    from torch.testing._internal import common_device_type as cdt

    cls.bypass_device_restrictions = True  # type: ignore[attr-defined]
    native: tuple[str, ...] = getattr(cdt, "NATIVE_DEVICES", ())
    for name in ("privateuse1", torch._C._get_privateuse1_backend_name()):
        if name not in native:
            native = (*native, name)
    setattr(cdt, "NATIVE_DEVICES", native)  # noqa: B010 - not an exported name


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
    widening: FileWidening = FileWidening(),  # noqa: B008
) -> UnittestOutcome:
    """Run one instantiated test the way unittest would, with torch-spyre's edits applied."""
    module = import_test_file(path, widening)
    cls = getattr(module, device_class)
    if cls not in _CLASS_READY:
        _allow_device(cls)
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
