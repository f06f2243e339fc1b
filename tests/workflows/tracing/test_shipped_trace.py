"""The shipped trace (`workflows/data/trace-<torch>.json.gz`) describes the bundled Inventory:
it covers every runnable variant, its fingerprints are the bundled specs', and a sample of it
matches a fresh recording."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from suites.model import Expectation
from workflows.runner.impact_tracer import OUT_VAR
from workflows.runner.shard_runner import Limits, run_shard
from workflows.tracing.trace_store import TRACE_PLUGIN
from workflows.tracing.traces import read_trace, shipped_trace_path

SAMPLE = 6


@pytest.fixture(scope="module")
def bundled(bundled_inventory):  # type: ignore[no-untyped-def]
    return bundled_inventory


def test_the_shipped_trace_covers_the_bundled_inventory(bundled) -> None:  # type: ignore[no-untyped-def]
    path = shipped_trace_path(bundled.torch_version)
    assert path.exists(), f"no shipped trace for torch {bundled.torch_version}: record one"
    assert path.stat().st_size < 8 * 1024 * 1024  # a few MB at most
    trace = read_trace(path)
    runnable = {v.id for v in bundled.variants if v.expectation is not Expectation.SKIP}
    assert runnable <= trace.functions.keys()
    fingerprints = {v.id: v.fingerprint for v in bundled.variants}
    stale = trace.stale(fingerprints)
    assert not stale, (
        f"{len(stale)} variants changed since the trace was recorded (e.g. {sorted(stale)[:3]}); "
        "rebuild it: spyre-ci impact-map --out workflows/data/trace-2.13.0.json.gz"
    )


@pytest.mark.long
def test_a_sample_of_the_shipped_trace_matches_a_fresh_recording(
    bundled,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    trace = read_trace(shipped_trace_path(bundled.torch_version))
    runnable = sorted(v.id for v in bundled.variants if v.expectation is not Expectation.SKIP)
    sample = random.Random(bundled.torch_version).sample(runnable, SAMPLE)
    out = tmp_path / "trace.jsonl"
    result = run_shard(
        "sample",
        sample,
        tmp_path / "work",
        limits=Limits(test_timeout_s=120),
        env={"PYTEST_PLUGINS": TRACE_PLUGIN, OUT_VAR: str(out)},
    )
    assert result.fault is None
    fresh = {e["id"]: e for e in map(json.loads, out.read_text().splitlines())}
    session = set(fresh.pop("(session)")["functions"]) | trace.session_functions
    for vid in sample:
        assert vid in fresh, vid
        # Recorded in one long process, a variant may owe first-use work (a lazy import, a
        # cache filled) to a variant that ran before it: what it ran is what it runs now,
        # or ran in this process's session.
        shipped = trace.functions[vid]
        missing = shipped - set(fresh[vid]["functions"]) - session
        assert not missing, (vid, sorted(missing)[:5])
        assert trace.aten_ops[vid] <= set(fresh[vid]["aten_ops"]) | trace.session_ops, vid
