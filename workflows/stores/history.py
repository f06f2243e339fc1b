"""History: what past runs learned, behind one interface with two stores.

Long on purpose: the interface and both stores stay side by side because each
operation (apply, hold, forget, snapshot) must mean the same on both, keyed by (run, variant,
attempt); reading the two implementations of one operation together is how that is checked.

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
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from contracts.codec import Record
from contracts.run_summary import PlanFacts, RunSummary
from selector.history import RECENT_LIMIT, History, HistoryUpdate, VariantHistory
from suites.model import Status
from workflows.errors import Unavailable
from workflows.stores import redis_clients
from workflows.stores.redis_clients import masked

__all__ = ["HistoryError", "HistoryStore", "RedisHistory", "SQLiteHistory", "masked"]


class HistoryError(Unavailable):
    """A History store cannot be read or written; the message names the store. An outage
    (exit 3): without History no verdict is possible."""


class RunState(StrEnum):
    """Where a run is. The last four are final: `runs resume` refuses them."""

    PLANNED = "planned"  # shards running, or stopped before they all reported
    FINISHING = "finishing"  # reruns, expansion, History and export
    STOPPED = "stopped"  # ended by an error or an interrupt; `runs resume` continues it
    COMPLETED = "completed"  # verified, learned, exported
    HELD = "held"  # completed, but History has not learned it: its failures look like ours
    INFRA_ERROR = "infra-error"  # its tests could not run: nothing learned, exit code 3
    FORGOTTEN = "forgotten"  # `history forget` removed what it taught

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({RunState.COMPLETED, RunState.HELD, RunState.INFRA_ERROR, RunState.FORGOTTEN})


def attempts(records: Iterable[Any]) -> list[tuple[Any, int]]:
    """Each outcome record with its attempt: 0 for a variant's first run, 1.. for reruns."""
    seen: dict[str, int] = {}
    numbered = []
    for record in records:
        n = seen.get(record.id, 0)
        seen[record.id] = n + 1
        numbered.append((record, n))
    return numbered


@dataclass
class RunRecord(Record):
    """One run of the pipeline as `spyre-ci runs list/show` presents it."""

    run_id: str
    state: RunState
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    summary: RunSummary = field(default_factory=RunSummary)


@dataclass(frozen=True)
class RunHead:
    """What a look over many runs needs of each (`workflows.run.forensics` reads up to 500):
    its id, state, creation time and plan facts, decoded from its stored JSON without the
    rest of its summary (the results and the change under test: 0.5 ms a run, a quarter of
    a second of every run's finish once History held 500 runs)."""

    run_id: str
    state: RunState
    created_at: float
    plan: PlanFacts | None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RunHead:
        summary = body.get("summary") or {}
        facts = {k: summary[k] for k in _PLAN_FIELDS if k in summary}
        return cls(
            str(body["run_id"]),
            RunState(body["state"]),
            float(body.get("created_at") or 0.0),
            PlanFacts.from_json(facts) if facts else None,
        )


_PLAN_FIELDS = tuple(f.name for f in fields(PlanFacts))


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

    def list_run_heads(self, limit: int = 20) -> list[RunHead]:
        """The `limit` most recently updated runs, as `list_runs`, each only its head."""
        ...

    def forget(self, run_id: str) -> dict[str, int]:
        """Remove everything `run_id` taught (idempotent); returns what was removed, by kind."""
        ...

    def hold(self, run_id: str, update: HistoryUpdate, reason: str) -> None:
        """Keep an update aside, unlearned, until `confirm(run_id)`."""
        ...

    def held(self, run_id: str) -> tuple[HistoryUpdate, str] | None: ...

    def confirm(self, run_id: str) -> bool:
        """Apply a held update; False when the run has none."""
        ...


# Baselines kept per variant, newest last: what `forget` falls back to.
_BASELINES_KEPT = 3
_KNOWN_KEPT = 3
_SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outcome (
    run_id TEXT NOT NULL, variant TEXT NOT NULL, attempt INTEGER NOT NULL, seq INTEGER NOT NULL,
    status TEXT NOT NULL, duration_s REAL NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (run_id, variant, attempt)
);
CREATE INDEX IF NOT EXISTS outcome_variant ON outcome (variant, at, seq);
CREATE TABLE IF NOT EXISTS flaky (variant TEXT PRIMARY KEY, run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS baseline (variant TEXT NOT NULL, run_id TEXT NOT NULL,
                                     status TEXT NOT NULL, at REAL NOT NULL,
                                     PRIMARY KEY (variant, run_id));
CREATE TABLE IF NOT EXISTS cofailure (
    run_id TEXT NOT NULL, path TEXT NOT NULL, variant TEXT NOT NULL,
    PRIMARY KEY (run_id, path, variant)
);
CREATE INDEX IF NOT EXISTS cofailure_path ON cofailure (path);
CREATE TABLE IF NOT EXISTS known (run_id TEXT PRIMARY KEY, at REAL NOT NULL, ids TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS held (run_id TEXT PRIMARY KEY, reason TEXT NOT NULL,
                                 body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run (run_id TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at REAL);
"""

# History files of the first layout (outcomes keyed by position, one baseline per variant)
# are moved to this one in place: what they learned is kept, attributed to the same runs.
_MIGRATE_1 = """
ALTER TABLE outcome RENAME TO outcome_v1;
ALTER TABLE baseline RENAME TO baseline_v1;
ALTER TABLE known RENAME TO known_v1;
{schema}
INSERT OR IGNORE INTO outcome SELECT run_id, variant, seq, seq, status, duration_s, at
    FROM outcome_v1;
INSERT OR IGNORE INTO baseline SELECT variant, run_id, status, 0 FROM baseline_v1;
INSERT OR IGNORE INTO known SELECT COALESCE(run_id, ''), 0, ids FROM known_v1;
DROP TABLE outcome_v1; DROP TABLE baseline_v1; DROP TABLE known_v1;
"""


class SQLiteHistory:
    """History in one SQLite file: the embedded default.

    Every read and write goes through `_guard`: SQLite's errors (a full disk, "disk I/O
    error", a file that cannot be written) are a `HistoryError` naming the file, and a write
    that fails is rolled back whole, so nothing half-written is ever read back.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            self._open()
        except sqlite3.Error as exc:
            raise HistoryError(
                f"{self.path}: cannot open the History database: {exc}{_disk_hint(exc)}"
            ) from exc

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            if self._db.in_transaction:  # a failed COMMIT leaves it open: end it, unwritten
                with suppress(sqlite3.Error):
                    self._db.rollback()
            raise HistoryError(
                f"History at {self.path}: {what} failed: {exc}{_disk_hint(exc)}"
            ) from exc

    def _open(self) -> None:
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(outcome)")}
        with self._db:
            if version < _SCHEMA_VERSION and columns and "attempt" not in columns:
                self._db.executescript(_MIGRATE_1.format(schema=_SCHEMA))
            else:
                self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")

    def apply(self, run_id: str, update: HistoryUpdate) -> None:
        with self._guard(f"recording run {run_id}"):
            now = time.time()
            with self._db:
                self._db.executemany(
                    "INSERT OR IGNORE INTO outcome VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (run_id, o.id, attempt, seq, str(o.status), o.duration_s, now)
                        for seq, (o, attempt) in enumerate(attempts(update.outcomes))
                    ],
                )
                self._db.executemany(
                    "INSERT OR REPLACE INTO flaky VALUES (?, ?)",
                    [(v, run_id) for v in update.mark_flaky],
                )
                self._db.executemany(
                    "INSERT OR IGNORE INTO baseline VALUES (?, ?, ?, ?)",
                    [(v, run_id, str(s), now) for v, s in update.baseline.items()],
                )
                if update.baseline:
                    self._db.execute(
                        "DELETE FROM baseline WHERE rowid IN (SELECT rowid FROM (SELECT rowid, "
                        "ROW_NUMBER() OVER (PARTITION BY variant ORDER BY at DESC, run_id DESC) "
                        "AS n FROM baseline) WHERE n > ?)",
                        (_BASELINES_KEPT,),
                    )
                self._db.executemany(
                    "INSERT OR IGNORE INTO cofailure VALUES (?, ?, ?)",
                    [(run_id, p, v) for p, ids in update.co_failures.items() for v in ids],
                )
                if update.known_variants is not None:
                    self._db.execute(
                        "INSERT OR IGNORE INTO known VALUES (?, ?, ?)",
                        (run_id, now, json.dumps(sorted(update.known_variants))),
                    )
                    self._db.execute(
                        "DELETE FROM known WHERE run_id NOT IN "
                        "(SELECT run_id FROM known ORDER BY at DESC LIMIT ?)",
                        (_KNOWN_KEPT,),
                    )
                self._db.execute("DELETE FROM held WHERE run_id = ?", (run_id,))

    def forget(self, run_id: str) -> dict[str, int]:
        with self._guard(f"forgetting run {run_id}"):
            removed: dict[str, int] = {}
            with self._db:
                for table in ("outcome", "flaky", "baseline", "cofailure", "known", "held"):
                    cursor = self._db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                    removed[table] = cursor.rowcount
            return removed

    def hold(self, run_id: str, update: HistoryUpdate, reason: str) -> None:
        with self._guard(f"holding run {run_id}"), self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO held VALUES (?, ?, ?)",
                (run_id, reason, json.dumps(update.to_json())),
            )

    def held(self, run_id: str) -> tuple[HistoryUpdate, str] | None:
        with self._guard(f"reading the held update of run {run_id}"):
            row = self._db.execute(
                "SELECT body, reason FROM held WHERE run_id = ?", (run_id,)
            ).fetchone()
            return (HistoryUpdate.from_json(json.loads(row[0])), row[1]) if row else None

    def confirm(self, run_id: str) -> bool:
        held = self.held(run_id)
        if held is None:
            return False
        self.apply(run_id, held[0])  # removes the held row in the same transaction
        return True

    def snapshot(self, paths: Iterable[str] = ()) -> History:
        with self._guard("reading History"):
            recent: dict[str, list[tuple[str, float]]] = {}
            for variant, status, duration in self._db.execute(
                "SELECT variant, status, duration_s FROM outcome ORDER BY at, run_id, seq"
            ):
                recent.setdefault(variant, []).append((status, duration))
            flaky = {v for (v,) in self._db.execute("SELECT variant FROM flaky")}
            baseline = dict(
                self._db.execute(  # the newest per variant wins
                    "SELECT variant, status FROM baseline ORDER BY at, run_id"
                ).fetchall()
            )
            co: dict[str, dict[str, int]] = {}
            for path in set(paths):
                for variant, count in self._db.execute(
                    "SELECT variant, COUNT(*) FROM cofailure WHERE path = ? GROUP BY variant",
                    (path,),
                ):
                    co.setdefault(path, {})[variant] = int(count)
            row = self._db.execute("SELECT ids FROM known ORDER BY at DESC LIMIT 1").fetchone()
            known = frozenset(json.loads(row[0])) if row else frozenset()
            return _history(recent, flaky, baseline, co, known)

    def save_run(self, run: RunRecord) -> None:
        with self._guard(f"saving run {run.run_id}"):
            run.updated_at = time.time()
            with self._db:
                self._db.execute(
                    "INSERT OR REPLACE INTO run VALUES (?, ?, ?)",
                    (run.run_id, json.dumps(run.to_json()), run.updated_at),
                )

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._guard(f"reading run {run_id}"):
            row = self._db.execute("SELECT body FROM run WHERE run_id = ?", (run_id,)).fetchone()
            return RunRecord.from_json(json.loads(row[0])) if row else None

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        return [RunRecord.from_json(body) for body in self._recent(limit)]

    def list_run_heads(self, limit: int = 20) -> list[RunHead]:
        return [RunHead.from_body(body) for body in self._recent(limit)]

    def _recent(self, limit: int) -> list[dict[str, Any]]:
        """The stored JSON of the `limit` most recently updated runs, newest first."""
        with self._guard("listing runs"):
            rows = self._db.execute(
                "SELECT body FROM run ORDER BY updated_at DESC LIMIT ?", (limit,)
            ).fetchall()
            return [json.loads(body) for (body,) in rows]


# Appends one entry of one run once: the per-run set of what it wrote makes a retried task a
# no-op, and is what `forget` reads to undo the run.
_APPEND_ONCE = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
return 1
"""

# Removes one run's entries from a list of JSON values (ARGV[2]: the run id's index or key).
_REMOVE_RUN = """
local removed = 0
local field = tonumber(ARGV[2]) or ARGV[2]
for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local ok, entry = pcall(cjson.decode, item)
  if ok and entry[field] == ARGV[1] then
    removed = removed + redis.call('LREM', KEYS[1], 0, item)
  end
end
return removed
"""


class RedisHistory:
    """History in Redis, shared by every worker.

    Layout under the prefix: `v:<variant>` outcomes `[status, duration, run, attempt]`;
    `b:<variant>` baselines `[status, run]`, newest last; `ids:v` and `ids:b` the variants
    with such a list (a snapshot reads them instead of scanning the keyspace, which grows
    with every run); `flaky` variant -> run that marked it; `co:<path>:<variant>` runs that
    saw it newly fail; `known` inventories `{run, ids}`; `wrote:<run>` what each run wrote;
    `held:<run>` an update kept aside.
    """

    def __init__(self, url: str, prefix: str = "spyre-ci:history") -> None:
        self.url = url
        self._redis = redis_clients.shared(url, socket_timeout=10)
        self._prefix = prefix
        self._append = self._redis.register_script(_APPEND_ONCE)
        self._remove = self._redis.register_script(_REMOVE_RUN)

    def _key(self, *parts: str) -> str:
        return ":".join((self._prefix, *parts))

    def _guard(self, what: str) -> AbstractContextManager[None]:
        return redis_clients.answering(self.url, what, HistoryError, "Redis History")

    def apply(self, run_id: str, update: HistoryUpdate) -> None:
        wrote = self._key("wrote", run_id)
        with self._guard(f"recording run {run_id}"):
            pipe = self._redis.pipeline(transaction=True)
            for o, attempt in attempts(update.outcomes):
                self._append(
                    keys=[wrote, self._key("v", o.id)],
                    args=[
                        f"v\x1f{o.id}\x1f{attempt}",
                        json.dumps([str(o.status), o.duration_s, run_id, attempt]),
                        RECENT_LIMIT,
                    ],
                    client=pipe,
                )
            for vid, status in update.baseline.items():
                self._append(
                    keys=[wrote, self._key("b", vid)],
                    args=[f"b\x1f{vid}", json.dumps([str(status), run_id]), _BASELINES_KEPT],
                    client=pipe,
                )
            for kind, vids in (("v", {o.id for o in update.outcomes}), ("b", update.baseline)):
                if vids:
                    pipe.sadd(self._key("ids", kind), *vids)
            if update.mark_flaky:
                pipe.hset(self._key("flaky"), mapping=dict.fromkeys(update.mark_flaky, run_id))
            for path, ids in update.co_failures.items():
                for variant in ids:
                    pipe.sadd(self._key("co", path, variant), run_id)
                    pipe.sadd(self._key("co-index", path), variant)
                    pipe.sadd(wrote, f"co\x1f{path}\x1f{variant}")
            if update.known_variants is not None:
                self._append(
                    keys=[wrote, self._key("known")],
                    args=[
                        "known",
                        json.dumps({"run": run_id, "ids": sorted(update.known_variants)}),
                        _KNOWN_KEPT,
                    ],
                    client=pipe,
                )
            pipe.delete(self._key("held", run_id))
            pipe.execute()

    def forget(self, run_id: str) -> dict[str, int]:
        wrote = self._key("wrote", run_id)
        removed = {"outcome": 0, "baseline": 0, "cofailure": 0, "flaky": 0, "known": 0, "held": 0}
        with self._guard(f"forgetting run {run_id}"):
            for entry in self._redis.smembers(wrote):
                kind, *rest = _text(entry).split("\x1f")
                if kind == "v":
                    removed["outcome"] += int(
                        self._remove(keys=[self._key("v", rest[0])], args=[run_id, 3])
                    )
                elif kind == "b":
                    removed["baseline"] += int(
                        self._remove(keys=[self._key("b", rest[0])], args=[run_id, 2])
                    )
                elif kind == "co":
                    path, variant = rest
                    removed["cofailure"] += int(
                        self._redis.srem(self._key("co", path, variant), run_id)
                    )
                    if not self._redis.exists(self._key("co", path, variant)):
                        self._redis.srem(self._key("co-index", path), variant)
                elif kind == "known":
                    removed["known"] += int(
                        self._remove(keys=[self._key("known")], args=[run_id, "run"])
                    )
            for flaky_id, marker in self._redis.hgetall(self._key("flaky")).items():
                if _text(marker) == run_id:
                    removed["flaky"] += int(self._redis.hdel(self._key("flaky"), flaky_id))
            removed["held"] = int(self._redis.delete(self._key("held", run_id)))
            self._redis.delete(wrote)
        return removed

    def hold(self, run_id: str, update: HistoryUpdate, reason: str) -> None:
        with self._guard(f"holding run {run_id}"):
            self._redis.set(
                self._key("held", run_id),
                json.dumps({"reason": reason, "update": update.to_json()}),
            )

    def held(self, run_id: str) -> tuple[HistoryUpdate, str] | None:
        with self._guard(f"reading the held update of run {run_id}"):
            body = self._redis.get(self._key("held", run_id))
        if body is None:
            return None
        data = json.loads(body)
        return HistoryUpdate.from_json(data["update"]), str(data["reason"])

    def confirm(self, run_id: str) -> bool:
        held = self.held(run_id)
        if held is None:
            return False
        self.apply(run_id, held[0])
        return True

    def snapshot(self, paths: Iterable[str] = ()) -> History:
        with self._guard("reading History"):
            lists: dict[str, dict[str, list[Any]]] = {"v": {}, "b": {}}
            self._index_old_lists()
            for kind, found in lists.items():
                ids = sorted(map(_text, self._redis.smembers(self._key("ids", kind))))
                pipe = self._redis.pipeline(transaction=False)
                for vid in ids:
                    pipe.lrange(self._key(kind, vid), 0, -1)
                for vid, raw in zip(ids, pipe.execute(), strict=True):
                    if raw:
                        found[vid] = [json.loads(item) for item in raw]
            flaky = [_text(key) for key in self._redis.hkeys(self._key("flaky"))]
            co: dict[str, dict[str, int]] = {}
            for path in set(paths):
                for variant in map(_text, self._redis.smembers(self._key("co-index", path))):
                    count = int(self._redis.scard(self._key("co", path, variant)))
                    if count:
                        co.setdefault(path, {})[variant] = count
            known_raw = self._redis.lindex(self._key("known"), -1)
        recent = {
            vid: [(e[0], float(e[1])) for e in entries] for vid, entries in lists["v"].items()
        }
        baseline = {vid: entries[-1][0] for vid, entries in lists["b"].items()}
        known = frozenset(json.loads(known_raw)["ids"]) if known_raw else frozenset()
        return _history(recent, flaky, baseline, co, known)

    def _index_old_lists(self) -> None:
        """A store written before the `ids:<kind>` indexes existed is scanned once and its
        lists indexed; `ids:built` says that was done (or that the store began indexed)."""
        built = self._key("ids", "built")
        if self._redis.exists(built):
            return
        for kind in ("v", "b"):
            prefix = self._key(kind, "")
            found = [
                _text(k)[len(prefix) :]
                for k in self._redis.scan_iter(match=prefix + "*", count=1000)
            ]
            if found:
                self._redis.sadd(self._key("ids", kind), *found)
        self._redis.set(built, "1")

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
        runs = (self.get_run(_text(run_id)) for run_id in ids)
        return [run for run in runs if run is not None]

    def list_run_heads(self, limit: int = 20) -> list[RunHead]:
        with self._guard("listing runs"):
            ids = self._redis.zrevrange(self._key("runs"), 0, limit - 1)
            bodies = self._redis.mget([self._key("run", _text(i)) for i in ids]) if ids else []
        return [RunHead.from_body(json.loads(body)) for body in bodies if body]


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


def _disk_hint(exc: sqlite3.Error) -> str:
    """What to look at when SQLite says the disk failed it."""
    text = str(exc)
    if "full" in text or "disk I/O" in text:
        return " (is the disk of the state directory full? a write that fails is undone whole)"
    return ""


def open_history(state_dir: str | Path, redis_url: str | None = None) -> HistoryStore:
    """Redis when a URL is configured, else the SQLite file in the state directory."""
    if redis_url:
        return RedisHistory(redis_url)
    return SQLiteHistory(Path(state_dir) / "history.sqlite3")


def _text(value: object) -> str:
    """A Redis reply as text: the client decodes (decode_responses=True), its types say
    bytes | str."""
    return value.decode() if isinstance(value, bytes) else str(value)
