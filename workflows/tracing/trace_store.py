"""Traces kept with History: every run's shards record what each variant ran, and the next
plan joins them.

A stored trace is keyed by (torch version, variant id) and carries the variant's definition
fingerprint when it was recorded; a newer recording replaces an older one. Only traces that
say something the shipped trace does not (a variant it lacks, a changed fingerprint, other
functions or ops) are stored, so a machine that runs the bundled Inventory on the pinned
torch keeps the store nearly empty. The backend follows History's: a SQLite file next to
`history.sqlite3`, or Redis (`<prefix>:<torch>` hashes) when History is in Redis.

    store = trace_store_for(history)
    store.put("2.13.0", recorded, run_id)            # after a run
    trace = joined_trace(inventory, store)          # for the next plan
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import selector
from suites.model import Inventory, Outcome, Status
from workflows.runner.trace_vars import IDS_VAR, OUT_VAR, SESSION
from workflows.settings import child_environment
from workflows.stores.history import HistoryError, HistoryStore, RedisHistory, SQLiteHistory, masked
from workflows.tracing.traces import ImpactNote, describe, shipped_trace, shipped_trace_path

TRACE_FILE = "trace.ndjson"  # per shard work directory (not *.jsonl: those are results files)
TRACE_IDS = "trace-ids.txt"  # per run: the ids its shards trace
TRACE_PLUGIN = "workflows.runner.impact_tracer"
# Outcomes whose trace is incomplete (the test did not run to its end in one piece).
_INCOMPLETE = (Status.CRASHED, Status.TIMEOUT, Status.REMOVED)


@dataclass(frozen=True)
class StoredTrace:
    fingerprint: str
    functions: frozenset[str]
    aten_ops: frozenset[str]


class TraceStore(Protocol):
    """`put` writes only what differs from what is stored; `version` changes whenever a put
    wrote something, so a plan reads the store again only after it changed."""

    @property
    def where(self) -> str: ...

    def put(self, torch_version: str, traces: Mapping[str, StoredTrace], run_id: str) -> None: ...

    def load(self, torch_version: str) -> dict[str, StoredTrace]: ...

    def version(self, torch_version: str) -> str: ...


def _pack(trace: StoredTrace) -> bytes:
    data = {"fp": trace.fingerprint, "f": sorted(trace.functions), "o": sorted(trace.aten_ops)}
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 6)


def _unpack(blob: bytes) -> StoredTrace:
    data = json.loads(zlib.decompress(blob))
    return StoredTrace(str(data["fp"]), frozenset(data["f"]), frozenset(data["o"]))


class SQLiteTraces:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=30, check_same_thread=False)
            with self._db:
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS trace (torch TEXT NOT NULL, variant TEXT NOT "
                    "NULL, blob BLOB NOT NULL, run TEXT NOT NULL, at REAL NOT NULL, "
                    "PRIMARY KEY (torch, variant))"
                )
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{path}: cannot open the trace database: {exc}") from exc

    @property
    def where(self) -> str:
        return str(self.path)

    def put(self, torch_version: str, traces: Mapping[str, StoredTrace], run_id: str) -> None:
        now = time.time()
        try:
            stored = self.load(torch_version) if traces else {}
            rows = [
                (torch_version, vid, _pack(t), run_id, now)
                for vid, t in traces.items()
                if stored.get(vid) != t
            ]
            if rows:
                with self._db:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO trace VALUES (?, ?, ?, ?, ?)", rows
                    )
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: cannot store traces: {exc}") from exc

    def version(self, torch_version: str) -> str:
        try:
            count, last = self._db.execute(
                "SELECT count(*), max(at) FROM trace WHERE torch = ?", (torch_version,)
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: cannot read traces: {exc}") from exc
        return f"{count}:{last}"

    def load(self, torch_version: str) -> dict[str, StoredTrace]:
        try:
            rows = self._db.execute(
                "SELECT variant, blob FROM trace WHERE torch = ?", (torch_version,)
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: cannot read traces: {exc}") from exc
        return {vid: _unpack(blob) for vid, blob in rows}


class RedisTraces:
    def __init__(self, url: str, prefix: str = "spyre-ci:trace") -> None:
        from workflows.stores import redis_clients

        self.url = url
        self._redis = redis_clients.shared(url, socket_timeout=10)
        self._prefix = prefix

    def put(self, torch_version: str, traces: Mapping[str, StoredTrace], run_id: str) -> None:
        import redis

        if not traces:
            return
        key = f"{self._prefix}:{torch_version}"
        try:
            vids = list(traces)
            stored = self._redis.hmget(key, vids)
            changed = {
                vid: base64.b64encode(_pack(traces[vid])).decode()
                for vid, blob in zip(vids, stored, strict=True)
                if blob is None or _unpack(base64.b64decode(blob)) != traces[vid]
            }
            if not changed:
                return
            pipe = self._redis.pipeline(transaction=True)
            pipe.hset(key, mapping=changed)  # type: ignore[arg-type]  # redis-py's Mapping is invariant
            pipe.incr(f"{key}{_VERSION}")
            pipe.execute()
        except redis.RedisError as exc:
            raise HistoryError(
                f"Redis at {masked(self.url)}: storing traces failed: {exc}"
            ) from exc

    def load(self, torch_version: str) -> dict[str, StoredTrace]:
        import redis

        try:
            raw: dict[str, str] = self._redis.hgetall(f"{self._prefix}:{torch_version}")  # type: ignore[assignment]
        except redis.RedisError as exc:
            raise HistoryError(
                f"Redis at {masked(self.url)}: reading traces failed: {exc}"
            ) from exc
        return {vid: _unpack(base64.b64decode(blob)) for vid, blob in raw.items()}

    def version(self, torch_version: str) -> str:
        import redis

        try:
            return str(self._redis.get(f"{self._prefix}:{torch_version}{_VERSION}") or 0)
        except redis.RedisError as exc:
            raise HistoryError(
                f"Redis at {masked(self.url)}: reading traces failed: {exc}"
            ) from exc

    @property
    def where(self) -> str:
        return f"{masked(self.url)} {self._prefix}"


_VERSION = ":version"  # beside each `<prefix>:<torch>` hash: counts the puts that wrote


def trace_store_for(history: HistoryStore) -> TraceStore | None:
    """The trace store beside a History store (None for another kind of store)."""
    if isinstance(history, SQLiteHistory):
        return SQLiteTraces(history.path.with_name("traces.sqlite3"))
    if isinstance(history, RedisHistory):
        return RedisTraces(history.url)
    return None


def read_recorded(
    trace_files: Iterable[Path], outcomes: Mapping[str, Outcome], fingerprints: Mapping[str, str]
) -> dict[str, StoredTrace]:
    """Per variant, what its shard's tracer recorded, for variants that ran to their end in
    one piece and are in the Inventory (the last recording wins: a rerun replaces)."""
    recorded: dict[str, StoredTrace] = {}
    for path in trace_files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
                vid = entry["id"]
                functions, ops = entry["functions"], entry["aten_ops"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut by a crash
            outcome = outcomes.get(vid)
            if vid == SESSION or vid not in fingerprints or outcome is None:
                continue
            if outcome.status in _INCOMPLETE:
                continue
            recorded[vid] = StoredTrace(fingerprints[vid], frozenset(functions), frozenset(ops))
    return recorded


def news(
    recorded: Mapping[str, StoredTrace], base: selector.ImpactMap | None
) -> dict[str, StoredTrace]:
    """The recorded traces the base (shipped) trace does not already say."""
    if base is None:
        return dict(recorded)
    out: dict[str, StoredTrace] = {}
    for vid, trace in recorded.items():
        same = (
            base.fingerprints.get(vid) == trace.fingerprint
            and base.functions.get(vid) == trace.functions
            and base.aten_ops.get(vid) == trace.aten_ops
        )
        if not same:
            out[vid] = trace
    return out


def learn(
    store: TraceStore,
    inventory: Inventory,
    trace_files: Iterable[Path],
    outcomes: Mapping[str, Outcome],
    run_id: str,
) -> int:
    """Store what a run's shards traced (beyond the shipped trace); the number stored."""
    fingerprints = {v.id: v.fingerprint for v in inventory.variants}
    recorded = read_recorded(trace_files, outcomes, fingerprints)
    fresh = news(recorded, shipped_trace(inventory.torch_version))
    store.put(inventory.torch_version, fresh, run_id)
    return len(fresh)


def joined_trace(
    inventory: Inventory, store: TraceStore | None
) -> tuple[selector.ImpactMap, ImpactNote] | None:
    """The trace a plan joins by default: the shipped one, overlaid by stored traces (newer
    recordings of the same torch); and what plan.json says of it."""
    base = shipped_trace(inventory.torch_version)
    trace_map, stored = _joined(inventory.torch_version, base, store)
    if trace_map is None:
        return None
    path = str(shipped_trace_path(inventory.torch_version)) if base else "(History)"
    source = "shipped + History" if base and stored else "shipped" if base else "History"
    return trace_map, replace(describe(trace_map, path, inventory), source=source, stored=stored)


# Joined traces built in this process: a worker plans many runs between two changes of the
# store, and builds the joined map and its inverted index once for them. (torch, id of the
# shipped map, store, store version) -> (shipped map, joined map, number stored); the shipped
# map is kept in the entry and compared by identity, as an id alone may be reused.
_JOINED: dict[
    tuple[str, int, str, str],
    tuple[selector.ImpactMap | None, selector.ImpactMap, int],
] = {}


def _joined(
    torch_version: str, base: selector.ImpactMap | None, store: TraceStore | None
) -> tuple[selector.ImpactMap | None, int]:
    if store is None:
        return base, 0
    key = (torch_version, id(base), store.where, store.version(torch_version))
    cached = _JOINED.get(key)
    if cached is not None and cached[0] is base:
        return cached[1], cached[2]
    stored = store.load(torch_version)
    overlay = {vid: (t.functions, t.aten_ops, t.fingerprint) for vid, t in stored.items()}
    if not stored:
        joined = base
    elif base is not None:
        joined = base.overlaid(overlay)
    else:
        joined = selector.ImpactMap(torch_version=torch_version).overlaid(overlay)
    if joined is None:
        return None, 0
    if len(_JOINED) >= 4:
        _JOINED.pop(next(iter(_JOINED)))
    _JOINED[key] = (base, joined, len(stored))
    return joined, len(stored)


def refresh_ids(
    run_ids: Iterable[str],
    trace: selector.ImpactMap | None,
    fingerprints: Mapping[str, str],
    share: float,
    seed: str,
) -> list[str]:
    """The ids a run traces: those with no fresh trace (never traced, or traced with another
    definition), and a rotating `share` of the others (chosen by a hash of the run and the
    id, so successive runs refresh different ones). Tracing costs about as much again as the
    test: a small share keeps a run's cost near its tests' (benchmarks/results/trace_cost.json)."""
    chosen: list[str] = []
    stale = trace.stale(fingerprints) if trace is not None else frozenset()
    traced = (trace.functions.keys() | trace.aten_ops.keys()) if trace is not None else set()
    limit = int(share * 2**32)
    for vid in run_ids:
        rotated = bool(limit) and zlib.crc32(f"{seed}\0{vid}".encode()) < limit
        if vid not in traced or vid in stale or rotated:
            chosen.append(vid)
    return chosen


def tracing_env(ids_file: Path, out_file: Path) -> dict[str, str]:
    """The environment a shard's pytest needs to trace the ids in `ids_file` into `out_file`
    (the tracer plugin added to any the environment it inherits already loads)."""
    inherited = child_environment().get("PYTEST_PLUGINS", "")
    plugins = [p for p in inherited.split(",") if p.strip()]
    if TRACE_PLUGIN not in plugins:
        plugins.append(TRACE_PLUGIN)
    return {"PYTEST_PLUGINS": ",".join(plugins), OUT_VAR: str(out_file), IDS_VAR: str(ids_file)}
