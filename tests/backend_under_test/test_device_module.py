"""torch.spyre: the device module."""

from __future__ import annotations

import torch

import backend_under_test


def test_module_basics() -> None:
    assert backend_under_test.is_registered()
    assert torch.spyre.is_available()
    assert torch.spyre.device_count() == 1
    assert torch.spyre.current_device() == 0
    torch.spyre.synchronize()
    assert torch.spyre.get_device_properties()["cores"] == 32
    with torch.spyre.device(0):
        assert torch.ones(1, device="spyre").device.index == 0


def test_streams_and_events_are_emulated_synchronously() -> None:
    stream = torch.spyre.Stream()
    assert stream != torch.spyre.default_stream()
    with torch.spyre.stream(stream):
        assert torch.spyre.current_stream() is stream
        start = torch.spyre.Event(enable_timing=True)
        end = torch.spyre.Event(enable_timing=True)
        start.record()
        y = torch.ones(32, 32, device="spyre") * 2
        end.record()
    assert torch.spyre.current_stream() is torch.spyre.default_stream()
    assert stream.query() and end.query()
    end.synchronize()
    stream.synchronize()
    assert start.elapsed_time(end) >= 0.0
    assert y.sum().item() == 2048


def test_stats_keys() -> None:
    torch.spyre.reset_stats()
    torch.ones(4, device="spyre").add(1).cpu()
    snapshot = torch.spyre.stats()
    for key in (
        "ops_executed",
        "ops_by_name",
        "estimated_kernel_time_us",
        "op_sticks",
        "h2d_sticks",
        "d2h_sticks",
        "allocated_bytes",
        "peak_allocated_bytes",
        "fp16_compute_ops",
        "rejected_ops",
        "compiled_graphs",
        "permissive",
    ):
        assert key in snapshot
    assert snapshot["ops_executed"] >= 1 and snapshot["d2h_transfers"] == 1


def test_manual_seed_makes_device_randomness_repeatable() -> None:
    torch.manual_seed(3)
    first = torch.randn(4, device="spyre").cpu()
    torch.manual_seed(3)
    assert torch.equal(torch.randn(4, device="spyre").cpu(), first)
