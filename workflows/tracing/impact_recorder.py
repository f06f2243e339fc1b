"""Records an impact map (`spyre-ci impact-map`): every variant run once under the tracer.

The tracer is the pytest plugin `workflows.runner.impact_tracer`; the file written is the ImpactMap
JSON `selector.impact.ImpactMap` reads (the one reader), with its `session` and `untraced`.

    data = record_impact_map(ids, work, specs, Limits(test_timeout_s=300))
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from suites.model import Status
from workflows.runner.shard_runner import Limits, ProgressCallback, run_shard
from workflows.runner.trace_vars import OUT_VAR, SESSION

TRACE_PLUGIN = "workflows.runner.impact_tracer"


def record_impact_map(
    ids: Sequence[str],
    work: Path,
    specs: Sequence[str],
    limits: Limits,
    *,
    warm: bool = True,
    progress: ProgressCallback | None = None,
    parallel: int = 1,
) -> dict[str, Any]:
    """Run `ids` once with the tracing plugin; the ImpactMap JSON (selector/impact.py) plus
    `session` (what ran outside any test: imports and collection) and `untraced`. `warm`:
    `Settings.zygote` (`run_shard`); `progress` is told each outcome; `parallel` test
    processes at a time (each appends its entries to the one trace file)."""
    work.mkdir(parents=True, exist_ok=True)
    trace_file = work / "trace.jsonl"
    if trace_file.exists():
        trace_file.unlink()
    env = {"PYTEST_PLUGINS": TRACE_PLUGIN, OUT_VAR: str(trace_file)}
    result = run_shard(
        "trace",
        list(ids),
        work,
        limits=limits,
        specs=list(specs),
        env=env,
        warm=warm,
        progress=progress,
        parallel=parallel,
    )
    outcomes = {o.id: o for o in result.outcomes}
    variants: dict[str, dict[str, list[str]]] = {}
    session: dict[str, set[str]] = {"functions": set(), "aten_ops": set()}
    lines = trace_file.read_text(encoding="utf-8").splitlines() if trace_file.exists() else []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry["id"] == SESSION:
            # One per subprocess (a crash starts another): every process's imports count.
            session["functions"].update(entry["functions"])
            session["aten_ops"].update(entry["aten_ops"])
        else:
            variants[entry["id"]] = {"functions": entry["functions"], "aten_ops": entry["aten_ops"]}
    # A variant that crashed, hung or never ran (a faulted shard) has an incomplete trace,
    # which must not restrict anything.
    crashed = sorted(
        vid
        for vid in ids
        if vid not in variants
        or vid not in outcomes
        or outcomes[vid].status in (Status.CRASHED, Status.TIMEOUT)
    )
    for vid in crashed:
        variants.pop(vid, None)
    try:
        torch_version = metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        torch_version = ""
    return {
        "format": 1,
        "torch_version": torch_version,
        "variants": variants,
        "session": {k: sorted(v) for k, v in session.items()},
        "untraced": crashed,
    }
