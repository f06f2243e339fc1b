"""Wiring the `spyre` device into PyTorch: hooks, guard, kernels, and three host patches."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch

from backend_under_test import kernels, memory

aten = torch.ops.aten
_DYNAMO_REGISTRY = "torch._dynamo.backends.registry"


class Hooks(torch._C._acc.PrivateUse1Hooks):
    """What ATen asks of every backend: built, available, has a context."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class Guard(torch._C._acc.DeviceGuard):
    """Device guard: one device, default stream (torch's Python guard handles the rest)."""

    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


def _metadata_only(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    return op.redispatch(kernels.CPU_KEYS, *args, **kwargs)


def _set_empty(tensor: torch.Tensor) -> torch.Tensor:
    # The CPU kernel of set_() would attach a CPU storage; attach an empty device one.
    storage = memory.allocate(0)
    kernels._set_storage.redispatch(kernels.CPU_KEYS, tensor, storage, 0, [0], [1])
    return tensor


def _convolution(*args: Any) -> Any:
    return kernels.fallback(aten.convolution.default, *args)


def _convolution_backward(*args: Any) -> Any:
    return kernels.fallback(aten.convolution_backward.default, *args)


def _ops_with_cpu_kernels() -> list[str]:
    """aten ops with a CPU kernel and no PrivateUse1 kernel yet: each gets one of its own.

    An op with both a CPU and a CompositeExplicitAutograd kernel needs it: for PrivateUse1
    the composite kernel would win over the fallback and run on device tensors directly. For
    the others it is the same fallback, bound to the op (`kernels.kernel_for`), which skips
    the per-call lookup of the op's plan. Left out: an op whose CompositeImplicitAutograd
    kernel serves PrivateUse1 today (`mish_backward`, `native_channel_shuffle` on 2.13): a
    kernel of its own would replace that decomposition, and its autograd with it. Other
    namespaces' ops (`quantized::`, ...) and ops registered later reach the boxed fallback.
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return [
        name
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::")
        and has(name, "CPU")
        and not has(name, "PrivateUse1")
        and (
            not has(name, "CompositeImplicitAutograd")
            or has(name, "CompositeExplicitAutograd")
            or has(name, "CompositeExplicitAutogradNonFunctional")
        )
    ]


def _overload(qualified: str) -> torch._ops.OpOverload:
    namespace, rest = qualified.split("::", 1)
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), name)
    return getattr(packet, overload or "default")


def register_kernels() -> list[torch.library.Library]:
    """Register the explicit kernels, the fallback bound to each aten op with a CPU kernel, and
    the boxed fallback for PrivateUse1."""
    impl = torch.library.Library("aten", "IMPL")
    key = "PrivateUse1"
    impl.impl("empty.memory_format", kernels.empty_memory_format, key)
    impl.impl("empty_strided", kernels.empty_strided, key)
    impl.impl("_copy_from", kernels._copy_from, key)
    impl.impl("_copy_from_and_resize", kernels._copy_from_and_resize, key)
    # The conj/neg fallbacks would materialise a lazily conjugated source with clone(), which
    # copies with _copy_from again: endless recursion. Our _copy_from carries the bits itself.
    for lazy_key in ("Conjugate", "Negative"):
        for name in ("_copy_from", "_copy_from_and_resize"):
            impl.impl(name, torch.library.fallthrough_kernel, lazy_key)
    impl.impl("resize_", kernels.resize_, key)
    impl.impl("_local_scalar_dense", kernels._local_scalar_dense, key)
    impl.impl("set_", _set_empty, key)
    for overload in (
        "source_Storage",
        "source_Storage_storage_offset",
        "source_Tensor",
        "source_Tensor_storage_offset",
    ):
        op = getattr(aten.set_, overload)
        impl.impl(f"set_.{overload}", functools.partial(_metadata_only, op), key)
    impl.impl("convolution_overrideable", _convolution, key)
    impl.impl("convolution_backward_overrideable", _convolution_backward, key)
    for qualified in _ops_with_cpu_kernels():
        op = _overload(qualified)
        impl.impl(qualified.split("::", 1)[1], kernels.kernel_for(op), key)
    everything = torch.library.Library("_", "IMPL")
    everything.fallback(kernels.fallback, key)
    return [impl, everything]


def patch_host_entry_points() -> None:
    """Route the three host-side entry points that would otherwise crash or misbehave.

    - `torch.UntypedStorage(n, device="spyre")` has no C++ allocator to call (it segfaults);
      `copy.deepcopy` and `torch.load` reach it.
    - Printing converts the tensor to float64 on its device first, which Spyre refuses.
    """
    storage_cls = torch.UntypedStorage
    original_new = storage_cls.__new__

    def untyped_storage_new(cls: type, *args: Any, device: Any = None, **kwargs: Any) -> Any:
        if device is not None and torch.device(device).type == kernels._DEVICE_TYPE:
            return _device_storage(args, kwargs)
        if device is None:
            return original_new(cls, *args, **kwargs)
        return original_new(cls, *args, device=device, **kwargs)

    storage_cls.__new__ = untyped_storage_new  # type: ignore[method-assign]

    import torch._tensor_str as tensor_str

    original_totype = tensor_str.tensor_totype

    def tensor_totype(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == kernels._DEVICE_TYPE:
            t = t.cpu()
        return original_totype(t)

    tensor_str.tensor_totype = tensor_totype


def _device_storage(args: Sequence[Any], kwargs: dict[str, Any]) -> torch.UntypedStorage:
    if kwargs:
        raise TypeError(f"torch.UntypedStorage(device='spyre') got unexpected {sorted(kwargs)}")
    if not args:
        return memory.allocate(0)
    if len(args) == 1 and isinstance(args[0], int):
        return memory.allocate(args[0])
    host = torch.UntypedStorage(*args)
    storage = memory.allocate(host.nbytes())
    memory.host_storage(storage)[: host.nbytes()].copy_(host)
    return storage


_COMPILE_NAME = ["spyre"]  # the compile backend's name: the device's


def register_compile_backend(name: str = "spyre") -> None:
    """Make `torch.compile(backend="spyre")` (the device's name) work without importing
    dynamo now.

    Importing torch._dynamo costs seconds, and `import torch` runs this registration; so
    the backend is added when dynamo's registry module is first imported.
    """
    _COMPILE_NAME[0] = name
    if _DYNAMO_REGISTRY in sys.modules:
        _add_dynamo_backend(sys.modules[_DYNAMO_REGISTRY])
        return
    if not any(isinstance(f, _RegistryWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegistryWatcher())


def _add_dynamo_backend(registry: ModuleType) -> None:
    from backend_under_test import compile as spyre_compile

    name = _COMPILE_NAME[0]
    if name not in registry._BACKENDS:
        registry.register_backend(compiler_fn=spyre_compile.spyre_backend, name=name)


class _RegistryWatcher(importlib.abc.MetaPathFinder):
    """Runs `_add_dynamo_backend` right after dynamo's backend registry is imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _DYNAMO_REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module  # type: ignore[union-attr]

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _add_dynamo_backend(module)

        loader.exec_module = exec_module  # type: ignore[method-assign,union-attr]
        return spec
