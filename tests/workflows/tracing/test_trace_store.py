"""A trace by every run: shards trace what lacks a fresh trace (and a rotating share of the
rest), the traces are stored beside History (SQLite or Redis), and the next plan joins them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import selector
from selector.opnames import op_key
from suites.model import Inventory, Outcome, Status
from tests.workflows.run.test_infra_faults import _request as infra_request
from tests.workflows.run_context import run_context
from workflows.drivers import embedded
from workflows.run import pipeline, run_model
from workflows.run.layout import RunLayout
from workflows.run.run_model import PlanNotes
from workflows.stores.history import RedisHistory, SQLiteHistory
from workflows.tracing.trace_store import (
    TRACE_FILE,
    RedisTraces,
    SQLiteTraces,
    StoredTrace,
    joined_trace,
    read_recorded,
    refresh_ids,
    trace_store_for,
)

TRACE = StoredTrace("fp1", frozenset({"torch/nn/functional.py:softmax"}), frozenset({"aten::exp"}))


def test_sqlite_traces_round_trip_and_replace(tmp_path: Path) -> None:
    store = SQLiteTraces(tmp_path / "traces.sqlite3")
    store.put("2.13.0", {"a": TRACE}, "run-1")
    newer = StoredTrace("fp2", frozenset(), frozenset({"aten::mul"}))
    store.put("2.13.0", {"a": newer, "b": TRACE}, "run-2")
    assert store.load("2.13.0") == {"a": newer, "b": TRACE}
    assert store.load("2.14.1") == {}
    # The store beside a SQLite History is a file next to it.
    history = SQLiteHistory(tmp_path / "h" / "history.sqlite3")
    beside = trace_store_for(history)
    assert isinstance(beside, SQLiteTraces) and beside.path.parent == tmp_path / "h"


def test_redis_traces_round_trip(redis_server: str) -> None:
    store = trace_store_for(RedisHistory(redis_server))
    assert isinstance(store, RedisTraces)
    store.put("2.13.0", {"a": TRACE}, "run-1")
    assert RedisTraces(redis_server).load("2.13.0") == {"a": TRACE}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_put_writes_only_what_changed_and_a_plan_rejoins_only_after_a_change(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, tiny_inventory: Path
) -> None:
    store: SQLiteTraces | RedisTraces
    if backend == "sqlite":
        store = SQLiteTraces(tmp_path / "traces.sqlite3")
    else:
        store = RedisTraces(request.getfixturevalue("redis_server"), prefix=f"t{tmp_path.name}")
    inventory = Inventory.load(tiny_inventory)
    tv = inventory.torch_version
    empty = store.version(tv)
    store.put(tv, {"a": TRACE}, "run-1")
    once = store.version(tv)
    assert once != empty
    store.put(tv, {"a": TRACE}, "run-2")  # the same trace again: nothing written
    assert store.version(tv) == once
    first = joined_trace(inventory, store)
    again = joined_trace(inventory, store)
    assert first is not None and again is not None
    assert again[0] is first[0]  # the store did not change: the joined map is reused
    newer = StoredTrace("fp2", frozenset({"torch/x.py:g"}), frozenset({"aten::mul"}))
    store.put(tv, {"a": newer}, "run-3")
    assert store.version(tv) != once
    after = joined_trace(inventory, store)
    assert after is not None and after[0] is not first[0]
    assert after[0].functions["a"] == newer.functions
    assert "a" in after[0].inverted()[1][op_key("aten::mul")]
    assert "a" not in after[0].inverted()[0].get("torch/nn/functional.py:softmax", set())


def test_refresh_picks_untraced_stale_and_a_rotating_share() -> None:
    ids = [f"v{i}" for i in range(2000)]
    trace = selector.ImpactMap(
        functions={v: frozenset() for v in ids[:1500]},
        aten_ops={v: frozenset() for v in ids[:1500]},
        fingerprints={v: "old" if v == "v7" else "fp" for v in ids[:1500]},
    )
    fps = dict.fromkeys(ids, "fp")
    none = refresh_ids(ids, trace, fps, 0.0, "run-1")
    assert none == ["v7", *ids[1500:]]  # stale, then never traced
    some = refresh_ids(ids, trace, fps, 0.05, "run-1")
    rotated = set(some) - set(none)
    assert 30 < len(rotated) < 120  # about 5 % of the 1,499 fresh ones
    again = set(refresh_ids(ids, trace, fps, 0.05, "run-2")) - set(none)
    assert rotated != again  # another run refreshes others
    assert refresh_ids(ids, None, fps, 0.0, "x") == ids  # no trace at all: trace everything


def test_recorded_traces_keep_only_complete_known_variants(tmp_path: Path) -> None:
    lines = [
        {"id": "ok", "functions": ["torch/a.py:f"], "aten_ops": ["aten::add"]},
        {"id": "crashed", "functions": [], "aten_ops": []},
        {"id": "(session)", "functions": ["torch/b.py:g"], "aten_ops": []},
        {"id": "unknown", "functions": [], "aten_ops": []},
    ]
    path = tmp_path / TRACE_FILE
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n{cut", encoding="utf-8")
    outcomes = {
        "ok": Outcome("ok", Status.PASSED, 0.1),
        "crashed": Outcome("crashed", Status.CRASHED, 0.1),
        "unknown": Outcome("unknown", Status.PASSED, 0.1),
    }
    got = read_recorded([path], outcomes, {"ok": "fp", "crashed": "fp"})
    assert got == {"ok": StoredTrace("fp", frozenset({"torch/a.py:f"}), frozenset({"aten::add"}))}


def _request(inventory: Path, out: Path, run_id: str) -> run_model.RunRequest:
    """A full run of the tiny specs that traces only what lacks a trace (share 0)."""
    return infra_request(inventory, out, run_id, trace_share=0.0)


@pytest.mark.long
def test_a_run_traces_what_lacks_a_trace_and_the_next_plan_joins_it(
    tiny_inventory: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    inventory = Inventory.load(tiny_inventory)
    # The tiny specs are not the bundled Inventory: the shipped trace knows none of them.
    first = embedded.run(
        _request(tiny_inventory, tmp_path / "one", "trace-1"),
        run_context(history),
        2,
        show_progress=False,
    )
    ran = {vid for vid, o in first.outcomes.items() if o.status not in (Status.CRASHED,)}
    traced = (tmp_path / "one" / "work" / "trace-1" / "trace-ids.txt").read_text().split()
    assert set(traced) == set(first.outcomes)
    store = trace_store_for(history)
    assert store is not None
    stored = store.load(inventory.torch_version)
    assert first.traces_stored == len(stored) > 0
    assert set(stored) <= ran
    softmax = next(v for v in stored if "::softmax" in v)
    assert any(op.startswith("aten::") for op in stored[softmax].aten_ops)
    assert stored[softmax].fingerprint == inventory.by_id()[softmax].fingerprint
    joined = joined_trace(inventory, store)
    assert joined is not None
    trace, about = joined
    assert about.source in ("History", "shipped + History") and about.stored == len(stored)
    assert trace.functions[softmax] == stored[softmax].functions
    # A second run traces nothing new (every variant has a fresh trace, share 0).
    embedded.run(
        _request(tiny_inventory, tmp_path / "two", "trace-2"),
        run_context(history),
        2,
        show_progress=False,
    )
    assert not (tmp_path / "two" / "work" / "trace-2" / "trace-ids.txt").exists()


def test_tracing_off_chooses_nothing(tiny_inventory: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    inventory = Inventory.load(tiny_inventory)
    request = replace(_request(tiny_inventory, tmp_path / "off", "off"), record_traces=False)
    ids = [v.id for v in inventory.variants]
    result = pipeline.planning.PlanResult(None, PlanNotes(), [ids], [], None)  # type: ignore[arg-type]
    pipeline._plan_tracing(request, inventory, result)
    assert not RunLayout.of(request).trace_ids.exists()
    pipeline._plan_tracing(replace(request, record_traces=True), inventory, result)
    assert RunLayout.of(request).trace_ids.read_text().split() == ids


def test_trace_settings_are_checked() -> None:
    from workflows.settings import Settings, SettingsError

    assert Settings.from_env({"SPYRE_CI_TRACE": "off"}).record_traces is False
    assert Settings.from_env({"SPYRE_CI_TRACE_SHARE": "0"}).trace_share == 0.0
    with pytest.raises(SettingsError, match="SPYRE_CI_TRACE"):
        Settings.from_env({"SPYRE_CI_TRACE": "sometimes"})
