"""`torch.spyre`: the device module of the emulated Spyre (what `torch.cuda` is for CUDA).

Execution is synchronous: every kernel has finished when its Python call returns. Streams and
events therefore emulate ordering trivially: `Stream.synchronize`, `Event.synchronize` and
`wait_*` return at once, `query()` is always True, and `Event.elapsed_time` measures host
wall time between two `record()` calls (the estimated device time is in `stats()`).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from typing import Any

import torch

from backend_under_test import memory, rules
from backend_under_test import stats as _stats

DEVICE_NAME = "spyre"
_stream_ids = itertools.count(1)


def is_available() -> bool:
    """The emulated device is always there."""
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def _lazy_init() -> None:
    """Nothing to initialise lazily; present because torch's helpers call it."""


def device_count() -> int:
    """One emulated card."""
    return 1


def current_device() -> int:
    return 0


def set_device(device: int | str | torch.device) -> None:
    """Only device 0 exists."""
    index = _index(device)
    if index != 0:
        raise ValueError(f"spyre device {index} does not exist: the emulator has one device (0)")


def _index(device: int | str | torch.device | None) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index or 0


def get_device_name(device: int | str | torch.device | None = None) -> str:
    return "IBM Spyre (emulated on the host CPU)"


def get_device_properties(device: int | str | torch.device | None = None) -> dict[str, Any]:
    """The modelled hardware facts (see backend_under_test/README.md)."""
    return {
        "name": get_device_name(device),
        "cores": rules.CORES,
        "scratchpad_bytes_per_core": rules.SCRATCHPAD_BYTES,
        "stick_bytes": rules.STICK_BYTES,
        "compute_dtypes": [str(d) for d in rules.SUPPORTED_FLOAT_DTYPES],
    }


@contextlib.contextmanager
def device(device: int | str | torch.device | None) -> Iterator[None]:
    """Context manager selecting a device; only device 0 exists."""
    set_device(device if device is not None else 0)
    yield


def synchronize(device: int | str | torch.device | None = None) -> None:
    """Wait for all kernels: a no-op, since every kernel runs synchronously."""


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


# --- random numbers: the emulator has no device generator; it uses the CPU generator ----


def manual_seed(seed: int) -> None:
    torch.random.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    torch.random.default_generator.seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return int(torch.random.default_generator.initial_seed())


def get_rng_state(device: int | str | torch.device = "spyre") -> torch.Tensor:
    return torch.random.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "spyre") -> None:
    torch.random.default_generator.set_state(new_state)


# --- memory ---


def memory_allocated(device: int | str | torch.device | None = None) -> int:
    """Bytes held by live device storages (whole sticks)."""
    return memory.COUNTERS.allocated


def max_memory_allocated(device: int | str | torch.device | None = None) -> int:
    """Peak of `memory_allocated` since start or the last `reset_peak_memory_stats`."""
    return memory.COUNTERS.peak


def reset_peak_memory_stats(device: int | str | torch.device | None = None) -> None:
    memory.reset_peak()


def empty_cache() -> None:
    """Freed memory goes back to the host at once: nothing is cached."""


def stats() -> dict[str, Any]:
    """All device counters: ops, estimated kernel time, sticks, transfers, memory."""
    return _stats.snapshot()


def reset_stats() -> None:
    """Zero the op and transfer counters and restart peak-memory tracking."""
    _stats.reset()


# --- streams and events ---


class Stream:
    """An emulated stream: work is ordered because it runs synchronously."""

    def __init__(
        self,
        device: int | str | torch.device | None = None,
        priority: int = 0,
        stream_id: int | None = None,
    ) -> None:
        self.device = torch.device(DEVICE_NAME, _index(device))
        self.priority = priority
        self.stream_id = next(_stream_ids) if stream_id is None else stream_id

    def synchronize(self) -> None:
        """Nothing is ever pending."""

    def query(self) -> bool:
        return True

    def wait_event(self, event: Event) -> None:
        """Events are complete when recorded."""

    def wait_stream(self, stream: Stream) -> None:
        """Streams never have pending work."""

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash((DEVICE_NAME, self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.spyre.Stream device={self.device} stream_id={self.stream_id}>"


# Built on first use: the backend's name is not registered yet when this module loads.
_DEFAULT_STREAM: Stream | None = None
_current_stream: Stream | None = None


def default_stream(device: int | str | torch.device | None = None) -> Stream:
    global _DEFAULT_STREAM
    if _DEFAULT_STREAM is None:
        _DEFAULT_STREAM = Stream(stream_id=0)
    return _DEFAULT_STREAM


def current_stream(device: int | str | torch.device | None = None) -> Stream:
    return _current_stream or default_stream()


def set_stream(stream: Stream) -> None:
    global _current_stream
    _current_stream = stream


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    """Make `stream` current inside the block (ordering is trivially kept)."""
    global _current_stream
    previous = current_stream()
    if stream is not None:
        _current_stream = stream
    try:
        yield
    finally:
        _current_stream = previous


class Event:
    """An emulated event: complete as soon as recorded; timing is host wall time."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        self._recorded_ns: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        self._recorded_ns = time.perf_counter_ns()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Recorded work has always finished."""

    def wait(self, stream: Stream | None = None) -> None:
        """Nothing to wait for."""

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds of host time between this event's and `end_event`'s record()."""
        if self._recorded_ns is None or end_event._recorded_ns is None:
            raise RuntimeError("both events must be recorded before elapsed_time()")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time() needs events created with enable_timing=True")
        return (end_event._recorded_ns - self._recorded_ns) / 1e6
