"""The main job's first two steps, shared by the embedded and the distributed executor.

plan (selector stages 1-3) -> execute_shard, once per shard -> finish (`finishing`: stage 4's
reruns, baseline comparison and expansion; History; export). Each step takes plain,
JSON-serializable input so a Celery task can carry it; each is idempotent by run id and shard
index. Here: `plan`, what a run traces, the one shard executor (`execute_shard`,
`execute_ids`), the run's state in History (`mark_stopped`).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from contracts.run_summary import PlanFacts, RunSummary
from suites.claims import Claims
from suites.model import Inventory
from workflows.run import on_build, planning, under_test
from workflows.run.context import Clock, RunContext
from workflows.run.layout import BASE_SHARD, REFERENCE_SHARD, RunLayout
from workflows.run.run_folder import (
    claim_out_dir,
    mark_started,
)
from workflows.run.run_model import (
    EnvironmentUnderTest,
    PipelineError,
    PlannedRun,
    RunRequest,
)
from workflows.runner import zygote
from workflows.runner.change_overlay import AppliedChange
from workflows.runner.shard_runner import (
    PLUGIN,
    Limits,
    ProgressCallback,
    ShardRun,
    run_shard,
)
from workflows.settings import Settings
from workflows.stores import pending
from workflows.stores.history import HistoryStore, RunRecord, RunState
from workflows.stores.inventory_cache import read_inventory
from workflows.tracing.trace_store import (
    TRACE_FILE,
    refresh_ids,
    tracing_env,
)


def now_iso(clock: Clock = time.time) -> str:
    return dt.datetime.fromtimestamp(clock(), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_inventory(path: str | Path) -> Inventory:
    """An Inventory file (the main job's, each upgrade environment's); a missing or unreadable
    one is a PipelineError naming it. A file read before and not changed since is not read
    again (`read_inventory`)."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(
            f"{path}: no inventory there; build one with `spyre-ci inventory --out {path}` "
            "(in an environment with that torch)"
        )
    try:
        return read_inventory(path)
    except (
        OSError,
        EOFError,
        UnicodeDecodeError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
    ) as exc:
        raise PipelineError(
            f"{path}: not a readable inventory ({type(exc).__name__}: {exc}); "
            "build it again with `spyre-ci inventory --out FILE`"
        ) from exc


def plan(request: RunRequest, ctx: RunContext) -> PlannedRun:
    """Selector stages 1-3; the plan is saved as `out_dir/plan.json`.

    An out directory that holds another run which has not finished is refused: planning over
    it would lose that run's plan, and `runs resume` of it would finish this one instead.
    """
    out = Path(request.out_dir)
    history = ctx.history
    # a diff that does not apply stops here
    change = under_test.applied_change(request, ctx.settings)
    # A run on another torch (a build of the source, a prepared head environment) plans from
    # that torch's own Inventory, whoever asked for the run (the CLI, the intake).
    own = on_build.inventory_for(request, ctx.settings, request.specs)
    if own is not None and str(own) != request.inventory:
        request = replace(request, inventory=str(own))
    claim_out_dir(out, request.run_id, history)
    inventory = load_inventory(request.inventory)
    snapshot = history.snapshot(p.path for p in planning.change_set(request).paths)
    result = planning.make_plan(request, inventory, snapshot, ctx.traces, ctx.sources)
    environment = under_test.resolve(request, change, ctx.settings)
    if under_test.deferred(request, change, ctx.settings):
        result = _defer(request, change, environment, result, ctx)
        if change.state != "not_applied":
            # What runs now is what the applied files need: the files that wait for a build
            # are not in this torch, and their variants (recorded as pending) would test
            # nothing of them here; they run on the first build that holds them.
            waiting = frozenset(f.path for f in under_test.needs_build(change))
            result = planning.make_plan(
                request, inventory, snapshot, ctx.traces, ctx.sources, without=waiting
            )
    # edited upstream tests are tested only by their own variants
    environment = under_test.reached(environment, (v for shard in result.shards for v in shard))
    planned = PlannedRun(
        request,
        result.plan,
        result.shards,
        result.holdout,
        now_iso(ctx.clock),
        snapshot.to_json(),
        environment,
        result.notes,
    )
    out.mkdir(parents=True, exist_ok=True)
    _plan_tracing(request, inventory, result)
    layout = ctx.layout(request)
    layout.plan_file.write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    layout.planned_file.write_text(json.dumps(planned.to_json()) + "\n", encoding="utf-8")
    history.save_run(
        RunRecord(request.run_id, RunState.PLANNED, summary=RunSummary(plan_facts(planned)))
    )
    return planned


def _defer(
    request: RunRequest,
    change: AppliedChange,
    environment: EnvironmentUnderTest,
    result: planning.PlanResult,
    ctx: RunContext,
) -> planning.PlanResult:
    """Record what of the change needs a build as pending on the first build that will
    contain it, with the variants the plan chose for it; when nothing of the change could be
    applied, nothing runs now (the build under test does not hold the change). When some of
    it was applied, `plan` plans again without the files that wait."""
    trigger = request.event
    pending.record(
        ctx.settings.state_dir,
        pending.PendingChange(
            repo=trigger.repo,
            base=trigger.base_sha or "",
            head=trigger.head_sha,
            delivery_id=trigger.delivery_id,
            message=(trigger.commit_messages or ("",))[-1].split("\n", 1)[0],
            files=tuple(f.path for f in under_test.needs_build(change)),
            selected=tuple(result.selected_ids),
            base_build=environment.torch.git_sha,
            base_build_version=environment.torch.version,
            diff_text=request.diff_text or "",
            run_id=request.run_id,
            recorded_at=now_iso(ctx.clock),
            event_type=trigger.kind,
            payload=dict(trigger.payload),
        ),
    )
    if change.state != "not_applied":
        return result
    return replace(result, shards=[], holdout=[])


def plan_facts(planned: PlannedRun) -> PlanFacts:
    """What History's summary keeps of a plan; `kind` and `head_sha` place the run on
    upstream's line (`workflows.run.forensics`)."""
    trigger = planned.request.event
    return PlanFacts(
        event=f"{trigger.kind} {trigger.head_sha[:12] or trigger.delivery_id}",
        kind=trigger.kind,
        head_sha=trigger.head_sha,
        selected=len(planned.plan.selected),
        holdout=len(planned.holdout),
        fallback=planned.plan.fallback,
        out_dir=str(Path(planned.request.out_dir)),
        # With which backend and torch: a failure that passed on another torch with the same
        # backend was broken upstream (`dashboard_export.triage`).
        backend=(planned.environment or EnvironmentUnderTest()).backend,
        torch_sha=planned.environment.torch.git_sha if planned.environment else "",
        tried=planned.request.change_strict,
    )


def _plan_tracing(request: RunRequest, inventory: Inventory, result: planning.PlanResult) -> None:
    """Choose what the run traces: variants the joined trace lacks or has stale, and a
    rotating share of the rest (`SPYRE_CI_TRACE_SHARE`); their traces are stored at finish."""
    if not request.record_traces:
        return
    run_ids = [vid for shard in result.shards for vid in shard]
    fingerprints = {v.id: v.fingerprint for v in inventory.variants}
    chosen = refresh_ids(run_ids, result.trace, fingerprints, request.trace_share, request.run_id)
    path = RunLayout.of(request).trace_ids
    if chosen:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{vid}\n" for vid in chosen), encoding="utf-8")


def _trace_env(request: RunRequest, name: str, runner: str | None = None) -> dict[str, str] | None:
    """Tracing into the shard's folder: `trace.ndjson`, or `<runner>.trace.ndjson` for another
    runner of the same shard (a thief), so no two processes write one file."""
    layout = RunLayout.of(request)
    ids = layout.trace_ids
    if not ids.exists() or ids.stat().st_size == 0:
        return None
    file = TRACE_FILE if runner is None or runner == name else f"{runner}.{TRACE_FILE}"
    return tracing_env(ids, layout.shard(name) / file)


def execute_shard(
    request: RunRequest,
    name: str,
    ids: Sequence[str],
    progress: ProgressCallback | None = None,
    *,
    settings: Settings,
    parallel: int | None = None,
    stop: threading.Event | None = None,
    claims: Claims | None = None,
    changed: bool | None = None,
) -> ShardRun:
    """Run one shard's ids on the backend; JUnit files are kept under `out_dir/junit/`.

    `settings`: those of the process that runs the shard (the command's, or the Celery
    worker's): where it looks for a prepared torch environment of the change's head, and
    whether its test processes may fork from the warm zygote.

    `changed`: on the torch with the run's change applied (the default, except for the
    shard named `BASE_SHARD`); False runs them on the base torch (the A/B comparison).
    `parallel`: shards running at once beside this one (default: the plan's shard count;
    reruns and expansions run alone and pass 1). `stop`: see `run_shard`. `claims`: the
    shard's ids are shared with other runners (work stealing); this runner's files in the
    shard's folder are named by its token, so a resumed run reads what every runner did.
    """
    if changed is None:
        changed = name not in (BASE_SHARD, REFERENCE_SHARD)
    layout = RunLayout.of(request)
    mark_started(layout.shard(name))
    trace = _trace_env(request, name, claims.token if claims is not None else None) or {}
    if name == REFERENCE_SHARD:  # the installed torch as it is: no build, drift or change
        python: str | None = None
        side: dict[str, str] = {}
        trace = {}  # its traces are another torch's: never stored under this run's
    else:
        python = under_test.interpreter(request, changed, settings)
        side = (
            change_env(request, settings) if changed else on_build.base_side_env(request, settings)
        )
    return execute_ids(
        claims.token if claims is not None else name,
        ids,
        layout.shard(name),
        limits=request.limits,
        specs=request.specs,
        progress=progress,
        parallel=request.shards if parallel is None else parallel,
        stop=stop,
        junit_dir=layout.junit,
        python=python,
        env={
            **trace,
            **side,
        },
        claims=claims,
        warm=settings.zygote,
    )


def warm_up(request: RunRequest, settings: Settings) -> None:
    """Start warming (it returns at once) the zygotes this run's test processes fork from:
    the changed torch's and, when a change is applied, the base torch's, where any failure
    runs again (the A/B), each on its side's interpreter (a build of the source's, or this
    one). Called before the Inventory is read or built and the plan made, so the imports of
    both overlap them and each other. With the warm runner shared (`spyre-ci`, a worker) a
    zygote is started once per state directory."""
    if not settings.zygote:
        return
    changed = change_env(request, settings)
    sides = [(changed, under_test.interpreter(request, True, settings))]
    if changed:
        base = on_build.base_side_env(request, settings)
        sides.append((base, under_test.interpreter(request, False, settings)))
    what = (settings, tuple(request.specs), tuple((tuple(sorted(e.items())), p) for e, p in sides))
    now = time.monotonic()
    with _WARMED_LOCK:
        if _WARMED and _WARMED[0][0] == what and now - _WARMED[0][1] < WARM_UP_AGAIN_S:
            return  # `spyre-ci run` warmed these before its Inventory; its driver asks again
        _WARMED[:] = [(what, now)]
    for env, python in sides:
        zygote.prestart(PLUGIN, request.specs, env, python, request.memory_mb)


# The last warm-up of this process and when. The same one again within WARM_UP_AGAIN_S is
# not done twice (a zygote key costs the specs' and the backend's digests, and a look at every
# file the zygote loaded): it is only a head start, and each fork finds, checks and if need be
# starts its zygote itself. Later, it is done again (a worker's next run of the same change).
_WARMED: list[tuple[object, float]] = []
_WARMED_LOCK = threading.Lock()
WARM_UP_AGAIN_S = 30.0


def change_env(request: RunRequest, settings: Settings) -> dict[str, str]:
    """What makes a test process of `request` import the changed torch (empty when the run
    applies nothing). The overlay is prepared on the machine that runs the shard."""
    return under_test.applied_change(request, settings).env()


def execute_ids(
    name: str,
    ids: Sequence[str],
    work: Path,
    *,
    limits: Limits,
    specs: Sequence[str] = (),
    progress: ProgressCallback | None = None,
    parallel: int = 1,
    stop: threading.Event | None = None,
    python: str | None = None,
    junit_dir: Path | None = None,
    env: dict[str, str] | None = None,
    claims: Claims | None = None,
    warm: bool,
) -> ShardRun:
    """The one shard executor: the main job's shards, reruns and expansions, and the upgrade
    run's shards on each version (`python`: that environment's interpreter). JUnit files are
    copied into `junit_dir` when given (unique per process: nothing is overwritten). `warm`:
    the test processes may fork from the warm zygote (`Settings.zygote`, `run_shard`)."""
    result = run_shard(
        name,
        list(ids),
        work,
        limits=limits,
        specs=specs,
        progress=progress,
        parallel=parallel,
        stop=stop,
        python=python,
        env=env,
        claims=claims,
        warm=warm,
    )
    if junit_dir is not None:
        junit_dir.mkdir(parents=True, exist_ok=True)
        for path in result.junit_paths:
            shutil.copyfile(path, junit_dir / path.name)
    return ShardRun(result.outcomes, result.fault, tuple(result.junit_paths))


def _with_state(
    history: HistoryStore,
    run_id: str,
    state: RunState,
    summary: RunSummary | None = None,
) -> RunRecord:
    run = history.get_run(run_id) or RunRecord(run_id, state)
    merged = run.summary.merged(summary) if summary is not None else run.summary
    return replace(run, state=state, summary=merged)


def mark_stopped(history: HistoryStore, run_id: str, exc: BaseException) -> None:
    """Record why a run stopped, so `spyre-ci runs show` can say it and how to go on."""
    why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
    try:
        run = history.get_run(run_id)
        if run is not None and not run.state.final:
            history.save_run(
                replace(
                    run,
                    state=RunState.STOPPED,
                    summary=replace(run.summary, stopped_because=why[:500]),
                )
            )
    except Exception:  # noqa: BLE001 - History may be what failed; the original error wins
        pass
