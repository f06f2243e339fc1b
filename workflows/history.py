"""History: what past runs learned, behind one interface with two stores.

`SQLiteHistory` (a file in the state directory) is the embedded default and needs no
server; `RedisHistory` is shared by every worker when Redis is configured. Both hand the
selector a `selector.History` snapshot and record the `selector.HistoryUpdate` that Verify
produces, with the semantics of `selector.apply_update`. Every write is idempotent by run:
applying the same run's update twice (a redelivered task) changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from selector.history import RECENT_LIMIT, History, HistoryUpdate, VariantHistory
from suites.model import Status


class HistoryError(Exception):
    """A History store cannot be read or written; the message names the store."""


@dataclass
class RunRecord:
    """One run of the pipeline as `spyre-ci runs list/show` presents it."""

    run_id: str
    state: str  # planned | finishing | completed | failed
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "state": self.state, "created_at": self.created_at,
            "updated_at": self.updated_at, "summary": self.summary,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        return cls(data["run_id"], data["state"], data["created_at"], data["updated_at"],
                   dict(data.get("summary", {})))


class HistoryStore(Protocol):
    def snapshot(self, paths: Iterable[str] = ()) -> History:
        """Every variant's record, and co-failures for the given changed paths."""
        ...

    def apply(self, run_id: str, update: HistoryUpdate) -> None:
        """Record one run's update; a second call for the same run changes nothing."""
        ...

    def save_run(self, run: RunRecord) -> None: ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(self, limit: int = 20) -> list[RunRecord]: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS outcome (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, variant TEXT NOT NULL, status TEXT NOT NULL,
    duration_s REAL NOT NULL, at REAL NOT NULL, PRIMARY KEY (run_id, seq)
);
CREATE INDEX IF NOT EXISTS outcome_variant ON outcome (variant, at, seq);
CREATE TABLE IF NOT EXISTS flaky (variant TEXT PRIMARY KEY, run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS baseline (variant TEXT PRIMARY KEY, status TEXT NOT NULL,
                                     run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cofailure (
    run_id TEXT NOT NULL, path TEXT NOT NULL, variant TEXT NOT NULL,
    PRIMARY KEY (run_id, path, variant)
);
CREATE INDEX IF NOT EXISTS cofailure_path ON cofailure (path);
CREATE TABLE IF NOT EXISTS known (one INTEGER PRIMARY KEY CHECK (one = 1), run_id TEXT,
                                  ids TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run (run_id TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at REAL);
"""


class SQLiteHistory:
    """History in one SQLite file: the embedded default."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: cannot open the History database: {exc}") from exc

    def apply(self, run_id: str, update: HistoryUpdate) -> None:
        now = time.time()
        with self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO outcome VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, seq, o.id, str(o.status), o.duration_s, now)
                 for seq, o in enumerate(update.outcomes)],
            )
            self._db.executemany("INSERT OR REPLACE INTO flaky VALUES (?, ?)",
                                 [(v, run_id) for v in update.mark_flaky])
            self._db.executemany("INSERT OR REPLACE INTO baseline VALUES (?, ?, ?)",
                                 [(v, str(s), run_id) for v, s in update.baseline.items()])
            self._db.executemany(
                "INSERT OR IGNORE INTO cofailure VALUES (?, ?, ?)",
                [(run_id, p, v) for p, ids in update.co_failures.items() for v in ids],
            )
            if update.known_variants is not None:
                self._db.execute("INSERT OR REPLACE INTO known VALUES (1, ?, ?)",
                                 (run_id, json.dumps(sorted(update.known_variants))))

    def snapshot(self, paths: Iterable[str] = ()) -> History:
        recent: dict[str, list[tuple[str, float]]] = {}
        for variant, status, duration in self._db.execute(
            "SELECT variant, status, duration_s FROM outcome ORDER BY at, run_id, seq"
        ):
            recent.setdefault(variant, []).append((status, duration))
        flaky = {v for (v,) in self._db.execute("SELECT variant FROM flaky")}
        baseline = dict(self._db.execute("SELECT variant, status FROM baseline").fetchall())
        co: dict[str, dict[str, int]] = {}
        for path in set(paths):
            for variant, count in self._db.execute(
                "SELECT variant, COUNT(*) FROM cofailure WHERE path = ? GROUP BY variant", (path,)
            ):
                co.setdefault(path, {})[variant] = int(count)
        row = self._db.execute("SELECT ids FROM known WHERE one = 1").fetchone()
        known = frozenset(json.loads(row[0])) if row else frozenset()
        return _history(recent, flaky, baseline, co, known)

    def save_run(self, run: RunRecord) -> None:
        run.updated_at = time.time()
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO run VALUES (?, ?, ?)",
                             (run.run_id, json.dumps(run.to_json()), run.updated_at))

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._db.execute("SELECT body FROM run WHERE run_id = ?", (run_id,)).fetchone()
        return RunRecord.from_json(json.loads(row[0])) if row else None

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        rows = self._db.execute(
            "SELECT body FROM run ORDER BY updated_at DESC LIMIT ?", (limit,)
        ).fetchall()
        return [RunRecord.from_json(json.loads(body)) for (body,) in rows]


# Appends one run's outcome once: the per-run set makes a retried task a no-op.
_APPEND_OUTCOME = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], 2592000)
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
return 1
"""


class RedisHistory:
    """History in Redis, shared by every worker."""

    def __init__(self, url: str, prefix: str = "spyre-ci:history") -> None:
        import redis

        self.url = url
        self._redis = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10)
        self._prefix = prefix
        self._append = self._redis.register_script(_APPEND_OUTCOME)

    def _key(self, *parts: str) -> str:
        return ":".join((self._prefix, *parts))

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        import redis

        try:
            yield
        except redis.RedisError as exc:
            raise HistoryError(f"Redis History at {self.url}: {what} failed: {exc}") from exc

    def apply(self, run_id: str, update: HistoryUpdate) -> None:
        with self._guard(f"recording run {run_id}"):
            pipe = self._redis.pipeline(transaction=True)
            for seq, o in enumerate(update.outcomes):
                self._append(
                    keys=[self._key("applied", run_id), self._key("v", o.id)],
                    args=[seq, json.dumps([str(o.status), o.duration_s]), RECENT_LIMIT],
                    client=pipe,
                )
            if update.mark_flaky:
                pipe.sadd(self._key("flaky"), *update.mark_flaky)
            if update.baseline:
                pipe.hset(self._key("baseline"),
                          mapping={v: str(s) for v, s in update.baseline.items()})
            for path, ids in update.co_failures.items():
                for variant in ids:
                    pipe.sadd(self._key("co", path, variant), run_id)
                    pipe.sadd(self._key("co-index", path), variant)
            if update.known_variants is not None:
                pipe.set(self._key("known"), json.dumps(sorted(update.known_variants)))
            pipe.execute()

    def snapshot(self, paths: Iterable[str] = ()) -> History:
        with self._guard("reading History"):
            prefix = self._key("v", "")
            ids = [k[len(prefix):] for k in self._redis.scan_iter(match=prefix + "*", count=1000)]
            pipe = self._redis.pipeline(transaction=False)
            for vid in ids:
                pipe.lrange(self._key("v", vid), 0, -1)
            lists = pipe.execute()
            recent = {vid: [tuple(json.loads(item)) for item in raw]
                      for vid, raw in zip(ids, lists, strict=True) if raw}
            flaky = self._redis.smembers(self._key("flaky"))
            baseline = self._redis.hgetall(self._key("baseline"))
            co: dict[str, dict[str, int]] = {}
            for path in set(paths):
                for variant in self._redis.smembers(self._key("co-index", path)):
                    co.setdefault(path, {})[variant] = int(
                        self._redis.scard(self._key("co", path, variant)))
            known_raw = self._redis.get(self._key("known"))
        known = frozenset(json.loads(known_raw)) if known_raw else frozenset()
        return _history(recent, flaky, baseline, co, known)  # type: ignore[arg-type]

    def save_run(self, run: RunRecord) -> None:
        run.updated_at = time.time()
        with self._guard(f"saving run {run.run_id}"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.set(self._key("run", run.run_id), json.dumps(run.to_json()))
            pipe.zadd(self._key("runs"), {run.run_id: run.updated_at})
            pipe.execute()

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._guard(f"reading run {run_id}"):
            body = self._redis.get(self._key("run", run_id))
        return RunRecord.from_json(json.loads(body)) if body else None

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        with self._guard("listing runs"):
            ids = self._redis.zrevrange(self._key("runs"), 0, limit - 1)
        runs = (self.get_run(run_id) for run_id in ids)
        return [run for run in runs if run is not None]


def _history(
    recent: Mapping[str, list[tuple[str, float]]],
    flaky: Iterable[str],
    baseline: Mapping[str, str],
    co: Mapping[str, Mapping[str, int]],
    known: frozenset[str],
) -> History:
    """Build the selector's snapshot: the newest RECENT_LIMIT outcomes, oldest first."""
    flaky = set(flaky)
    variants: dict[str, VariantHistory] = {}
    for vid in set(recent) | flaky | set(baseline):
        kept = list(recent.get(vid, ()))[-RECENT_LIMIT:]
        timed = [d for s, d in kept if s != Status.SKIPPED]
        base = baseline.get(vid)
        variants[vid] = VariantHistory(
            recent=tuple(Status(s) for s, _ in kept),
            mean_duration_s=sum(timed) / len(timed) if timed else None,
            flaky=vid in flaky,
            baseline=Status(base) if base else None,
        )
    return History(variants, co, known)


def open_history(state_dir: str | Path, redis_url: str | None = None) -> HistoryStore:
    """Redis when a URL is configured, else the SQLite file in the state directory."""
    if redis_url:
        return RedisHistory(redis_url)
    return SQLiteHistory(Path(state_dir) / "history.sqlite3")
