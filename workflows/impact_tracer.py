"""pytest plugin of the impact-map tracing run (`spyre-ci impact-map`).

Loaded next to `suites.pytest_plugin` through `PYTEST_PLUGINS`, with `SPYRE_CI_TRACE_OUT`
naming a JSON-lines file. For each variant it records the torch Python functions executed
(`sys.setprofile` / `threading.setprofile`, files under the installed torch, as
`<repo path>:<qualified name>`) and the aten ops dispatched (the torch profiler's
RecordFunction events, which every dispatcher call emits, also the calls one kernel makes
to another). What runs outside any test (collection, imports) is recorded under the id
`(session)`: it may touch every variant.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Generator
from typing import Any

import pytest

OUT_VAR = "SPYRE_CI_TRACE_OUT"
SESSION = "(session)"


class _Tracer:
    def __init__(self, out: str) -> None:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        origin = spec.origin if spec is not None and spec.origin else ""
        self.prefix = os.path.dirname(os.path.dirname(os.path.realpath(origin))) + os.sep
        self.torch_dir = self.prefix + "torch" + os.sep
        self.out = open(out, "a", encoding="utf-8")  # noqa: SIM115 - closed at unconfigure
        self.functions: set[tuple[str, str]] = set()
        self.session: set[tuple[str, str]] = set()
        self.current: set[tuple[str, str]] = self.session
        self.session_ops: set[str] = set()
        self.profiler: Any = None
        self._real: dict[str, str] = {}

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        filename = code.co_filename
        real = self._real.get(filename)
        if real is None:
            real = self._real[filename] = os.path.realpath(filename)
        if real.startswith(self.torch_dir):
            self.current.add((real[len(self.prefix) :], code.co_qualname))

    def start(self) -> None:
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)

    def start_ops(self) -> None:
        import torch.profiler

        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.profiler.__enter__()
        sys.setprofile(self.profile)  # the profiler may have replaced the hook

    def stop_ops(self) -> set[str]:
        if self.profiler is None:
            return set()
        self.profiler.__exit__(None, None, None)
        sys.setprofile(self.profile)
        ops = {e.name for e in self.profiler.events() if e.name.startswith("aten::")}
        self.profiler = None
        return ops

    def write(self, vid: str, functions: set[tuple[str, str]], ops: set[str]) -> None:
        self.out.write(
            json.dumps(
                {
                    "id": vid,
                    "functions": sorted(f"{p}:{q}" for p, q in functions),
                    "aten_ops": sorted(ops),
                }
            )
            + "\n"
        )
        self.out.flush()


_TRACER: dict[str, _Tracer] = {}


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get(OUT_VAR)
    if out:
        tracer = _Tracer(out)
        _TRACER["t"] = tracer
        tracer.start()
        tracer.start_ops()


def pytest_unconfigure(config: pytest.Config) -> None:
    tracer = _TRACER.pop("t", None)
    if tracer is not None:
        tracer.session_ops |= tracer.stop_ops()
        sys.setprofile(None)
        threading.setprofile(None)
        tracer.write(SESSION, tracer.session, tracer.session_ops)
        tracer.out.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    tracer = _TRACER.get("t")
    plan = getattr(item, "plan", None)
    if tracer is None or plan is None:
        return (yield)
    tracer.session_ops |= tracer.stop_ops()
    tracer.current = set()
    tracer.start_ops()
    try:
        return (yield)
    finally:
        ops = tracer.stop_ops()
        tracer.write(plan.variant.id, tracer.current, ops)
        tracer.current = tracer.session
        tracer.start_ops()
