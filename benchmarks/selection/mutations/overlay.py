"""Applies a mutation inside the current (test) process; the sitecustomize of
`workflows/runner/change_overlay/site/` calls `activate()` at interpreter start when
`SPYRE_CI_OVERLAY_MODULE` names this module (`subprocess_env` sets it) and
`SPYRE_CI_MUTATION` names an activation file.

Python mutations: the finder a run uses to apply a change (`workflows.runner.change_overlay`)
serves the named torch modules from the mutated source. Kernel mutations: for
each overload of the named aten ops, a `torch.library` kernel on the CPU key calls the
original CPU kernel (`torch.library.get_kernel`) and perturbs its floating result.

Why the emulated device is not perturbed: the spyre device runs its ops by calling the CPU
kernels on host aliases of device memory (backend_under_test/kernels.py). A real Spyre has
its own kernels, so an upstream edit of a CPU kernel changes the CPU reference the tests
compare against, not the device's result. A call whose tensor arguments alias device
memory is the device's kernel at work and gets the original result.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any

from workflows.runner.change_overlay.finder import ChangeFinder

ENV_VAR = "SPYRE_CI_MUTATION"
_ACTIVE: dict[str, Any] = {}


def activate(path: str | None = None) -> None:
    """Apply the mutation described by the activation file (default: `$SPYRE_CI_MUTATION`)."""
    path = path or os.environ.get(ENV_VAR)
    if not path or _ACTIVE:
        return
    with open(path, encoding="utf-8") as fh:
        activation = json.load(fh)
    _ACTIVE.update(activation)
    if activation["kind"] == "python":
        finder = ChangeFinder(activation["modules"])
        _ACTIVE["finder"] = finder
        sys.meta_path.insert(0, finder)
    else:
        install_kernel_override(activation["ops"], activation["perturb"])


_LIBS: list[Any] = []
_STATE = threading.local()


def install_kernel_override(ops: Sequence[str], perturb: dict[str, float]) -> list[str]:
    """Override the CPU kernel of every overload of `ops`; returns the overloads overridden."""
    import warnings

    import torch

    scale = float(perturb.get("scale", 1.0))
    offset = float(perturb.get("offset", 0.0))
    lib = torch.library.Library("aten", "IMPL")
    _LIBS.append(lib)
    done: list[str] = []
    for name in ops:
        packet_name = name.split("::", 1)[1]
        packet = getattr(torch.ops.aten, packet_name)
        overloads = [(o, getattr(packet, o)) for o in packet.overloads()]
        # The CPU kernels when the op has any; otherwise (logsumexp) its
        # CompositeExplicitAutograd kernels, which CPU tensors reach. CompositeImplicitAutograd
        # ops decompose above the CPU key: a CPU registration would never run.
        for key in ("CPU", "CompositeExplicitAutograd"):
            chosen = [(o, op) for o, op in overloads if _has_kernel(op, key)]
            if chosen:
                break
        for overload_name, overload in chosen:
            qualified = (
                f"{packet_name}.{overload_name}" if overload_name != "default" else packet_name
            )
            original = torch.library.get_kernel(overload, "CPU")
            kernel = _perturbing_kernel(original, overload, scale, offset)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
                lib.impl(qualified, kernel, "CPU", with_keyset=True)
            done.append(overload.name())
    if not done:
        raise RuntimeError(
            f"{ENV_VAR}: none of {', '.join(ops)} has a CPU or "
            "CompositeExplicitAutograd kernel to override; name the ops whose "
            "kernels the edit changes"
        )
    _ACTIVE["overridden"] = done
    return done


def _has_kernel(overload: Any, key: str) -> bool:
    import torch

    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), key))
    except RuntimeError:
        return False  # a TorchScript-only overload (mul.left_t): not a dispatcher op


def _perturbing_kernel(original: Any, overload: Any, scale: float, offset: float) -> Any:
    import torch

    schema = overload._schema
    written = [
        i
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]

    tensor_args = [i for i, a in enumerate(schema.arguments) if str(a.type) == "Tensor"]

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        # A Python scalar the dispatcher wrapped as a tensor (x * 3) reaches a Python kernel
        # unwrapped; the boxed call needs the tensor back (what wrapping makes, dtype-wise).
        if any(i < len(args) and isinstance(args[i], int | float | bool) for i in tensor_args):
            args = tuple(_as_tensor(a) if i in tensor_args else a for i, a in enumerate(args))
        result = original.call_boxed(keyset, *args, **kwargs)
        if getattr(_STATE, "busy", False) or (scale == 1.0 and offset == 0.0):
            return result
        if _on_device_memory(args, kwargs):
            return result
        _STATE.busy = True  # the perturbation's own ops run unperturbed
        try:
            with torch.no_grad():
                if written or isinstance(result, torch.Tensor) and _aliases_input(result, args):
                    for tensor in _tensors(result):
                        _perturb_in_place(tensor, scale, offset)
                    return result
                return _perturbed(result, scale, offset)
        finally:
            _STATE.busy = False

    return kernel


def _as_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, bool):
        return torch.tensor(value)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.get_default_dtype())
    return value


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _aliases_input(result: Any, args: Sequence[Any]) -> bool:
    ptr = result.untyped_storage().data_ptr()
    return bool(ptr) and any(t.untyped_storage().data_ptr() == ptr for t in _tensors(list(args)))


def _perturb_in_place(tensor: Any, scale: float, offset: float) -> None:
    if tensor.is_floating_point() and tensor.numel():
        tensor.mul_(scale).add_(offset)


def _perturbed(value: Any, scale: float, offset: float) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.numel():
            return value * scale + offset
        return value
    if isinstance(value, tuple) and value:
        # Multi-output kernels (values + indices, output + saved stats): the first is the result.
        return (_perturbed(value[0], scale, offset), *value[1:])
    return value


def _on_device_memory(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """True when the device's kernel is at work: a tensor argument is a host alias of spyre
    device memory, or the call comes from the device's kernels (which also compute on
    temporary CPU copies, e.g. matmul and softmax in float16)."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith(_DEVICE_DIR):
            return True
        frame = frame.f_back
    owners = _device_owners()
    if not owners:
        return False
    for tensor in _tensors(list(args) + list(kwargs.values())):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr and ptr in owners:
            return True
    return False


_DEVICE_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "backend_under_test",
    "",
)


def _device_owners() -> dict[int, Any]:
    module = sys.modules.get("backend_under_test.memory")
    return getattr(module, "_OWNERS", {}) if module is not None else {}


def status() -> dict[str, Any]:
    """What this process applied (for tests and diagnostics)."""
    finder = _ACTIVE.get("finder")
    return {
        "id": _ACTIVE.get("id"),
        "kind": _ACTIVE.get("kind"),
        "loaded": list(finder.loaded) if finder else [],
        "overridden": list(_ACTIVE.get("overridden", [])),
    }
