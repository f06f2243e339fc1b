"""The kernels of the `spyre` device: a few explicit ones and one fallback for every other op.

Long on purpose: every kernel shares the host-alias machinery and the per-op plan cache
(`OpPlan`), and the small-op path (`kernel_for` -> `_fast_call`) is one call chain
whose cost benchmarks/device_small_op.py measures; it stays readable in one place.

Every device tensor's bytes live in a CPU storage (see `memory.py`), so a kernel runs the
CPU implementation on CPU *aliases* of its device arguments: in-place ops and views need no
copies, and a fresh CPU result is adopted as device memory without copying either. The
Spyre rules (`rules.py`) are applied here, per op *name*, before anything runs; per-op
decisions are computed once and cached (`OpPlan`), which keeps the small-op path short.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from backend_under_test import compiled, memory, rules, stats

aten = torch.ops.aten
CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_CPU = torch.device("cpu")
_set_storage = aten.set_.source_Storage_storage_offset
_set_storage_handle = _set_storage._handle
_create_empty = torch._C._acc.create_empty_tensor
_cpu_empty = torch.empty
_LIVE = memory._LIVE
_DEVICE = memory.DEVICE
_from_data_pointer = torch._C._construct_storage_from_data_pointer
_register = memory.register
_Tensor = torch.Tensor
_DEVICE_TYPE = "privateuseone"  # replaced by the backend's name at registration


def _is_device(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == _DEVICE_TYPE


# --- tensors over device storages ---


def wrap(
    storage: torch.UntypedStorage, size: Any, stride: Any, offset: int, dtype: torch.dtype
) -> torch.Tensor:
    """A device tensor viewing `storage` with the given geometry."""
    tensor = _create_empty([0], dtype)
    # set_ touches metadata only, so the CPU kernel is correct on a device tensor.
    _set_storage_handle.redispatch_boxed(CPU_KEYS, tensor, storage, offset, size, stride)
    return tensor


def host_alias(tensor: torch.Tensor, writable: bool = False) -> torch.Tensor:
    """A CPU tensor over the same bytes and geometry as a device tensor (no copy).

    A `writable` alias (for arguments an op writes) sits on a non-resizable storage over the
    same bytes: a CPU kernel that tried to grow it in place would free bytes the device
    storage still points at; instead it raises, and the fallback retries (see `fallback`).
    """
    ptr = tensor.untyped_storage().data_ptr()
    if ptr:
        live = _LIVE.get(ptr)
        owner = live.owner if live is not None else memory.host_storage(tensor.untyped_storage())
    else:
        # Empty tensors get a storage each: sharing one would make them alias one another.
        owner = torch.UntypedStorage(0)
    if writable:
        # Exactly the device storage's size: the owner may be larger (whole sticks).
        owner = torch._C._construct_storage_from_data_pointer(
            ptr, _CPU, tensor.untyped_storage().nbytes()
        )
    alias = _cpu_empty(0, dtype=tensor.dtype).set_(
        owner, tensor.storage_offset(), tensor.size(), tensor.stride()
    )
    # conj and neg bits are lazy views: without them fft and friends read the wrong values.
    if tensor.is_conj():
        torch._C._set_conj(alias, True)
    if tensor.is_neg():
        torch._C._set_neg(alias, True)
    return alias


_ALIASES = memory._ALIASES
_ALIASES_PER_STORAGE = 8


def read_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A cached host alias for an argument the CPU kernel only reads.

    Keyed by data pointer and geometry, dropped with the storage (see `memory._released`).
    Never hand one to a kernel that may resize or re-set its argument.
    """
    return read_alias_and_sticks(tensor)[0]


def alias_key(tensor: torch.Tensor) -> tuple[object, ...]:
    """The key of a tensor's cached host alias: where its data starts, and its geometry.

    Read from the tensor on every call, never remembered per tensor: a tensor's geometry
    can change in place (`transpose_`, `as_strided_`, `set_`, `resize_`, `x.data = y`, ...)
    without any kernel of this backend running. The data pointer fixes the storage and the
    offset in it: live device storages never overlap, so the pointer lies in one of them.
    A tensor with no elements has data pointer 0 and is never cached.
    """
    return (tensor.data_ptr(), tensor.dtype, tensor.size(), tensor.stride())


def read_alias_and_sticks(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """`read_alias` and the tensor's sticks (rule 1), cached together."""
    key = alias_key(tensor)
    known = _ALIASES.get(key)
    if known is not None:
        return known
    stats.fold_if_large()  # a new geometry may bring new counter keys (see stats._PENDING)
    live = _LIVE.get(tensor.untyped_storage().data_ptr()) if key[0] else None
    seed = live.seed if live is not None else None
    if (
        seed is not None
        and key[1:] == (seed.dtype, seed.size(), seed.stride())
        and not tensor.storage_offset()
        and not tensor.is_neg()
        and not tensor.is_conj()
    ):
        # The CPU result this storage was adopted from: an alias made already.
        alias = seed
    else:
        alias = host_alias(tensor)
    entry = (alias, _sticks(tensor.shape, tensor.dtype))
    # conj/neg bits are not in the key: tensors that carry one are not cached.
    if live is not None and not tensor.is_complex() and not tensor.is_neg():
        _remember_alias(live, key, entry)
    return entry


def _remember_alias(
    live: memory._Live, key: tuple[object, ...], entry: tuple[torch.Tensor, int]
) -> None:
    keys = live.alias_keys
    if keys is None:
        keys = live.alias_keys = []
    elif len(keys) >= _ALIASES_PER_STORAGE:
        for old in keys:
            _ALIASES.pop(old, None)
        keys.clear()
    keys.append(key)
    _ALIASES[key] = entry


def to_device(result: torch.Tensor) -> torch.Tensor:
    """The device tensor that takes over a CPU kernel's fresh result."""
    cpu_storage = result.untyped_storage()
    ptr = cpu_storage.data_ptr()
    device_storage = None
    if ptr:
        known = _LIVE.get(ptr)
        device_storage = known() if known is not None else None
    if device_storage is None:
        device_storage = memory.adopt(cpu_storage)
    tensor = wrap(
        device_storage, result.size(), result.stride(), result.storage_offset(), result.dtype
    )
    if result.is_conj():
        torch._C._set_conj(tensor, True)
    if result.is_neg():
        torch._C._set_neg(tensor, True)
    return tensor


def new_empty(size: Any, stride: Any, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised device tensor."""
    nbytes = 0
    if all(s > 0 for s in size):
        nbytes = 1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
        nbytes *= dtype.itemsize
    return wrap(memory.allocate(nbytes), size, stride, 0, dtype)


def _contiguous_strides(size: Any, memory_format: torch.memory_format | None) -> list[int]:
    # The CPU meta computation knows every memory format; ask it rather than re-derive.
    probe = torch.empty(
        size,
        dtype=torch.uint8,
        device="meta",
        memory_format=memory_format or torch.contiguous_format,
    )
    return list(probe.stride())


# --- explicit kernels ---


def empty_memory_format(
    size: Any,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    rules.check_dtype(dtype, "allocation")
    return new_empty(size, _contiguous_strides(size, memory_format), dtype)


def empty_strided(
    size: Any,
    stride: Any,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    rules.check_dtype(dtype, "allocation")
    return new_empty(size, stride, dtype)


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    src_on_device = _is_device(src)
    dst_on_device = _is_device(dst)
    if dst_on_device:
        rules.check_dtype(dst.dtype, "copy to the device")
    source = host_alias(src) if src_on_device else src
    target = host_alias(dst) if dst_on_device else dst
    target.copy_(source)
    sticks = rules.transfer_sticks(dst.shape, dst.element_size())
    if src_on_device and dst_on_device:
        stats.record_device_copy(sticks, dst.numel())
    elif dst_on_device:
        stats.record_transfer("h2d", sticks)
    else:
        stats.record_transfer("d2h", rules.transfer_sticks(src.shape, src.element_size()))
    return dst


def _copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != src.shape:
        dst.resize_(src.shape)
    return _copy_from(src, dst)


def resize_(
    tensor: torch.Tensor, size: Any, memory_format: torch.memory_format | None = None
) -> torch.Tensor:
    stride = _contiguous_strides(size, memory_format)
    numel = 1
    for s in size:
        numel *= s
    needed = (tensor.storage_offset() + numel) * tensor.element_size() if numel else 0
    storage = tensor.untyped_storage()
    kept = storage.nbytes()
    if needed > kept:
        fresh = memory.allocate(needed)
        if kept:
            # The owner may be larger than the device storage (whole sticks): copy its bytes.
            memory.host_storage(fresh)[:kept].copy_(memory.host_storage(storage)[:kept])
        storage = fresh
    _set_storage.redispatch(CPU_KEYS, tensor, storage, tensor.storage_offset(), size, stride)
    return tensor


def _local_scalar_dense(tensor: torch.Tensor) -> Any:
    stats.record_transfer("d2h", 1)
    return host_alias(tensor).item()


def _convolution_on_host(op: Any, *args: Any) -> Any:
    return fallback(op, *args)


# --- the fallback: registered per aten op (`kernel_for`), and boxed for the rest ---


@dataclass(frozen=True)
class OpPlan:
    """What the fallback does for one op overload, decided once."""

    name: str  # aten op name without namespace or overload: the key of every rule
    is_view: bool  # returns an alias of an input without writing: metadata only
    mutated: tuple[int | str, ...]  # positions / names of arguments the op writes
    unlowerable: bool
    fp16: bool  # in FP16_COMPUTE_OPS (whether it applies is a runtime switch)
    simple: bool  # functional, tensor-returning: eligible for the small-op path
    lean: bool  # simple and lowerable: nothing to check before the small-op path
    # A Python binding (`torch.add`) that runs this overload when every positional argument
    # is a tensor: an unboxed call, cheaper than the overload's boxed one (see `_binding_for`)
    binding: Callable[..., Any] | None = None


@functools.cache
def plan_for(op: torch._ops.OpOverload) -> OpPlan:
    """The cached per-op decisions of the fallback."""
    schema = op._schema
    name = schema.name.split("::", 1)[-1]
    is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    mutated: list[int | str] = []
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            mutated.append(argument.name if argument.kwarg_only else index)
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    simple = (
        not mutated
        and not is_view
        and base not in rules.FP16_COMPUTE_OPS
        and len(schema.returns) == 1
        and str(schema.returns[0].type) == "Tensor"
    )
    unlowerable = base in rules.UNLOWERABLE_OPS
    return OpPlan(
        name=base,
        is_view=is_view and not mutated,
        mutated=tuple(mutated),
        unlowerable=unlowerable,
        fp16=base in rules.FP16_COMPUTE_OPS,
        simple=simple,
        lean=simple and not unlowerable,
        binding=_binding_for(op) if simple else None,
    )


_BINDING_MODULES = ("_VariableFunctions", "_nn", "_special", "_linalg", "_fft")


class _Chosen(Exception):
    """Raised by `_ChosenOverload` once it has seen which overload a call dispatches to."""


class _ChosenOverload:
    """A bare dispatch mode (pushed with torch._C, no TorchDispatchMode: that class imports
    dynamo on first use) that records the first overload dispatched and stops the call."""

    def __init__(self) -> None:
        self.chosen: object = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.chosen = func
        raise _Chosen


def _chosen_overload(binding: Callable[..., Any], args: list[torch.Tensor]) -> object:
    recorder = _ChosenOverload()
    torch._C._push_on_torch_dispatch_stack(recorder)
    try:
        binding(*args)
    except _Chosen:
        pass
    finally:
        torch._C._pop_torch_dispatch_stack(None)
    return recorder.chosen


def _binding_for(op: torch._ops.OpOverload) -> Callable[..., Any] | None:
    """The Python binding that runs `op` whenever all its positional arguments are tensors.

    A binding (`torch.add`) picks its overload from the types of its arguments (a 0-dim
    tensor may stand for a Scalar), and may decompose before any overload runs. So it stands
    in for `op` only if, for every number of positional arguments the dispatcher may pass
    and every mix of 0-dim and other tensors among them, the overload it runs is `op`:
    checked once here on meta tensors, by recording the overload each call dispatches to.
    """
    schema = op._schema
    namespace, _, name = schema.name.partition("::")
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if (
        namespace != "aten"
        or not 0 < len(positional) <= 4
        or any(str(a.type) not in ("Tensor", "Tensor?") for a in positional)
    ):
        return None
    binding = next(
        (
            getattr(getattr(torch._C, module), name)
            for module in _BINDING_MODULES
            if hasattr(getattr(torch._C, module), name)
        ),
        None,
    )
    if binding is None:
        return None
    required = sum(1 for a in positional if not a.has_default_value())
    try:
        with torch._C.DisableTorchFunction():  # no user mode sees these calls
            for count in range(required, len(positional) + 1):
                for zero_dims in itertools.product((False, True), repeat=count):
                    tensors = [
                        torch.empty(() if zero else (2, 2), device="meta") for zero in zero_dims
                    ]
                    if _chosen_overload(binding, tensors) is not op:
                        return None
    except Exception:  # noqa: BLE001 - any failure to check means: no binding
        return None
    return binding


class _Call:
    """One fallback call: maps device arguments to host aliases and results back."""

    __slots__ = ("aliases", "sticks", "elements")

    def __init__(self) -> None:
        self.aliases: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.sticks = 0
        self.elements = 0

    def to_host(self, value: Any, writable: bool = False) -> Any:
        if isinstance(value, torch.Tensor):
            if value.device.type != _DEVICE_TYPE:
                return value
            if writable:
                alias = host_alias(value, writable=True)
                self.sticks += _sticks(value.shape, value.dtype)
            else:
                alias, sticks = read_alias_and_sticks(value)
                self.sticks += sticks
            self.aliases[id(alias)] = (value, alias)
            return alias
        if (
            isinstance(value, (list, tuple))
            and value
            and any(isinstance(v, torch.Tensor) for v in value)
        ):
            return type(value)(self.to_host(v, writable) for v in value)
        if isinstance(value, torch.device) and value.type == _DEVICE_TYPE:
            return _CPU
        return value

    def to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            known = self.aliases.get(id(value))
            if known is not None:
                return known[0]
            rules.check_dtype(value.dtype, "op result")
            self.sticks += _sticks(value.shape, value.dtype)
            self.elements += value.numel()
            return to_device(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.to_device(v) for v in value)
        return value

    def fresh(self, device_value: Any, host_value: Any) -> Any:
        """A fresh, growable host tensor standing in for a written device argument."""
        if (
            isinstance(device_value, torch.Tensor)
            and isinstance(host_value, torch.Tensor)
            and (id(host_value) in self.aliases)
        ):
            del self.aliases[id(host_value)]
            replacement = torch.empty(0, dtype=device_value.dtype)
            self.aliases[id(replacement)] = (device_value, replacement)
            return replacement
        if isinstance(device_value, (list, tuple)) and isinstance(host_value, (list, tuple)):
            return type(host_value)(
                self.fresh(d, h) for d, h in zip(device_value, host_value, strict=True)
            )
        return host_value

    def sync_mutated(self) -> None:
        """Re-point device tensors whose host alias a CPU kernel resized or re-set."""
        for device_tensor, alias in self.aliases.values():
            if (
                alias.untyped_storage().data_ptr() == device_tensor.untyped_storage().data_ptr()
                and alias.shape == device_tensor.shape
                and alias.stride() == device_tensor.stride()
                and alias.storage_offset() == device_tensor.storage_offset()
            ):
                continue
            cpu_storage = alias.untyped_storage()
            storage = (
                memory.device_storage_for(cpu_storage.data_ptr())
                if (cpu_storage.data_ptr())
                else None
            )
            if storage is None:
                storage = memory.adopt(cpu_storage)
            _set_storage.redispatch(
                CPU_KEYS,
                device_tensor,
                storage,
                alias.storage_offset(),
                alias.size(),
                alias.stride(),
            )


def _run_on_host(
    op: torch._ops.OpOverload, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if plan.fp16 and rules.fp16_compute_applies(plan.name):
        stats.count_fp16()
        return _fp16_call(op, plan, args, kwargs)
    try:
        return op._op(*args, **kwargs)
    except RuntimeError as error:
        return _with_scalars(op, error, args, kwargs)


def _with_scalars(
    op: torch._ops.OpOverload, error: RuntimeError, args: Any, kwargs: dict[str, Any]
) -> Any:
    """Retry a call whose Python-number argument stands where the overload wants a Tensor.

    A wrapped number (`x % 2.5`) reaches a boxed fallback as a plain Python number, and the
    Tensor overload refuses it. The overload packet picks the Scalar overload, which gives
    the wrapped-number type promotion the original call had.
    """
    if "Expected a value of type 'Tensor'" not in str(error):
        raise error
    return op.overloadpacket(*args, **kwargs)


def _fp16_call(
    op: torch._ops.OpOverload, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run a matmul-family op or softmax in float16 and hand back the requested dtype."""

    def narrow(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float32, torch.bfloat16):
            return value.to(torch.float16)
        return value

    written: list[tuple[torch.Tensor, torch.Tensor]] = []

    def narrow_written(value: Any) -> Any:
        result = narrow(value)
        if result is not value:
            written.append((value, result))
        return result

    new_args = list(args)
    for index, value in enumerate(args):
        new_args[index] = narrow_written(value) if index in plan.mutated else narrow(value)
    new_kwargs = {
        k: narrow_written(v) if k in plan.mutated else narrow(v) for k, v in kwargs.items()
    }
    requested = next(
        (v.dtype for v in args if isinstance(v, torch.Tensor) and v.is_floating_point()),
        torch.float32,
    )
    result = op(*new_args, **new_kwargs)
    for original, narrowed in written:
        original.copy_(narrowed)
    if written:
        return _replace_written(result, written)
    if isinstance(result, torch.Tensor) and result.dtype == torch.float16 != requested:
        return result.to(requested)
    return result


def _replace_written(result: Any, written: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    by_id = {id(narrowed): original for original, narrowed in written}
    if isinstance(result, torch.Tensor):
        return by_id.get(id(result), result)
    if isinstance(result, (list, tuple)):
        return type(result)(by_id.get(id(r), r) for r in result)
    return result


def fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """Run any aten op on the device: rules first, then the CPU kernel on host aliases."""
    # Keyed by id: OpOverload hashes in Python. The overloads live as long as torch.ops.
    entry = _PLANS.get(id(op))
    if entry is None or entry[0] is not op:
        entry = _PLANS[id(op)] = (op, plan_for(op))
    plan = entry[1]
    if plan.lean and not kwargs:
        fast = _fast_call(op, plan, args)
        if fast is not _NOT_SIMPLE:
            return fast
    return _checked_call(op, plan, args, kwargs)


def kernel_for(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """`fallback` bound to one overload: registered as that overload's own kernel, it
    skips the plan table (its plan is looked up on the first call and kept).

    With the compiled small-op path built, the kernel is its `Kernel`, which does the same
    in C; either calls whatever `_fast_call` names when it is called."""
    name = f"spyre_kernel_{op.__name__.replace('.', '_')}"
    if _fastpath is not None:
        return _fastpath.Kernel(op, globals(), plan_for, _checked_call, name)
    plan: OpPlan | None = None

    def kernel(*args: Any, **kwargs: Any) -> Any:
        nonlocal plan
        if plan is None:
            plan = plan_for(op)
        if plan.lean and not kwargs:
            fast = _fast_call(op, plan, args)
            if fast is not _NOT_SIMPLE:
                return fast
        return _checked_call(op, plan, args, kwargs)

    kernel.__qualname__ = kernel.__name__ = name
    return kernel


def _checked_call(
    op: torch._ops.OpOverload, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Everything but a lean small op: views, rules, then the generic call (or the
    small-op path, once the rules allow it)."""
    if plan.is_view:
        # Views only compute geometry; the CPU kernel does that on the device tensor.
        return op._handle.redispatch_boxed(CPU_KEYS, *args, **kwargs)
    if plan.unlowerable and not rules.SWITCHES.permissive:
        stats.record_rejected(plan.name)
        rules.check_op(plan.name, args)
    if plan.simple and not plan.lean and not kwargs:
        fast = _fast_call(op, plan, args)
        if fast is not _NOT_SIMPLE:
            return fast
    return _generic_call(op, plan, args, kwargs)


def _generic_call(
    op: torch._ops.OpOverload, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Any call: every device argument to its host alias, the CPU kernel, results back."""
    call = _Call()
    mutated = plan.mutated
    host_args = tuple(call.to_host(a, i in mutated) for i, a in enumerate(args))
    host_kwargs = (
        {k: call.to_host(v, k in mutated) for k, v in kwargs.items()} if kwargs else kwargs
    )
    try:
        result = _run_on_host(op, plan, host_args, host_kwargs)
    except RuntimeError as error:
        if not mutated or "not resizable" not in str(error):
            raise
        # The kernel grows an argument it writes (an out= tensor of the wrong size): let it
        # write fresh host tensors, which sync_mutated then adopts as device memory.
        host_args = tuple(
            call.fresh(a, host) if i in mutated else host
            for i, (a, host) in enumerate(zip(args, host_args, strict=True))
        )
        host_kwargs = {
            k: call.fresh(kwargs[k], v) if k in mutated else v for k, v in host_kwargs.items()
        }
        result = _run_on_host(op, plan, host_args, host_kwargs)
    if mutated:
        call.sync_mutated()
    out = call.to_device(result)
    stats.record_op(plan.name, call.sticks, call.elements, _flops(plan.name, host_args))
    return out


_PLANS: dict[int, tuple[torch._ops.OpOverload, OpPlan]] = {}
_NOT_SIMPLE = object()
_sticks = rules.cached_transfer_sticks


def _fast_call_python(op: torch._ops.OpOverload, plan: OpPlan, args: tuple[Any, ...]) -> Any:
    """The small-op path: positional tensors, scalars and int lists in, one tensor out.

    Does what the generic path does for these calls (same aliases, rules, counters) with
    less Python per call; `tests/backend_under_test/test_fast_path.py` compares the two.
    When every argument is a tensor and `plan.binding` stands in for the overload, the CPU
    kernel is called through that binding (unboxed) instead of the overload's boxed call.
    """
    host_args = list(args)
    sticks = 0
    index = -1
    binding = plan.binding
    for value in args:
        index += 1
        if isinstance(value, _Tensor):
            if value.is_cpu:
                continue
            # read_alias_and_sticks, with its cache hit inlined (it is most of the calls);
            # `.shape` is `.size()` without the bound-method call
            known = _ALIASES.get((value.data_ptr(), value.dtype, value.shape, value.stride()))
            if known is None:
                known = read_alias_and_sticks(value)
            host_args[index] = known[0]
            sticks += known[1]
        elif (
            isinstance(value, (list, tuple))
            and value
            and any(isinstance(v, _Tensor) for v in value)
        ):
            return _NOT_SIMPLE
        else:
            binding = None  # checked for tensors only
    if binding is not None:
        result = binding(*host_args)
    else:
        try:
            result = op._op(*host_args)
        except RuntimeError as error:
            result = _with_scalars(op, error, host_args, {})
    if type(result) is not _Tensor:
        return _finish_other(plan, args, host_args, result, sticks)
    dtype = result.dtype
    shape = result.shape
    meta = _RESULTS.get((shape, dtype)) or _result_meta(shape, dtype)
    if meta[3]:
        rules.check_dtype(dtype, "op result")
    # `to_device`, for the common result (fresh, contiguous, at offset 0, no lazy bits) made
    # cheaply: instead of a device tensor re-set to a new device storage (a boxed `set_`, the
    # dearest step of `to_device`), the device tensor is made with the result's shape and its
    # empty storage takes over the bytes (`_swap_data_ptr_`). The result is kept as the
    # *seed* of the new tensor's host alias (see `read_alias_and_sticks`).
    ptr = result.data_ptr()
    if (
        not ptr
        or result.stride() != meta[0]  # also refuses size-1 dimensions with other strides
        or result.storage_offset()
        or ptr in _LIVE
        or result.is_neg()
        or (meta[4] and result.is_conj())
    ):
        out = to_device(result)
    else:
        # At offset 0 the data pointer is the storage's. The device storage covers the
        # result's bytes (meta[5]); the seed keeps its whole CPU storage alive.
        out = _create_empty(shape, dtype)
        storage = out.untyped_storage()
        storage._swap_data_ptr_(_from_data_pointer(ptr, _DEVICE, meta[5]))
        _register(ptr, None, storage, meta[5]).seed = result
    _PENDING_OPS[(plan.name, sticks + meta[1], meta[2], 0.0)] += 1  # stats.record_op
    return out


# (strides create_empty_tensor gives the shape, sticks, elements, refused dtype, complex,
# bytes)
_ResultMeta = tuple[tuple[int, ...], int, int, bool, bool, int]
_RESULTS: dict[tuple[torch.Size, torch.dtype], _ResultMeta] = {}
_RESULTS_LIMIT = 4096
_PENDING_OPS = stats._PENDING


def _result_meta(shape: torch.Size, dtype: torch.dtype) -> _ResultMeta:
    """What the small-op path needs to know of a result shape and dtype, computed once."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    numel = step
    meta = (
        tuple(reversed(strides)),
        _sticks(shape, dtype),
        numel,
        dtype in _REFUSED,
        dtype.is_complex,
        numel * dtype.itemsize,
    )
    if len(_RESULTS) >= _RESULTS_LIMIT:
        _RESULTS.clear()
    _RESULTS[(shape, dtype)] = meta
    stats.fold_if_large()
    return meta


def _finish_other(
    plan: OpPlan, args: tuple[Any, ...], host_args: list[Any], result: Any, sticks: int
) -> Any:
    call = _Call()
    call.sticks = sticks
    out = call.to_device(result)
    stats.record_op(plan.name, call.sticks, call.elements, 0.0)
    return out


_REFUSED = frozenset(d for d in (torch.float64, torch.complex32, torch.complex64, torch.complex128))


def _flops(name: str, args: tuple[Any, ...]) -> float:
    """Multiply-adds of the matmul family (0 for everything else)."""
    if name in ("mm", "addmm", "bmm", "baddbmm", "addbmm"):
        a, b = (args[0], args[1]) if name in ("mm", "bmm") else (args[1], args[2])
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() >= 2:
            batch = a.shape[0] if a.dim() == 3 else 1
            return 2.0 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
    return 0.0


# The small-op path, compiled where `pip install` built it (see `compiled.py`):
# `_fastpath.fast_call` is `_fast_call_python` without the interpreter.
_fastpath = compiled.FASTPATH
if _fastpath is not None:
    _fastpath.configure(
        Tensor=_Tensor,
        aliases=_ALIASES,
        live=_LIVE,
        results=_RESULTS,
        pending=_PENDING_OPS,
        not_simple=_NOT_SIMPLE,
        device=_DEVICE,
        read_alias_and_sticks=read_alias_and_sticks,
        with_scalars=_with_scalars,
        finish_other=_finish_other,
        result_meta=_result_meta,
        check_dtype=rules.check_dtype,
        to_device=to_device,
        create_empty=_create_empty,
        from_data_pointer=_from_data_pointer,
        register=_register,
    )
    _fast_call = _fastpath.fast_call
else:
    _fast_call = _fast_call_python
