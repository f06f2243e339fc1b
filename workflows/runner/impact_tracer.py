"""pytest plugin that records, per variant, what of torch it runs (the trace).

Loaded next to `suites.pytest_plugin` through `PYTEST_PLUGINS`, with `SPYRE_CI_TRACE_OUT`
naming a JSON-lines file. For each variant it records the torch Python functions executed
(`<repo path>:<co_qualname>`, files under the installed torch) and the aten ops dispatched
(RecordFunction events of the torch profiler, which every dispatcher call emits, also the
calls one kernel makes to another). What runs outside any test (collection, imports) is
recorded under the id `(session)`: it may touch every variant.

Two recorders (`SPYRE_CI_TRACE_MODE`):

* `fast` (default): functions by `cProfile` (a C profiler: no Python call per event), ops by
  the autograd profiler's raw event names (no FunctionEvent tree is built);
* `setprofile`: a Python `sys.setprofile` / `threading.setprofile` hook and the full torch
  profiler, the reference the fast recorder was checked against (also sees other threads).
"""

from __future__ import annotations

import cProfile
import json
import os
import sys
import threading
from collections.abc import Generator
from typing import Any

import pytest

from workflows.runner.trace_vars import IDS_VAR, MODE_VAR, OUT_VAR, SESSION

# torch's profiler, which the recorders call around each test: never part of a trace.
RECORDER_FILES = ("torch/autograd/profiler", "torch/profiler/")


class _Tracer:
    def __init__(self, out: str) -> None:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        origin = spec.origin if spec is not None and spec.origin else ""
        self.prefix = os.path.dirname(os.path.dirname(os.path.realpath(origin))) + os.sep
        self.torch_dir = self.prefix + "torch" + os.sep
        # Appended to by every test process of the shard, several at once when it runs in
        # parallel: each entry is one write() of an O_APPEND descriptor, never interleaved.
        self.out = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.session: set[str] = set()
        self.session_ops: set[str] = set()
        self._real: dict[str, str | None] = {}

    def repo_path(self, filename: str) -> str | None:
        """`torch/nn/functional.py` for a file of the installed torch, else None (also for
        the profiler's own files: what the recorder runs is not what the test runs)."""
        real = self._real.get(filename, "")
        if real == "":
            full = os.path.realpath(filename)
            path = full[len(self.prefix) :] if full.startswith(self.torch_dir) else None
            if path is not None and path.startswith(RECORDER_FILES):
                path = None
            real = self._real[filename] = path
        return real

    def write(self, vid: str, functions: set[str], ops: set[str]) -> None:
        entry = {"id": vid, "functions": sorted(functions), "aten_ops": sorted(ops)}
        data = memoryview((json.dumps(entry) + "\n").encode("utf-8"))
        while data:
            data = data[os.write(self.out, data) :]

    # A recorder: start() before a test, stop() -> (functions, ops) after it.
    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> tuple[set[str], set[str]]:
        raise NotImplementedError


class _FastTracer(_Tracer):
    def __init__(self, out: str) -> None:
        super().__init__(out)
        self.profile = cProfile.Profile()
        self.ops: Any = None

    def start(self) -> None:
        import torch.autograd.profiler as autograd_profiler

        self.ops = autograd_profiler.profile(use_cpu=True, record_shapes=False)
        self.ops.__enter__()
        self.profile.enable()

    def stop(self) -> tuple[set[str], set[str]]:
        self.profile.disable()
        functions: set[str] = set()
        for entry in self.profile.getstats():
            code = entry.code
            if isinstance(code, str):
                continue  # a built-in
            path = self.repo_path(code.co_filename)
            if path is not None:
                functions.add(f"{path}:{code.co_qualname}")
        self.profile.clear()
        ops: set[str] = set()
        if self.ops is not None:
            self.ops.__exit__(None, None, None)
            results = getattr(self.ops, "kineto_results", None)
            if results is not None:
                ops = {n for e in results.events() if (n := e.name()).startswith("aten::")}
            self.ops = None
        return functions, ops


class _SetprofileTracer(_Tracer):
    def __init__(self, out: str) -> None:
        super().__init__(out)
        self.current: set[str] = set()
        self.profiler: Any = None

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        path = self.repo_path(code.co_filename)
        if path is not None:
            self.current.add(f"{path}:{code.co_qualname}")

    def start(self) -> None:
        import torch.profiler

        self.current = set()
        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.profiler.__enter__()
        sys.setprofile(self.hook)  # the profiler may have replaced the hook
        threading.setprofile(self.hook)

    def stop(self) -> tuple[set[str], set[str]]:
        sys.setprofile(None)
        threading.setprofile(None)
        ops: set[str] = set()
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            ops = {e.name for e in self.profiler.events() if e.name.startswith("aten::")}
            self.profiler = None
        return self.current, ops


_TRACER: dict[str, _Tracer] = {}
_WANTED: dict[str, frozenset[str]] = {}  # "ids": only these (IDS_VAR given)


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get(OUT_VAR)
    if not out:
        return
    mode = os.environ.get(MODE_VAR, "fast")
    tracer = _SetprofileTracer(out) if mode == "setprofile" else _FastTracer(out)
    _TRACER["t"] = tracer
    ids_file = os.environ.get(IDS_VAR)
    if ids_file:
        try:
            with open(ids_file, encoding="utf-8") as handle:
                _WANTED["ids"] = frozenset(line.strip() for line in handle if line.strip())
        except OSError:
            _WANTED["ids"] = frozenset()  # nothing traced: a missing file costs no test
    else:
        tracer.start()  # collection and imports: the session


def pytest_unconfigure(config: pytest.Config) -> None:
    tracer = _TRACER.pop("t", None)
    if tracer is None:
        return
    if "ids" not in _WANTED:
        functions, ops = tracer.stop()
        tracer.session |= functions
        tracer.session_ops |= ops
        tracer.write(SESSION, tracer.session, tracer.session_ops)
    os.close(tracer.out)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    tracer = _TRACER.get("t")
    plan = getattr(item, "plan", None)
    if tracer is None or plan is None:
        return (yield)
    wanted = _WANTED.get("ids")
    if wanted is not None:
        if plan.variant.id not in wanted:
            return (yield)
        tracer.start()
    else:
        functions, ops = tracer.stop()
        tracer.session |= functions
        tracer.session_ops |= ops
        tracer.start()
    try:
        return (yield)
    finally:
        functions, ops = tracer.stop()
        tracer.write(plan.variant.id, functions, ops)
        if wanted is None:
            tracer.start()
