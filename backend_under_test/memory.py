"""Device memory of the emulated Spyre: host bytes behind non-owning `spyre` storages.

Every device storage is built by `torch._C._construct_storage_from_data_pointer` over bytes
that a CPU storage (the *owner*) holds. One table, keyed by the data pointer, holds a `_Live`
entry per live device storage: a weak reference to the device storage that also carries its
owner. The reference's callback drops the entry (and with it the owner) when PyTorch frees
the device storage, so device memory lives exactly as long as PyTorch's own reference
counting says. Because the owner is an ordinary CPU storage, a CPU *alias* of any device
tensor is a `set_` away: kernels run on aliases without copying.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch

from backend_under_test import compiled, rules

DEVICE = torch.device("privateuseone", 0)


@dataclass
class MemoryCounters:
    """Allocator counters, in bytes rounded up to whole sticks (what the device would hold)."""

    allocated: int = 0
    peak: int = 0
    allocations: int = 0
    frees: int = 0


COUNTERS = MemoryCounters()
# Taken by `reset_peak` and the stats snapshot only. Registering and releasing storages run
# for every op result and take no lock: each counter update there is one statement with no
# call in it, which the GIL never splits, and a release callback that the garbage collector
# runs in the middle of `register` can only fall between two such statements.
_LOCK = threading.RLock()


class _Live(weakref.ref[torch.UntypedStorage]):
    """A live device storage: a weak reference to it, with what its death releases.

    `owner` is the CPU storage holding the bytes (kept alive by this entry); `charged` the
    bytes the device is charged (whole sticks); `alias_keys` the host-alias cache keys made
    over these bytes (see `kernels.read_alias_and_sticks`), dropped with the storage; `seed`
    the CPU tensor a kernel returned, when the device storage adopted its bytes (it is the
    host alias of the device tensor made for it). An entry with a seed keeps the seed only
    (`stored_owner` is None): the seed holds the bytes, and `owner` is its storage.
    """

    __slots__ = ("ptr", "stored_owner", "charged", "alias_keys", "seed")
    ptr: int
    stored_owner: torch.UntypedStorage | None
    charged: int
    alias_keys: list[tuple[object, ...]] | None
    seed: torch.Tensor | None

    @property
    def owner(self) -> torch.UntypedStorage:
        owner = self.stored_owner
        if owner is None:
            assert self.seed is not None, "a live entry has an owner or a seed"
            owner = self.seed.untyped_storage()
        return owner


# data pointer -> the live device storage over the bytes there (and their owner).
_LIVE: dict[int, _Live] = {}
# The same table under the name other tools read (membership: "is this a device pointer").
_OWNERS = _LIVE
_EMPTY_CPU = torch.UntypedStorage(0)
# (data pointer, dtype, size, stride) -> (cached CPU alias, its sticks);
# filled by kernels.read_alias_and_sticks, entries dropped with their storage.
_ALIASES: dict[tuple[object, ...], tuple[torch.Tensor, int]] = {}


def _released(entry: _Live) -> None:
    """Weak-reference callback: the device storage died; free its bytes and aliases."""
    ptr = entry.ptr
    if _LIVE.get(ptr) is entry:  # a newer storage may have taken the pointer meanwhile
        del _LIVE[ptr]
    keys = entry.alias_keys
    if keys:
        for key in keys:
            _ALIASES.pop(key, None)
    COUNTERS.allocated -= entry.charged
    COUNTERS.frees += 1


def _wrap_owner(owner: torch.UntypedStorage, nbytes: int) -> torch.UntypedStorage:
    """A device storage over `owner`'s bytes; the owner lives until that storage dies."""
    ptr = owner.data_ptr()
    if nbytes == 0 or ptr == 0:
        return torch._C._construct_storage_from_data_pointer(0, DEVICE, 0)
    known = _LIVE.get(ptr)
    if known is not None:
        existing = known()
        if existing is not None:
            return existing
    storage = torch._C._construct_storage_from_data_pointer(ptr, DEVICE, nbytes)
    register(ptr, owner, storage, nbytes)
    return storage


def register(
    ptr: int, owner: torch.UntypedStorage | None, storage: torch.UntypedStorage, nbytes: int
) -> _Live:
    """Record `storage` (a device storage of `nbytes` over `owner`'s bytes at `ptr`) as live.

    The owner is kept until the device storage dies; the device is charged whole sticks. With
    no owner, the caller sets the entry's `seed`, which holds the bytes.
    """
    entry = _Live(storage, _released)
    entry.ptr = ptr
    entry.stored_owner = owner
    charged = entry.charged = -(-nbytes // rules.STICK_BYTES) * rules.STICK_BYTES
    entry.alias_keys = entry.seed = None
    _LIVE[ptr] = entry
    counters = COUNTERS
    counters.allocations += 1
    allocated = counters.allocated = counters.allocated + charged
    if allocated > counters.peak:
        counters.peak = allocated
    return entry


# The live entries, the counters, `register` and `_released` work for every op result:
# compiled where `pip install` built them (see `compiled.py`), else the Python versions above.
_fastpath = compiled.FASTPATH
if _fastpath is not None:
    COUNTERS = _fastpath.MemoryCounters()
    _Live = _fastpath.Live  # type: ignore[misc]  # noqa: F811
    _fastpath.configure_memory(
        counters=COUNTERS, live=_LIVE, aliases=_ALIASES, stick_bytes=rules.STICK_BYTES
    )
    register = _fastpath.register  # noqa: F811
    _released = _fastpath.released  # noqa: F811


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
    entry = _LIVE.get(ptr)
    if entry is None:
        raise RuntimeError(
            f"spyre storage at 0x{ptr:x} has no host bytes: it was not made by the spyre "
            "allocator (report this as a backend bug)"
        )
    return entry.owner


def device_storage_for(ptr: int) -> torch.UntypedStorage | None:
    """The live device storage whose bytes start at `ptr`, if any."""
    entry = _LIVE.get(ptr)
    return entry() if entry is not None else None


def reset_peak() -> None:
    """Start peak tracking again from the current allocation."""
    with _LOCK:
        COUNTERS.peak = COUNTERS.allocated
