"""History: what past runs learned, behind one interface with two stores.

`SQLiteHistory` (a file in the state directory) is the embedded default and needs no
server; `RedisHistory` is shared by every worker when Redis is configured. Both make every
write idempotent by run: recording the same run twice (a redelivered task) changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from suites.model import Outcome, Status

RECENT = 10  # outcomes kept per variant


class HistoryError(Exception):
    """A History store cannot be read or written; the message names the store."""


@dataclass(frozen=True)
class VariantRecord:
    """What History knows of one variant."""

    recent: tuple[str, ...] = ()  # newest first, Status values
    mean_duration_s: float | None = None
    flaky: bool = False
    baseline: str | None = None  # last status on an upstream baseline run


@dataclass
class RunRecord:
    """One run of the pipeline as `spyre-ci runs list/show` presents it."""

    run_id: str
    state: str  # planned | running | finishing | completed | failed
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


class History(Protocol):
    def record_outcomes(
        self, run_id: str, outcomes: Sequence[Outcome], *, flaky: Iterable[str] = (),
        baseline: bool = False,
    ) -> None: ...

    def record_cofailures(self, run_id: str, paths: Sequence[str], failing: Sequence[str]) -> None:
        ...

    def variants(self, ids: Iterable[str] | None = None) -> dict[str, VariantRecord]: ...

    def cofailures(self, paths: Iterable[str]) -> dict[str, dict[str, int]]: ...

    def save_run(self, run: RunRecord) -> None: ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def list_runs(self, limit: int = 20) -> list[RunRecord]: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS outcome (
    run_id TEXT NOT NULL, variant TEXT NOT NULL, status TEXT NOT NULL,
    duration_s REAL NOT NULL, at REAL NOT NULL, baseline INTEGER NOT NULL,
    PRIMARY KEY (run_id, variant)
);
CREATE INDEX IF NOT EXISTS outcome_variant ON outcome (variant, at);
CREATE TABLE IF NOT EXISTS flaky (variant TEXT PRIMARY KEY, run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cofailure (
    run_id TEXT NOT NULL, path TEXT NOT NULL, variant TEXT NOT NULL,
    PRIMARY KEY (run_id, path, variant)
);
CREATE INDEX IF NOT EXISTS cofailure_path ON cofailure (path);
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

    def record_outcomes(
        self, run_id: str, outcomes: Sequence[Outcome], *, flaky: Iterable[str] = (),
        baseline: bool = False,
    ) -> None:
        now = time.time()
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO outcome VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, o.id, str(o.status), o.duration_s, now, int(baseline)) for o in outcomes],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO flaky VALUES (?, ?)", [(v, run_id) for v in flaky]
            )

    def record_cofailures(self, run_id: str, paths: Sequence[str], failing: Sequence[str]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR IGNORE INTO cofailure VALUES (?, ?, ?)",
                [(run_id, p, v) for p in paths for v in failing],
            )

    def variants(self, ids: Iterable[str] | None = None) -> dict[str, VariantRecord]:
        rows = self._db.execute(
            "SELECT variant, status, duration_s, baseline FROM outcome ORDER BY at DESC"
        ).fetchall()
        wanted = None if ids is None else set(ids)
        flaky = {row[0] for row in self._db.execute("SELECT variant FROM flaky")}
        grouped: dict[str, list[tuple[str, float, int]]] = {}
        for variant, status, duration, is_baseline in rows:
            if wanted is None or variant in wanted:
                grouped.setdefault(variant, []).append((status, duration, is_baseline))
        return {
            variant: _summarize(
                [s for s, _, _ in entries][:RECENT],
                [d for _, d, _ in entries][:RECENT],
                variant in flaky,
                next((s for s, _, b in entries if b), None),
            )
            for variant, entries in grouped.items()
        }

    def cofailures(self, paths: Iterable[str]) -> dict[str, dict[str, int]]:
        result: dict[str, dict[str, int]] = {}
        for path in set(paths):
            for variant, count in self._db.execute(
                "SELECT variant, COUNT(*) FROM cofailure WHERE path = ? GROUP BY variant", (path,)
            ):
                result.setdefault(path, {})[variant] = int(count)
        return result

    def save_run(self, run: RunRecord) -> None:
        run.updated_at = time.time()
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO run VALUES (?, ?, ?)",
                (run.run_id, json.dumps(run.to_json()), run.updated_at),
            )

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._db.execute("SELECT body FROM run WHERE run_id = ?", (run_id,)).fetchone()
        return RunRecord.from_json(json.loads(row[0])) if row else None

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        rows = self._db.execute(
            "SELECT body FROM run ORDER BY updated_at DESC LIMIT ?", (limit,)
        ).fetchall()
        return [RunRecord.from_json(json.loads(body)) for (body,) in rows]


# Applies one run's outcome to a variant once: the per-run set makes a retried task a no-op.
_RECORD_OUTCOME = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], 604800)
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
if ARGV[4] == '1' then redis.call('HSET', KEYS[3], ARGV[1], ARGV[5]) end
return 1
"""


class RedisHistory:
    """History in Redis, shared by every worker."""

    def __init__(self, url: str, prefix: str = "spyre-ci:history") -> None:
        import redis

        self._redis = redis.Redis.from_url(url, decode_responses=True)
        self._prefix = prefix
        self._record = self._redis.register_script(_RECORD_OUTCOME)
        self.url = url

    def _key(self, *parts: str) -> str:
        return ":".join((self._prefix, *parts))

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        import redis

        try:
            yield
        except redis.RedisError as exc:
            raise HistoryError(f"Redis History at {self.url}: {what} failed: {exc}") from exc

    def record_outcomes(
        self, run_id: str, outcomes: Sequence[Outcome], *, flaky: Iterable[str] = (),
        baseline: bool = False,
    ) -> None:
        with self._guard("recording outcomes"):
            pipe = self._redis.pipeline(transaction=False)
            for o in outcomes:
                entry = json.dumps([str(o.status), o.duration_s])
                self._record(
                    keys=[self._key("applied", run_id), self._key("v", o.id),
                          self._key("baseline")],
                    args=[o.id, entry, RECENT, "1" if baseline else "0", str(o.status)],
                    client=pipe,
                )
            flaky = list(flaky)
            if flaky:
                pipe.sadd(self._key("flaky"), *flaky)
            pipe.execute()

    def record_cofailures(self, run_id: str, paths: Sequence[str], failing: Sequence[str]) -> None:
        with self._guard("recording co-failures"):
            pipe = self._redis.pipeline(transaction=True)
            for path in paths:
                for variant in failing:
                    pipe.sadd(self._key("co", path, variant), run_id)
                    pipe.sadd(self._key("co-index", path), variant)
            pipe.execute()

    def variants(self, ids: Iterable[str] | None = None) -> dict[str, VariantRecord]:
        with self._guard("reading variant history"):
            if ids is None:
                prefix = self._key("v", "")
                ids = [k[len(prefix):] for k in self._redis.scan_iter(match=prefix + "*")]
            ids = list(ids)
            pipe = self._redis.pipeline(transaction=False)
            for vid in ids:
                pipe.lrange(self._key("v", vid), 0, RECENT - 1)
            lists = pipe.execute()
            flaky = self._redis.smembers(self._key("flaky"))
            baseline = self._redis.hmget(self._key("baseline"), ids) if ids else []
        result = {}
        for vid, raw, base in zip(ids, lists, baseline, strict=True):
            if not raw:
                continue
            entries = [json.loads(item) for item in raw]
            result[vid] = _summarize(
                [s for s, _ in entries], [d for _, d in entries], vid in flaky, base
            )
        return result

    def cofailures(self, paths: Iterable[str]) -> dict[str, dict[str, int]]:
        result: dict[str, dict[str, int]] = {}
        with self._guard("reading co-failures"):
            for path in set(paths):
                for variant in self._redis.smembers(self._key("co-index", path)):
                    result.setdefault(path, {})[variant] = int(
                        self._redis.scard(self._key("co", path, variant))
                    )
        return result

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


def _summarize(
    statuses: Sequence[str], durations: Sequence[float], flaky: bool, baseline: str | None
) -> VariantRecord:
    timed = [d for s, d in zip(statuses, durations, strict=True) if s != str(Status.SKIPPED)]
    return VariantRecord(
        recent=tuple(statuses),
        mean_duration_s=sum(timed) / len(timed) if timed else None,
        flaky=flaky,
        baseline=baseline,
    )


def open_history(state_dir: str | Path, redis_url: str | None = None) -> History:
    """Redis when a URL is configured, else the SQLite file in the state directory."""
    if redis_url:
        return RedisHistory(redis_url)
    return SQLiteHistory(Path(state_dir) / "history.sqlite3")
