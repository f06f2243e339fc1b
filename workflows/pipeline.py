"""The main job as three steps, shared by the embedded and the distributed executor.

plan (selector stages 1-3) -> execute_shard, once per shard -> finish (stage 4: reruns,
baseline comparison, expansion; History; export). Each step takes plain, JSON-serializable
input so a Celery task can carry it; each is idempotent by run id and shard index.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from relay.events import TriggerEvent
from suites.model import Inventory, Outcome, Status
from workflows import selection
from workflows.history import HistoryStore, RunRecord
from workflows.shard_runner import Limits, ProgressCallback, run_shard, short_message

PLANNED_FILE = "planned.json"  # everything `runs resume` needs to continue a stopped run


class PipelineError(Exception):
    """A run cannot go on; the message names the run and the step."""


@dataclass(frozen=True)
class RunRequest:
    """Everything a run needs, as plain data (a Celery task argument)."""

    run_id: str
    event: Mapping[str, Any]  # TriggerEvent.to_json()
    out_dir: str
    inventory: str
    diff_text: str | None = None
    full: bool = False
    budget_count: int | None = None
    budget_time_s: float | None = None
    holdout: float = 0.02
    specs: tuple[str, ...] = ()
    test_timeout_s: float = 300.0
    shard_timeout_s: float = 3 * 3600.0
    memory_mb: int | None = 8192
    shards: int = 1
    rerun_failures: bool = True
    expand: bool = True
    baseline: bool | None = None  # record results as the baseline; None: by event kind
    impact_map: str | None = None  # `spyre-ci impact-map` output the selector also reads
    downstream_repo: str = "torch-spyre/torch-spyre"
    workflow: str = "spyre-ci"
    job: str = "variant-tests"
    attempt: int = 1

    @property
    def trigger(self) -> TriggerEvent:
        return TriggerEvent.from_json(self.event)

    @property
    def limits(self) -> Limits:
        return Limits(self.test_timeout_s, self.shard_timeout_s, self.memory_mb)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["event"] = dict(self.event)
        data["specs"] = list(self.specs)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRequest:
        return cls(**{**data, "specs": tuple(data.get("specs", ()))})


def run_id_for(event: TriggerEvent, attempt: int = 1, *, started: str | None = None) -> str:
    """Stable per delivery: a redelivered or retried task lands on the same run.

    A run started by hand (`started`, a timestamp) is a new run each time, even for the
    same recorded event.
    """
    key = f"{event.delivery_id}:{attempt}:{started or ''}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{event.kind}-{event.head_sha[:8] or 'nosha'}-{digest}"


@dataclass
class PlannedRun:
    request: RunRequest
    plan: dict[str, Any]  # the selector's Plan as JSON
    shards: list[list[str]]
    holdout: list[str]
    started_at: str
    history: dict[str, Any]  # the History snapshot the plan was made from (selector JSON)

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request.to_json(), "plan": self.plan, "shards": self.shards,
                "holdout": self.holdout, "started_at": self.started_at,
                "history": self.history}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlannedRun:
        return cls(RunRequest.from_json(data["request"]), dict(data["plan"]),
                   [list(s) for s in data["shards"]], list(data["holdout"]), data["started_at"],
                   dict(data["history"]))


@dataclass
class FinishedRun:
    planned: PlannedRun
    outcomes: dict[str, Outcome]
    classification: dict[str, str]  # failing id -> new | pre-existing | flaky
    summary: dict[str, Any]
    out_dir: Path

    @property
    def new_failures(self) -> list[str]:
        return sorted(v for v, c in self.classification.items() if c == "new")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_inventory(path: str | Path) -> Inventory:
    path = Path(path)
    if not path.exists():
        raise PipelineError(
            f"{path}: no inventory there; build one with `spyre-ci inventory --out {path}`"
        )
    try:
        return Inventory.load(path)
    except (OSError, ValueError, KeyError) as exc:
        raise PipelineError(f"{path}: not a readable inventory: {exc}") from exc


def plan(request: RunRequest, history: HistoryStore) -> PlannedRun:
    """Selector stages 1-3; the plan is saved as `out_dir/plan.json`."""
    inventory = load_inventory(request.inventory)
    snapshot = history.snapshot(p.path for p in selection.change_set(request).paths)
    result = selection.make_plan(request, inventory, snapshot)
    planned = PlannedRun(request, result.plan_json, result.shards, result.holdout, now_iso(),
                         snapshot.to_json())
    out = Path(request.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(planned.plan, indent=1) + "\n", encoding="utf-8")
    (out / PLANNED_FILE).write_text(json.dumps(planned.to_json()) + "\n", encoding="utf-8")
    history.save_run(RunRecord(request.run_id, "planned", summary={
        "event": _event_label(request), "selected": len(result.selected_ids),
        "holdout": len(planned.holdout), "fallback": planned.plan.get("fallback"),
        "out_dir": str(out),
    }))
    return planned


def execute_shard(
    request: RunRequest, name: str, ids: Sequence[str], progress: ProgressCallback | None = None
) -> list[Outcome]:
    """Run one shard's ids on the backend; JUnit files are kept under `out_dir/junit/`."""
    out = Path(request.out_dir)
    work = out / "work" / name
    result = run_shard(name, list(ids), work, limits=request.limits, specs=request.specs,
                       progress=progress, parallel=request.shards)
    junit = out / "junit"
    junit.mkdir(parents=True, exist_ok=True)
    for path in result.junit_paths:
        shutil.copyfile(path, junit / path.name)
    return result.outcomes


def load_planned(out_dir: str | Path) -> PlannedRun:
    path = Path(out_dir) / PLANNED_FILE
    try:
        return PlannedRun.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise PipelineError(f"{path}: the run left no plan there; start it again") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PipelineError(f"{path}: not a readable plan: {exc}") from exc


def recorded_outcomes(out_dir: str | Path, shard: str) -> dict[str, Outcome]:
    """Outcomes a shard's test processes already reported (what a resumed run keeps)."""
    done: dict[str, Outcome] = {}
    for path in sorted((Path(out_dir) / "work" / shard).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # torn by the crash that stopped the run
            if event.get("event") == "end":
                done[event["id"]] = Outcome(event["id"], Status(event["status"]),
                                            float(event.get("duration_s", 0.0)),
                                            short_message(str(event.get("message", ""))))
    return done


ShardExecutor = Callable[[str, Sequence[str]], list[Outcome]]


def finish(
    planned: PlannedRun,
    outcomes: Sequence[Outcome],
    history: HistoryStore,
    execute: ShardExecutor,
) -> FinishedRun:
    """Selector stage 4, History, and export; `execute(name, ids)` runs reruns and expansions."""
    request = planned.request
    history.save_run(_with_state(history, request.run_id, "finishing"))
    inventory = load_inventory(request.inventory)
    verdict, update = selection.verify(planned, inventory, {o.id: o for o in outcomes}, execute)
    history.apply(request.run_id, update)
    finished = FinishedRun(planned, verdict.outcomes, verdict.classification, {},
                           Path(request.out_dir))
    finished.summary = summarize(finished, verdict.metrics)
    selection.export(finished, now_iso(), verdict)
    history.save_run(_with_state(history, request.run_id, "completed", finished.summary))
    return finished


def summarize(finished: FinishedRun, metrics: Mapping[str, Any]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for outcome in finished.outcomes.values():
        counts[str(outcome.status)] = counts.get(str(outcome.status), 0) + 1
    return {
        "event": _event_label(finished.planned.request),
        "selected": len(finished.planned.plan.get("selected", [])),
        "holdout": len(finished.planned.holdout),
        "ran": len(finished.outcomes),
        "failed": sum(n for s, n in counts.items() if Status(s).is_failure),
        "new_failures": len(finished.new_failures),
        "counts": counts,
        "metrics": {k: v for k, v in metrics.items() if not isinstance(v, list | tuple)},
        "fallback": finished.planned.plan.get("fallback"),
        "decision": finished.planned.plan.get("decision"),
        "why": "; ".join(finished.planned.plan.get("change_facts", {}).get("reasons", [])),
        "out_dir": str(finished.out_dir),
    }


def _event_label(request: RunRequest) -> str:
    trigger = request.trigger
    return f"{trigger.kind} {trigger.head_sha[:12] or trigger.delivery_id}"


def _with_state(
    history: HistoryStore, run_id: str, state: str, summary: Mapping[str, Any] | None = None
) -> RunRecord:
    run = history.get_run(run_id) or RunRecord(run_id, state)
    merged = {**run.summary, **(summary or {})}
    return replace(run, state=state, summary=merged)


def mark_stopped(history: HistoryStore, run_id: str, exc: BaseException) -> None:
    """Record why a run stopped, so `spyre-ci runs show` can say it and how to go on."""
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
    try:
        run = history.get_run(run_id)
        if run is not None and run.state != "completed":
            history.save_run(replace(run, state="stopped",
                                     summary={**run.summary, "stopped_because": why[:500]}))
    except Exception:  # noqa: BLE001 - History may be what failed; the original error wins
        pass
