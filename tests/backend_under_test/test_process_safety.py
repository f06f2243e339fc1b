"""Registration by a plain `import torch`, the crash cases, and memory release.

Crash cases run in a subprocess: a segfault must fail the test, not end the test run.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import torch

from tests.testing.paths import REPO_ROOT


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT,
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_plain_import_torch_registers_the_device() -> None:
    result = _run("""
        import sys
        import torch
        assert "backend_under_test" in sys.modules
        print(torch.randn(2).to("spyre").device, torch.spyre.is_available())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "spyre:0 True"


def test_explicit_import_without_autoload() -> None:
    result = _run(
        """
        import backend_under_test, torch
        print(torch.ones(1).to("spyre").device)
    """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "spyre:0"


def test_upstream_device_type_tests_see_the_device() -> None:
    result = _run("""
        import torch
        from torch.testing._internal import common_device_type as cdt
        bases = [b.__name__ for b in cdt.get_device_type_test_bases()]
        assert "PrivateUse1TestBase" in bases, bases
        cdt.PrivateUse1TestBase.setUpClass()
        print(cdt.PrivateUse1TestBase.device_type, cdt.PrivateUse1TestBase.primary_device)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "spyre spyre:0"


def test_crash_cases_do_not_crash() -> None:
    result = _run("""
        import copy, io
        import torch
        storage = torch.UntypedStorage(16, device="spyre")
        clone = copy.deepcopy(storage)
        x = torch.arange(6.0).reshape(2, 3).to("spyre")
        y = copy.deepcopy(x)
        text = str(x) + repr(y) + str(x[0]) + str(torch.empty(0, device="spyre"))
        buffer = io.BytesIO()
        torch.save([x, y.t()], buffer)
        buffer.seek(0)
        a, b = torch.load(buffer)
        model = torch.nn.Linear(3, 2).to("spyre")
        twin = copy.deepcopy(model)
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        buffer.seek(0)
        twin.load_state_dict(torch.load(buffer))
        assert torch.equal(b.cpu(), x.cpu().t()) and clone.device.type == "spyre"
        print("survived", "device='spyre:0'" in text)
    """)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert result.stdout.strip() == "survived True"


def test_memory_is_released_over_10000_allocations() -> None:
    torch.spyre.synchronize()
    # Garbage an earlier test of this process left (cycles) would be freed mid-loop and
    # read as the loop giving memory back: collect it before the count starts.
    gc.collect()
    before = torch.spyre.memory_allocated()
    host = torch.ones(8, 8)
    for _ in range(10_000):
        x = host.to("spyre")
        y = x * 2
        del x, y
    assert torch.spyre.memory_allocated() == before


def test_peak_memory_and_reset() -> None:
    gc.collect()  # as above
    before = torch.spyre.memory_allocated()
    torch.spyre.reset_peak_memory_stats()
    big = torch.empty(1024, device="spyre")
    assert torch.spyre.max_memory_allocated() >= before + 4096
    del big
    assert torch.spyre.memory_allocated() == before
    assert torch.spyre.max_memory_allocated() >= before + 4096
    torch.spyre.reset_peak_memory_stats()
    assert torch.spyre.max_memory_allocated() == before


def test_collector_freed_tensors_do_not_deadlock_the_allocator() -> None:
    # Device tensors in reference cycles are freed by the garbage collector, which can run
    # while the allocator holds its lock; the release callback must not wait on it.
    result = _run("""
        import gc
        import torch
        for _ in range(3000):
            cycle = [torch.ones(4).to("spyre")]
            cycle.append(cycle)
            del cycle
        gc.collect()
        print(torch.spyre.memory_allocated())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
