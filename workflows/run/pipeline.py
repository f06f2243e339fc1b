"""The main job as three steps, shared by the embedded and the distributed executor.

Long on purpose: it holds the three steps of a run (plan, execute, finish) and the helpers only
those steps call (what a run traces, the A/B base outcomes, the summary). The run's data is in
`run_model` and its folder in `run_folder`; the summary is still a dict built here, and leaves
when it becomes a typed record.

plan (selector stages 1-3) -> execute_shard, once per shard -> finish (stage 4: reruns,
baseline comparison, expansion; History; export). Each step takes plain, JSON-serializable
input so a Celery task can carry it; each is idempotent by run id and shard index.

A shard that could not run its tests (`InfraFault`) is never a test result: finish then
ends the run as an infrastructure error (RunState.INFRA_ERROR, exit code 3) and History
learns nothing from it. A run whose failures look like the tool's fault is held back from
History (RunState.HELD) until `spyre-ci history confirm`. A planned id the specs no longer
have comes back from its shard as `Status.REMOVED`: finish takes it out of the results
(not a failure, not a fault, nothing learned) and the summary and report count it.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from contracts.classification import Classification
from suites.claims import Claims
from suites.model import Inventory, Outcome, Status
from workflows.run import exporting, on_build, planning, under_test, verification
from workflows.run.base_outcomes import BaseOutcomeCache
from workflows.run.context import Clock, RunContext
from workflows.run.layout import BASE_SHARD, REFERENCE_SHARD, RunLayout
from workflows.run.run_folder import (
    claim_out_dir,
    first_start,
    mark_started,
)
from workflows.run.run_model import (
    EnvironmentUnderTest,
    FinishedRun,
    PipelineError,
    PlannedRun,
    RunRequest,
)
from workflows.runner.change_overlay import AppliedChange
from workflows.runner.shard_runner import (
    InfraFault,
    Limits,
    ProgressCallback,
    ShardRun,
    run_shard,
)
from workflows.settings import Settings
from workflows.stores import pending
from workflows.stores.history import HistoryError, HistoryStore, RunRecord, RunState
from workflows.stores.run_summary import PlanFacts, RunResults, RunSummary, UnderTestNote
from workflows.tracing.trace_store import (
    TRACE_FILE,
    refresh_ids,
    tracing_env,
)
from workflows.tracing.trace_store import learn as learn_traces


def now_iso(clock: Clock = time.time) -> str:
    return dt.datetime.fromtimestamp(clock(), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Inventories read in this process, by file and its modification: a worker plans and
# finishes every run against the same one. An Inventory is frozen, so sharing it is safe.
_inventories: dict[tuple[str, int, int], Inventory] = {}


def load_inventory(path: str | Path) -> Inventory:
    """An Inventory file (the main job's, each upgrade environment's); a missing or unreadable
    one is a PipelineError naming it. A file read before and not changed since is not read
    again."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(
            f"{path}: no inventory there; build one with `spyre-ci inventory --out {path}` "
            "(in an environment with that torch)"
        )
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        inventory = _inventories.get(key)
        if inventory is None:
            inventory = Inventory.load(path)
            if len(_inventories) >= 4:
                _inventories.pop(next(iter(_inventories)))
            _inventories[key] = inventory
        return inventory
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
    applied, nothing runs now (the build under test does not hold the change)."""
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
        backend=dict(planned.environment.backend) if planned.environment else {},
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


ShardExecutor = Callable[[str, Sequence[str]], ShardRun]


class _Faulted(Exception):
    """A rerun or an expansion could not run: the verdict stops there."""


def finish(
    planned: PlannedRun,
    outcomes: Sequence[Outcome],
    ctx: RunContext,
    execute: ShardExecutor,
    faults: Sequence[InfraFault] = (),
) -> FinishedRun:
    """Selector stage 4, History, and export; `execute(name, ids)` runs reruns and expansions.

    `faults`: shards that could not run. Then, or when a rerun or the expansion cannot run,
    the run ends as an infrastructure error: exported as such, nothing learned.
    """
    request = planned.request
    history = ctx.history
    history.save_run(_with_state(history, request.run_id, RunState.FINISHING))
    outcomes = list(outcomes)
    faults = [f for f in faults if not _change_failure(planned, f, outcomes)]
    removed: dict[str, None] = {}  # ids the specs no longer have, in the order reported
    finished = FinishedRun(
        planned,
        {o.id: o for o in _results(outcomes, removed)},
        {},
        RunSummary(),
        Path(request.out_dir),
    )
    verdict = None
    if not faults:

        def run_more(name: str, ids: Sequence[str]) -> list[Outcome]:
            shard = execute(name, ids)
            more = list(shard.outcomes)
            if shard.fault is not None and not _change_failure(planned, shard.fault, more):
                faults.append(shard.fault)
                raise _Faulted
            return _results(more, removed)

        inventory = load_inventory(request.inventory)
        base = None
        read: dict[str, str] = {}  # base outcomes read from the cache: id -> the run that ran it
        fell_back: list[str] = []  # variants the nearest earlier torch did not run, if any
        reference = on_build.reference_for(request, ctx.settings)
        if change_env(request, ctx.settings):
            reference = ""

            def base(ids: Sequence[str]) -> dict[str, Outcome]:
                return _base_outcomes(planned, inventory, ids, run_more, ctx, read)

        elif reference:
            earlier = _earlier_torch(planned, ctx)
            installed, reference = reference, earlier.describe() if earlier else reference

            def base(ids: Sequence[str]) -> dict[str, Outcome]:
                def run_reference(ids: Sequence[str]) -> list[Outcome]:
                    shard = execute(REFERENCE_SHARD, ids)
                    if shard.fault is not None:
                        faults.append(shard.fault)
                        raise _Faulted
                    return list(shard.outcomes)

                found = _earlier_outcomes(earlier, inventory, ids, read) if earlier else {}
                rest = [vid for vid in ids if vid not in found]
                if rest:
                    found.update(
                        _reference_outcomes(planned, inventory, rest, run_reference, ctx, read)
                    )
                    if earlier is not None and not fell_back:
                        fell_back.append(f"{len(rest)} not run there: on {installed}")
                return found

        try:
            verdict, update = verification.verify(
                planned, inventory, finished.outcomes, run_more, base, reference=bool(reference)
            )
        except _Faulted:
            verdict = None
    else:
        reference, fell_back = "", []
    if verdict is not None:
        finished.base_outcomes = verdict.base
        finished.unattributed = verdict.unattributed
        finished.reference = (
            (reference + (f" ({fell_back[0]})" if fell_back else "")) if verdict.base else ""
        )
        finished.base_read = {v: r for v, r in read.items() if v in verdict.base}
    if faults or verdict is None:
        finished.faults = tuple(faults)
        state = RunState.INFRA_ERROR
    else:
        finished.outcomes, finished.classification = verdict.outcomes, verdict.classification
        finished.planned = replace(
            planned,
            environment=under_test.reached(
                planned.environment, under_test.ran_ids(finished.outcomes.values()), ran=True
            ),
        )
        finished.held_back = suspect_learning(finished, request.mass_failure_share)
        state = RunState.HELD if finished.held_back else RunState.COMPLETED
    # Timestamps of the run as a CI job (`spyre-ci readiness`): the record's created_at is
    # when it was planned; updated_at moves again when `history` commands change its state.
    finished.summary = summarize(
        finished, verdict.metrics if verdict else {}, list(removed), first_start(request)
    )
    found = None
    if verdict is not None and any(c != "flaky" for c in finished.classification.values()):
        run = history.get_run(request.run_id)
        created = run.created_at if run is not None else ctx.clock()
        try:
            found = exporting.failure_forensics(finished, history, created)
        except HistoryError as exc:  # forensics are lost, never the run
            print(f"spyre-ci: forensics of run {request.run_id} not made: {exc}", file=sys.stderr)
        else:
            finished.summary = replace(
                finished.summary, forensics=exporting.forensics_summary(found)
            )
    exporting.export(finished, now_iso(ctx.clock), verdict, found)
    # Learn last: only a run whose exports were written teaches History anything. A crash
    # before this line (a full disk, an export that fails) leaves History as it was and the
    # run resumable.
    if state is RunState.HELD:
        history.hold(request.run_id, update, finished.held_back or "")
    elif state is RunState.COMPLETED:
        history.apply(request.run_id, update)
    if state in (RunState.HELD, RunState.COMPLETED):
        _learn_traces(ctx, request, finished)
    if state is RunState.COMPLETED:
        _keep_own_outcomes(planned, finished, ctx)
    finished.summary = replace(finished.summary, finished_at=ctx.clock())
    history.save_run(_with_state(history, request.run_id, state, finished.summary))
    return finished


def _change_failure(planned: PlannedRun, fault: InfraFault, outcomes: list[Outcome]) -> bool:
    """Whether `fault` is the applied change's own failure, not the tool's: the changed torch
    does not import (a changed module's import hung, ended its process or raised, as the
    shard runner found it: `InfraFault.change`; or a syntax error in a changed module, named
    in the fault's cause). Then each variant it left unrun gets an `error` outcome saying so
    (added to `outcomes`): the change broke them, and the A/B comparison tells whether they
    pass without it."""
    broken = list(planned.environment.change.broken) if planned.environment else []
    why = fault.change
    if not why:
        paths = {b.split(":", 1)[0] for b in broken}
        if not any(path in fault.cause for path in paths) or "SyntaxError" not in fault.cause:
            return False
        why = "; ".join(broken[:3])
    message = "the change breaks importing torch (the change's failure, not the tool's): " + why
    outcomes.extend(Outcome(vid, Status.ERROR, 0.0, message) for vid in fault.unrun)
    return True


def _base_outcomes(
    planned: PlannedRun,
    inventory: Inventory,
    ids: Sequence[str],
    run_more: Callable[[str, Sequence[str]], list[Outcome]],
    ctx: RunContext,
    read: dict[str, str],
) -> dict[str, Outcome]:
    """`ids` on the base torch (the run's change not applied): from the cache of this torch's
    base outcomes by variant fingerprint, the rest run now (`BASE_SHARD`) and cached."""

    environment = planned.environment
    sha = environment.torch.git_sha if environment else ""
    cache = BaseOutcomeCache.for_torch(
        sha,
        ctx.settings.state_dir,
        base=on_build.base_identity(planned.request, ctx.settings),
        backend=dict(environment.backend) if environment else None,
    )
    return _cached_or_run(cache, inventory, ids, lambda m: run_more(BASE_SHARD, m), planned, read)


def _cached_or_run(
    cache: BaseOutcomeCache,
    inventory: Inventory,
    ids: Sequence[str],
    run: Callable[[Sequence[str]], list[Outcome]],
    planned: PlannedRun,
    read: dict[str, str],
) -> dict[str, Outcome]:
    """`ids` from `cache` (each one read is named in `read`, with the run that ran it), the
    rest run now by `run` and kept. An entry that fails its digest is said and run again."""
    fingerprints = {v.id: v.fingerprint for v in inventory.variants}
    kept = cache.read(ids, fingerprints)
    if cache.refused:
        print(
            f"spyre-ci: {len(cache.refused)} kept base outcome(s) in {cache.path} do not match "
            f"their digest (edited or cut): run again ({', '.join(cache.refused[:3])})",
            file=sys.stderr,
        )
    found = {vid: entry.outcome for vid, entry in kept.items()}
    read.update({vid: entry.run_id or "an earlier run" for vid, entry in kept.items()})
    missing = [vid for vid in ids if vid not in found]
    if missing:
        ran = {o.id: o for o in run(missing) if o.status is not Status.REMOVED}
        cache.put(ran.values(), fingerprints, planned.request.run_id)
        found.update(ran)
    return found


def _reference_outcomes(
    planned: PlannedRun,
    inventory: Inventory,
    ids: Sequence[str],
    run: Callable[[Sequence[str]], list[Outcome]],
    ctx: RunContext,
    read: dict[str, str],
) -> dict[str, Outcome]:
    """`ids` on the reference torch of a scheduled run on a build (the installed torch, as it
    is): from its cache, the rest run now (`REFERENCE_SHARD`) and cached. A variant the
    reference does not have (new on the build) is left out: there is nothing to compare."""

    environment = planned.environment
    cache = BaseOutcomeCache.for_torch(
        on_build.torch_git_sha(),
        ctx.settings.state_dir,
        base="reference",
        backend=dict(environment.backend) if environment else None,
    )
    return _cached_or_run(cache, inventory, ids, run, planned, read)


def _earlier_torch(planned: PlannedRun, ctx: RunContext) -> on_build.EarlierTorch | None:
    """The nearest earlier build with a scheduled run's own outcomes kept, said on stderr."""
    environment = planned.environment
    if environment is None:
        return None
    found = on_build.earlier_torch(
        planned.request,
        ctx.settings,
        environment.torch.git_sha,
        dict(environment.backend),
        log=lambda text: print(f"spyre-ci: {text}", file=sys.stderr),
    )
    if found is not None:
        print(f"spyre-ci: judged first against {found.describe()}", file=sys.stderr)
    return found


def _earlier_outcomes(
    earlier: on_build.EarlierTorch,
    inventory: Inventory,
    ids: Sequence[str],
    read: dict[str, str],
) -> dict[str, Outcome]:
    """What `ids` did on the nearest earlier build, as its scheduled run kept them (each
    named in `read` with that run): never run again here."""
    cache = BaseOutcomeCache(earlier.path)
    fingerprints = {v.id: v.fingerprint for v in inventory.variants}
    kept = cache.read(ids, fingerprints)
    read.update({vid: entry.run_id or earlier.run_id for vid, entry in kept.items()})
    return {vid: entry.outcome for vid, entry in kept.items()}


def _keep_own_outcomes(planned: PlannedRun, finished: FinishedRun, ctx: RunContext) -> None:
    """A completed run that applied nothing at its torch's own sha (a nightly or periodic
    run) has outcomes that are that torch's own: they are kept as its base outcomes, what
    fails on that torch itself. A later change's A/B on the same torch reads them instead of
    running them again."""

    environment = planned.environment
    request = planned.request
    if (
        environment is None
        or environment.change.applied
        or request.event.kind not in on_build.SCHEDULED
        or environment.tested != "tested"
    ):
        return
    cache = BaseOutcomeCache.for_torch(
        environment.torch.git_sha,
        ctx.settings.state_dir,
        base=on_build.base_identity(request, ctx.settings),
        backend=dict(environment.backend),
        own={"run_id": request.run_id, "version": environment.torch.version},
    )
    inventory = load_inventory(request.inventory)
    cache.put(
        finished.outcomes.values(),
        {v.id: v.fingerprint for v in inventory.variants},
        request.run_id,
    )


def _learn_traces(ctx: RunContext, request: RunRequest, finished: FinishedRun) -> None:
    """Store what the run's shards traced. A trace is a fact of execution, not a verdict: a
    held run's traces are kept too. A store that fails loses traces only, never the run."""
    store = ctx.traces
    files = ctx.layout(request).trace_files()
    if store is None or not files:
        return
    try:
        stored = learn_traces(
            store, load_inventory(request.inventory), files, finished.outcomes, request.run_id
        )
    except HistoryError as exc:
        print(f"spyre-ci: traces of run {request.run_id} not stored: {exc}", file=sys.stderr)
        return
    finished.traces_stored = stored


def _results(outcomes: Sequence[Outcome], removed: dict[str, None]) -> list[Outcome]:
    """The outcomes that are test results; the ids reported removed go into `removed`.

    A removed id is not a test of this run: Verify, History and every export see only the
    rest, so nothing learns it as a failure (or as a pass).
    """
    kept = []
    for outcome in outcomes:
        if outcome.status is Status.REMOVED:
            removed[outcome.id] = None
        else:
            kept.append(outcome)
    return kept


def suspect_learning(finished: FinishedRun, max_share: float) -> str | None:
    """Why this run's failures look like the tool's fault rather than the tests', if they do."""
    from selector.verify import mass_failure

    failing = {v for v, c in finished.classification.items() if c is not Classification.FLAKY}
    return mass_failure(
        finished.outcomes.values(), finished.planned.shards, failing, max_share=max_share
    )


REMOVED_SHOWN = 20  # removed ids the summary lists; the count covers them all


def summarize(
    finished: FinishedRun,
    metrics: Mapping[str, Any],
    removed: Sequence[str] = (),
    started_at: float | None = None,
) -> RunSummary:
    """The run's summary (History's run record, `runs show`, the CLI's closing lines).

    `removed`: planned ids the specs no longer have (counted under `counts` too, so the
    CLI lists them, but never as failed); `new_variants`: selected ids the `new` heuristic
    marked as new to History (or to the previous Inventory); `started_at`: when its first
    shard started.
    """
    counts: dict[str, int] = {}
    for outcome in finished.outcomes.values():
        counts[str(outcome.status)] = counts.get(str(outcome.status), 0) + 1
    if removed:
        counts[str(Status.REMOVED)] = len(removed)
    plan = finished.planned.plan
    results = RunResults(
        ran=len(finished.outcomes),
        failed=sum(n for s, n in counts.items() if Status(s).is_failure),
        new_failures=len(finished.new_failures),
        new_timeouts=sum(
            1
            for v in finished.new_failures
            if v in finished.outcomes and finished.outcomes[v].status is Status.TIMEOUT
        ),
        counts=counts,
        metrics={k: v for k, v in metrics.items() if not isinstance(v, list | tuple)},
        decision=plan.decision,
        why="; ".join(plan.facts.reasons),
        infrastructure=tuple(f.summary for f in finished.faults),
        held_back=finished.held_back,
        removed=len(removed),
        removed_ids=tuple(removed[:REMOVED_SHOWN]),
        new_variants=sum(
            1 for chosen in plan.selected if any(r.heuristic == "new" for r in chosen.reasons)
        ),
        started_at=started_at,
    )
    return RunSummary(
        plan_facts(finished.planned), results, _under_test_note(finished.planned.environment)
    )


def _under_test_note(resolved: EnvironmentUnderTest | None) -> UnderTestNote | None:
    """What History's run summary keeps of the environment under test (`runs show`)."""
    if resolved is None:
        return None
    change, torch = resolved.change, resolved.torch
    return UnderTestNote(
        tested=resolved.tested,
        torch=f"{torch.version} ({torch.git_sha[:12]})",
        change={
            "state": change.state,
            "applied": [f.path for f in change.applied][:20],
            "not_applied": [f.path for f in change.not_applied][:20],
        },
        notes=resolved.notes[:10],
    )


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
