"""A pytest plugin that breaks the device mid-session, as a hardware fault leaves a real one
(stuck, every transfer failing): after `$BREAK_AFTER` tests, every read or write of device
memory raises. Loaded through PYTEST_PLUGINS by the device-fault guard's test."""

import os

_seen = [0]


def pytest_runtest_teardown(item, nextitem):  # type: ignore[no-untyped-def]
    _seen[0] += 1
    if _seen[0] != int(os.environ.get("BREAK_AFTER", "2")):
        return
    from backend_under_test import kernels

    def stuck(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("device stuck: DMA timeout")

    kernels.host_alias = stuck
    kernels.read_alias = stuck
    kernels.read_alias_and_sticks = stuck
