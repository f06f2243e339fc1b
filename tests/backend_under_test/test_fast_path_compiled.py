"""The compiled small-op path (`backend_under_test/_fastpath.c`): built by the install, in use
on the default path, and giving what the Python path gives.

The Python path stays for a machine that cannot build the module: the small-op tests run
again on it, in a process that asks for it (`SPYRE_EMU_PYTHON_PATH=1`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

import backend_under_test
from backend_under_test import compiled, kernels, memory
from tests.backend_under_test.test_fast_path import CASES, _run, _same
from tests.testing.paths import REPO_ROOT

DEVICE = "spyre"


def test_the_path_in_use_is_the_one_asked_for() -> None:
    if os.environ.get(compiled.PYTHON_PATH_ENV, "") not in ("", "0"):
        assert compiled.FASTPATH is None
        assert kernels._fast_call is kernels._fast_call_python
        assert type(memory.COUNTERS) is memory.MemoryCounters
        assert isinstance(kernels.kernel_for(torch.ops.aten.add.Tensor), types.FunctionType)
        y = torch.ones(3, device=DEVICE) + 1
        assert type(memory._LIVE[y.untyped_storage().data_ptr()]) is memory._Live
        return
    fastpath = compiled.FASTPATH
    assert fastpath is not None, (
        "backend_under_test/_fastpath.c was not built by `pip install -e .` (is a C compiler "
        "and Python.h there?): the device runs its slower Python path"
    )
    assert kernels._fast_call is fastpath.fast_call
    assert memory.register is fastpath.register
    assert isinstance(memory.COUNTERS, fastpath.MemoryCounters)
    assert isinstance(kernels.kernel_for(torch.ops.aten.add.Tensor), fastpath.Kernel)
    y = torch.ones(3, device=DEVICE) + 1
    entry = memory._LIVE[y.untyped_storage().data_ptr()]
    assert type(entry) is fastpath.Live
    assert entry.seed is not None and entry.stored_owner is None
    assert entry.owner.data_ptr() == y.untyped_storage().data_ptr()


needs_compiled = pytest.mark.skipif(
    compiled.FASTPATH is None, reason="the compiled path is not in use in this process"
)


@needs_compiled
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_path_matches_python_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled_result, compiled_counters = _run(CASES[name])
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "_fast_call", kernels._fast_call_python)
        python_result, python_counters = _run(CASES[name])
    _same(compiled_result, python_result)
    assert compiled_counters == python_counters


@needs_compiled
def test_a_failing_cpu_kernel_raises_its_own_error_and_leaks_nothing() -> None:
    x = torch.ones(4, device=DEVICE)
    y = torch.ones(5, device=DEVICE)
    allocated = memory.COUNTERS.allocated
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.add(x, y)
    assert memory.COUNTERS.allocated == allocated


@needs_compiled
def test_freeing_results_in_any_order_keeps_the_counters_exact() -> None:
    # The entry of a freed storage can be the live table's last reference to it, inside
    # its own callback: the callback holds it (a crash before it did).
    x = torch.randn(8, 8, device=DEVICE)
    start = memory.COUNTERS.allocated
    results = [x + i for i in range(50)]
    assert memory.COUNTERS.allocated == start + 50 * 256
    del results[::2]
    assert memory.COUNTERS.allocated == start + 25 * 256
    results.clear()
    assert memory.COUNTERS.allocated == start


@needs_compiled
def test_bad_calls_into_the_compiled_module_raise() -> None:
    fastpath = compiled.FASTPATH
    assert fastpath is not None
    plan = kernels.plan_for(torch.ops.aten.add.Tensor)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        fastpath.fast_call(torch.ops.aten.add.Tensor, plan)
    with pytest.raises(TypeError, match="args must be a tuple"):
        fastpath.fast_call(torch.ops.aten.add.Tensor, plan, [1, 2])
    with pytest.raises(TypeError, match="expected a Live entry"):
        fastpath.released(object())
    storage = torch.UntypedStorage(0)
    with pytest.raises(ValueError, match="negative size"):
        fastpath.register(1, None, storage, -1)
    with pytest.raises(TypeError, match="keyword arguments only"):
        fastpath.configure()


def test_a_stale_build_is_ignored_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Path(compiled.__file__).with_name("_fastpath.c")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    stale = types.ModuleType("backend_under_test._fastpath")
    stale.__file__ = "/somewhere/_fastpath.so"
    monkeypatch.delenv(compiled.PYTHON_PATH_ENV, raising=False)
    monkeypatch.setattr(backend_under_test, "_fastpath", stale, raising=False)
    monkeypatch.setitem(sys.modules, "backend_under_test._fastpath", stale)
    # built from this very source, for this ABI: used
    stale.ABI, stale.SOURCE_SHA256 = compiled.ABI, digest  # type: ignore[attr-defined]
    assert compiled._load() is stale
    # another ABI
    stale.ABI = compiled.ABI - 1  # type: ignore[attr-defined]
    with pytest.warns(RuntimeWarning, match=f"offers ABI {compiled.ABI - 1}"):
        assert compiled._load() is None
    # the right ABI, but _fastpath.c changed since the build
    stale.ABI, stale.SOURCE_SHA256 = compiled.ABI, "0" * 64  # type: ignore[attr-defined]
    with pytest.warns(RuntimeWarning, match="_fastpath.c changed since it was built"):
        assert compiled._load() is None
    # the Python path asked for: the build is not even looked at
    monkeypatch.setenv(compiled.PYTHON_PATH_ENV, "1")
    stale.SOURCE_SHA256 = digest  # type: ignore[attr-defined]
    assert compiled._load() is None


def test_the_installed_build_is_of_this_source() -> None:
    if compiled.FASTPATH is None:
        pytest.skip("the compiled path is not in use in this process")
    source = Path(compiled.__file__).with_name("_fastpath.c")
    assert hashlib.sha256(source.read_bytes()).hexdigest() == compiled.FASTPATH.SOURCE_SHA256


# The fallback's own run of the small-op tests (12 s) is in the `long` run; the default run
# tests the path in use (compiled where `pip install` built it) and the fallback's choice.
@pytest.mark.long
def test_the_python_path_passes_the_small_op_tests() -> None:
    """The fallback is a path of its own (its memory types too): its tests run on it."""
    env: dict[str, Any] = dict(os.environ, **{compiled.PYTHON_PATH_ENV: "1"})
    env.pop("PYTEST_XDIST_WORKER", None)
    files = [
        "tests/backend_under_test/test_fast_path.py",
        "tests/backend_under_test/test_small_op_invariants.py",
        "tests/backend_under_test/test_fast_path_compiled.py::test_the_path_in_use_is_the_one_asked_for",
    ]
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *files],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert process.returncode == 0, process.stdout[-4000:] + process.stderr[-2000:]
    assert " passed" in process.stdout and " failed" not in process.stdout
