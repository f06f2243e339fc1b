"""Definition fingerprints that change only when something that can change a result changes.

A naive whole-object hash marks every OpInfo changed between torch versions (a new
`backward_dtypesIfXPU` field lands on all of them). Here we hash only what reaches a test on
this backend: fields and decorators for other devices are ignored, function sources are
hashed with docstrings stripped, nested OpInfos are referenced by name, and decorators count
only for the template (upstream class/test) and dtype they apply to.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import re
import textwrap
from collections.abc import Callable
from typing import Any

from suites.backend import our_devices

# Fields (and decorator device types) that only matter on other devices.
_OTHER_DEVICE = re.compile(
    r"(cuda|rocm|mps|xpu|hpu|meta|mkl|magma|cusolver|cudnn|tf32)", re.IGNORECASE
)
# Fields that are bookkeeping, not definition.
_IGNORED_FIELDS = {
    "decorators",
    "skips",
    "_original_opinfo_args",
    "_original_unary_ufunc_args",
    "_original_binary_ufunc_args",
    "_original_reduction_args",
    "_original_spectral_func_args",
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@functools.cache
def _code_text(code: Any) -> str:
    """Source of a code object with docstrings removed; bytecode constants if source is gone."""
    try:
        source = textwrap.dedent(inspect.getsource(code))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return repr(getattr(code, "co_code", code))
    top = tree.body[0] if tree.body else None
    if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
        top.name = "_"  # a rename alone changes no result
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
            body = node.body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def describe_value(value: Any, depth: int = 0) -> str:
    """A stable text for one definition field (no addresses, no docstrings)."""
    import torch

    if depth > 4:
        return "..."
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, set | frozenset):
        return "{" + ",".join(sorted(describe_value(v, depth + 1) for v in value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(describe_value(v, depth + 1) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                f"{k}:{describe_value(v, depth + 1)}"
                for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            )
            + "}"
        )
    # Nested OpInfos (refs point at their torch OpInfo) are referenced by name.
    if hasattr(value, "sample_inputs_func") and hasattr(value, "name"):
        return f"OpInfo({value.name}:{getattr(value, 'variant_test_name', '')})"
    if isinstance(value, functools.partial):
        return (
            f"partial({describe_value(value.func, depth + 1)},"
            f"{describe_value(value.args, depth + 1)},"
            f"{describe_value(value.keywords, depth + 1)})"
        )
    if isinstance(value, torch._ops.OpOverloadPacket | torch._ops.OpOverload):
        return str(value)
    code = getattr(value, "__code__", None)
    if code is not None:
        return f"fn:{_digest(_code_text(code))}"
    if inspect.isbuiltin(value) or isinstance(value, type):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', value)}"
    if callable(value):
        name = getattr(value, "__name__", None) or type(value).__qualname__
        return f"callable:{getattr(value, '__module__', '')}.{name}"
    return type(value).__qualname__


def definition_text(info: Any) -> str:
    """Every field of an OpInfo/ModuleInfo that can change a result here, decorators excluded."""
    fields = vars(info) if hasattr(info, "__dict__") else {}
    parts = []
    for name in sorted(fields):
        if name in _IGNORED_FIELDS or _OTHER_DEVICE.search(name):
            continue
        if name == "dtypesIf":
            value = {k: v for k, v in fields[name].items() if not _OTHER_DEVICE.search(str(k))}
        else:
            value = fields[name]
        parts.append(f"{name}={describe_value(value)}")
    return "\n".join(parts)


def describe_decorator(decorator: Any) -> str:
    """Text of one decorator: skip reason, expected failure, tolerances, or its name."""
    qualname = getattr(decorator, "__qualname__", type(decorator).__qualname__)
    if qualname == "skip.<locals>.decorator":
        return f"skip({skip_reason(decorator)!r})"
    data = getattr(decorator, "d", None)
    if isinstance(data, dict):
        return f"{type(decorator).__name__}({describe_value(data)})"
    return qualname


def skip_reason(decorator: Any) -> str:
    try:
        return str(inspect.getclosurevars(decorator).nonlocals.get("reason", ""))
    except (TypeError, ValueError):
        return ""


def applicable_decorators(
    info: Any, cls_name: str, test_name: str, device_type: str, dtype: Any
) -> list[Any]:
    """Decorators of an OpInfo/ModuleInfo that apply to one upstream test on our device."""
    from torch.testing._internal.opinfo.core import DecorateInfo

    out: list[Any] = []
    for item in getattr(info, "decorators", ()) or ():
        if isinstance(item, DecorateInfo):
            if item.device_type not in our_devices() and item.device_type != device_type:
                continue
            try:
                active = item.is_active(cls_name, test_name, device_type, dtype, {})
            except Exception:  # noqa: BLE001 - an active_if callable we cannot evaluate
                active = False
            if active:
                out.extend(item.decorators)
        else:
            out.append(item)
    return [d for d in out if not _OTHER_DEVICE.search(describe_decorator(d))]


def variant_fingerprint(definition_digest: str, decorators: list[Any], *extra: str) -> str:
    """Hash of the subject's definition, its decorators for this test, and the template."""
    text = "\n".join(
        [definition_digest, *sorted(describe_decorator(d) for d in decorators), *extra]
    )
    return _digest(text)


@functools.cache
def callable_digest(fn: Callable[..., Any]) -> str:
    """Digest of a template function's source (docstrings stripped)."""
    return _digest(_code_text(fn.__code__))


_DEFINITIONS: dict[int, tuple[Any, str]] = {}


def definition_digest(info: Any) -> str:
    """Digest of `definition_text`, cached per object (database entries live for the process)."""
    cached = _DEFINITIONS.get(id(info))
    if cached is None or cached[0] is not info:
        cached = (info, _digest(definition_text(info)))
        _DEFINITIONS[id(info)] = cached
    return cached[1]
