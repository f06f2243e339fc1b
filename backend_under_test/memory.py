"""Device memory of the emulated Spyre: host bytes behind non-owning `spyre` storages.

Every device storage is built by `torch._C._construct_storage_from_data_pointer` over bytes
that a CPU storage (the *owner*) holds. The owner is kept in a table keyed by the data
pointer and released by a weak-reference callback on the device storage, so device memory lives
exactly as long as PyTorch's own reference counting says. Because the owner is an ordinary
CPU storage, a CPU *alias* of any device tensor is a `set_` away: kernels run on aliases
without copying.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch

from backend_under_test import rules

DEVICE = torch.device("privateuseone", 0)


@dataclass
class MemoryCounters:
    """Allocator counters, in bytes rounded up to whole sticks (what the device would hold)."""

    allocated: int = 0
    peak: int = 0
    allocations: int = 0
    frees: int = 0


COUNTERS = MemoryCounters()
# Re-entrant: a weak-reference callback (which takes it) can fire inside a locked block,
# when the garbage collector runs during a dict update.
_LOCK = threading.RLock()
# data pointer -> CPU storage that owns the bytes of a live device storage.
_OWNERS: dict[int, torch.UntypedStorage] = {}
# data pointer -> the device storage over those bytes (weak: the tensors keep it alive).
_DEVICE_STORAGES: dict[int, weakref.ref[torch.UntypedStorage]] = {}
_EMPTY_CPU = torch.UntypedStorage(0)
# data pointer -> {geometry: (cached CPU alias, its sticks)}; filled by kernels.read_alias.
_ALIASES: dict[int, dict[tuple[object, ...], tuple[torch.Tensor, int]]] = {}


class _Release:
    """Weak-reference callback: frees the host bytes when the device storage dies.

    A callback on the weak reference the table keeps anyway costs less than a separate
    `weakref.finalize` on the small-op path.
    """

    __slots__ = ("ptr", "charged")

    def __init__(self, ptr: int, charged: int) -> None:
        self.ptr = ptr
        self.charged = charged

    def __call__(self, _dead: object) -> None:
        ptr = self.ptr
        _LOCK.acquire()  # not `with`: this runs for every freed op result
        try:
            _OWNERS.pop(ptr, None)
            _DEVICE_STORAGES.pop(ptr, None)
            _ALIASES.pop(ptr, None)
            COUNTERS.allocated -= self.charged
            COUNTERS.frees += 1
        finally:
            _LOCK.release()


def _wrap_owner(owner: torch.UntypedStorage, nbytes: int) -> torch.UntypedStorage:
    """A device storage over `owner`'s bytes; the owner lives until that storage dies."""
    ptr = owner.data_ptr()
    if nbytes == 0 or ptr == 0:
        return torch._C._construct_storage_from_data_pointer(0, DEVICE, 0)
    known = _DEVICE_STORAGES.get(ptr)
    if known is not None:
        existing = known()
        if existing is not None:
            return existing
    storage = torch._C._construct_storage_from_data_pointer(ptr, DEVICE, nbytes)
    register(ptr, owner, storage, nbytes)
    return storage


def register(
    ptr: int, owner: torch.UntypedStorage, storage: torch.UntypedStorage, nbytes: int
) -> None:
    """Record `storage` (a device storage of `nbytes` over `owner`'s bytes at `ptr`) as live.

    The owner is kept until the device storage dies; the device is charged whole sticks.
    """
    charged = -(-nbytes // rules.STICK_BYTES) * rules.STICK_BYTES
    _LOCK.acquire()  # not `with`: this runs for every op result, and `with` costs more
    try:
        _OWNERS[ptr] = owner
        _DEVICE_STORAGES[ptr] = weakref.ref(storage, _Release(ptr, charged))
        COUNTERS.allocated += charged
        COUNTERS.allocations += 1
        if COUNTERS.allocated > COUNTERS.peak:
            COUNTERS.peak = COUNTERS.allocated
    finally:
        _LOCK.release()


def allocate(nbytes: int) -> torch.UntypedStorage:
    """A new device storage of `nbytes` (the device is charged whole sticks)."""
    owner = torch.UntypedStorage(rules.stick_bytes(nbytes))
    return _wrap_owner(owner, nbytes)


def adopt(cpu_storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """The device storage that takes over a CPU storage a kernel just produced (no copy)."""
    return _wrap_owner(cpu_storage, cpu_storage.nbytes())


def host_storage(device_storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """The CPU storage holding the bytes of a device storage."""
    ptr = device_storage.data_ptr()
    if ptr == 0:
        return _EMPTY_CPU
    owner = _OWNERS.get(ptr)
    if owner is None:
        raise RuntimeError(
            f"spyre storage at 0x{ptr:x} has no host bytes: it was not made by the spyre "
            "allocator (report this as a backend bug)"
        )
    return owner


def device_storage_for(ptr: int) -> torch.UntypedStorage | None:
    """The live device storage whose bytes start at `ptr`, if any."""
    known = _DEVICE_STORAGES.get(ptr)
    return known() if known is not None else None


def reset_peak() -> None:
    """Start peak tracking again from the current allocation."""
    with _LOCK:
        COUNTERS.peak = COUNTERS.allocated
