"""A run's finish as named steps, shared by the embedded and the distributed executor.

    judge -> settle -> summarize -> forensics -> export -> learn

`judge` is selector stage 4 over the shards' outcomes: reruns of failures, the expansion
around new ones, and the A/B base (the failures on the torch without the change, or on a
scheduled run's reference torch); what it runs beyond the shards goes through `MoreTests`,
which keeps the faults it meets. `settle` turns its answer into the finished run and its
state; `summarize` into History's summary; `forensics` places new failures on upstream's
line; `export` writes every output; `learn` teaches History, last, so a run whose exports were
not written teaches nothing. `finish` runs them in that order.

A shard that could not run its tests (`InfraFault`) is never a test result: the run ends as
an infrastructure error (RunState.INFRA_ERROR, exit code 3) and History learns nothing from
it. A run whose failures look like the tool's fault is held back from History
(RunState.HELD) until `spyre-ci history confirm`. A planned id the specs no longer have comes
back from its shard as `Status.REMOVED`: it is taken out of the results (not a failure, not a
fault, nothing learned) and the summary and report count it.

The verdict first (the service): a run whose holdout runs after its verdict is finished twice.
`finish(..., holdout_after=True)` judges the selected variants alone, as if the plan had no
holdout, and writes the callback; `finish_holdout` then judges the holdout the same way
(reruns, A/B base; no expansion), completes the selector's metrics over the whole plan,
teaches History what the holdout ran (when the run was learned) and writes `holdout.json`.
The holdout never changes the verdict that went out: a new failure only it found is a
selector miss, counted as such.

Long on purpose: the steps and the helpers only they call (the A/B base caches, the kept
outcomes of a scheduled run, the summary) read best together.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import selector
from contracts.classification import Classification
from contracts.forensics import RunForensics
from contracts.run_summary import RunResults, RunSummary, UnderTestNote
from selector.verify import holdout_bound
from suites.model import Inventory, Outcome, Status
from workflows.run import ab_base, exporting, on_build, under_test, verification
from workflows.run.context import RunContext
from workflows.run.layout import REFERENCE_SHARD
from workflows.run.pipeline import _with_state, change_env, load_inventory, now_iso, plan_facts
from workflows.run.run_folder import first_start
from workflows.run.run_model import (
    EnvironmentUnderTest,
    FinishedRun,
    PlannedRun,
    RunRequest,
)
from workflows.run.verification import VerifiedRun
from workflows.runner import change_imports
from workflows.runner.shard_runner import InfraFault, ShardRun
from workflows.stores.history import HistoryError, HistoryStore, RunState
from workflows.tracing.trace_store import learn as learn_traces

ShardExecutor = Callable[[str, Sequence[str]], ShardRun]
HOLDOUT_FILE = "holdout.json"  # in the run's folder: the holdout that ran after the verdict


class _Faulted(Exception):
    """A rerun, the expansion or a base run could not run: the verdict stops there."""


@dataclass
class MoreTests:
    """What a finish runs beyond the shards (reruns, the expansion, the A/B base), through
    `execute`. A fault met (not the change's own failure) is kept in `faults` and stops the
    verdict; an id the specs no longer have is kept in `removed`, never a result."""

    planned: PlannedRun
    execute: ShardExecutor
    faults: list[InfraFault]
    removed: dict[str, None]

    def run(self, name: str, ids: Sequence[str]) -> list[Outcome]:
        shard = self.execute(name, ids)
        more = list(shard.outcomes)
        if shard.fault is not None and not _change_failure(self.planned, shard.fault, more):
            self.faults.append(shard.fault)
            raise _Faulted
        return _results(more, self.removed)

    def on_reference(self, ids: Sequence[str]) -> list[Outcome]:
        """`ids` on a scheduled run's reference torch (the installed one, as it is)."""
        shard = self.execute(REFERENCE_SHARD, ids)
        if shard.fault is not None:
            self.faults.append(shard.fault)
            raise _Faulted
        return list(shard.outcomes)


@dataclass(frozen=True)
class Judged:
    """Stage 4's answer: None (and no update) when a fault stopped it."""

    verified: VerifiedRun | None
    update: selector.HistoryUpdate | None = None
    reference: str = ""  # what the failures were compared against, as the exports say it
    read: Mapping[str, str] = field(default_factory=dict)  # base outcomes read: id -> run


NOT_JUDGED = Judged(None)


def start(
    planned: PlannedRun,
    outcomes: Sequence[Outcome],
    execute: ShardExecutor,
    faults: Sequence[InfraFault],
) -> tuple[dict[str, Outcome], MoreTests]:
    """The shards' results by id and what runs more; a fault that is the change's own
    failure gives its unrun variants an `error` result instead (`_change_failure`)."""
    given = list(outcomes)
    kept = [f for f in faults if not _change_failure(planned, f, given)]
    more = MoreTests(planned, execute, kept, {})
    return {o.id: o for o in _results(given, more.removed)}, more


def judge(
    planned: PlannedRun,
    inventory: Inventory,
    first: Mapping[str, Outcome],
    ctx: RunContext,
    more: MoreTests,
) -> Judged:
    """Reruns, the expansion and the A/B base of `first`; NOT_JUDGED after a fault."""
    if more.faults:
        return NOT_JUDGED
    request = planned.request
    read: dict[str, str] = {}  # base outcomes read from a cache: id -> the run that ran it
    fell_back: list[str] = []  # variants the nearest earlier torch did not run, if any
    base: verification.BaseExecute | None = None
    reference = on_build.reference_for(request, ctx.settings)
    if change_env(request, ctx.settings):
        reference = ""

        def base(ids: Sequence[str]) -> dict[str, Outcome]:
            return ab_base.base_outcomes(planned, inventory, ids, more.run, ctx, read)

    elif reference:
        earlier = ab_base.earlier_torch(planned, ctx)
        installed, reference = reference, earlier.describe() if earlier else reference

        def base(ids: Sequence[str]) -> dict[str, Outcome]:
            found = ab_base.earlier_outcomes(earlier, inventory, ids, read) if earlier else {}
            rest = [vid for vid in ids if vid not in found]
            if rest:
                found.update(
                    ab_base.reference_outcomes(
                        planned, inventory, rest, more.on_reference, ctx, read
                    )
                )
                if earlier is not None and not fell_back:
                    fell_back.append(f"{len(rest)} not run there: on {installed}")
            return found

    try:
        verified, update = verification.verify(
            planned, inventory, first, more.run, base, reference=bool(reference)
        )
    except _Faulted:
        return NOT_JUDGED
    said = (reference + (f" ({fell_back[0]})" if fell_back else "")) if verified.base else ""
    return Judged(verified, update, said, {v: r for v, r in read.items() if v in verified.base})


def settle(
    planned: PlannedRun,
    first: dict[str, Outcome],
    judged: Judged,
    faults: Sequence[InfraFault],
) -> tuple[FinishedRun, RunState]:
    """The finished run and its state: an infrastructure error after a fault; held when its
    failures look like the tool's; completed otherwise."""
    request = planned.request
    finished = FinishedRun(planned, first, {}, RunSummary(), Path(request.out_dir))
    verified = judged.verified
    if verified is not None:
        finished.base_outcomes = verified.base
        finished.unattributed = verified.unattributed
        finished.reference = judged.reference
        finished.base_read = dict(judged.read)
    if faults or verified is None:
        finished.faults = tuple(faults)
        return finished, RunState.INFRA_ERROR
    finished.outcomes, finished.classification = verified.outcomes, verified.classification
    finished.planned = replace(
        planned,
        environment=under_test.reached(
            planned.environment, under_test.ran_ids(finished.outcomes.values()), ran=True
        ),
    )
    finished.held_back = suspect_learning(finished, request.mass_failure_share)
    return finished, RunState.HELD if finished.held_back else RunState.COMPLETED


def forensics(
    finished: FinishedRun, verified: VerifiedRun | None, history: HistoryStore, ctx: RunContext
) -> RunForensics | None:
    """Where each failure that is not flaky sits on upstream's line; added to the summary.
    A History that cannot answer loses the forensics, never the run."""
    if verified is None or all(c is Classification.FLAKY for c in finished.classification.values()):
        return None
    request = finished.planned.request
    run = history.get_run(request.run_id)
    created = run.created_at if run is not None else ctx.clock()
    try:
        found = exporting.failure_forensics(finished, history, created)
    except HistoryError as exc:
        print(f"spyre-ci: forensics of run {request.run_id} not made: {exc}", file=sys.stderr)
        return None
    finished.summary = replace(finished.summary, forensics=exporting.forensics_summary(found))
    return found


def learn(
    planned: PlannedRun,
    finished: FinishedRun,
    state: RunState,
    update: selector.HistoryUpdate | None,
    ctx: RunContext,
) -> None:
    """History learns a completed run, keeps a held one's update aside; both store their
    traces; a scheduled run's own outcomes are kept as its torch's base outcomes."""
    request = planned.request
    if state is RunState.HELD and update is not None:
        ctx.history.hold(request.run_id, update, finished.held_back or "")
    elif state is RunState.COMPLETED and update is not None:
        ctx.history.apply(request.run_id, update)
    if state in (RunState.HELD, RunState.COMPLETED):
        _learn_traces(ctx, request, finished)
    if state is RunState.COMPLETED:
        ab_base.keep_own_outcomes(planned, finished, ctx)


def finish(
    planned: PlannedRun,
    outcomes: Sequence[Outcome],
    ctx: RunContext,
    execute: ShardExecutor,
    faults: Sequence[InfraFault] = (),
    *,
    holdout_after: bool = False,
) -> FinishedRun:
    """Stage 4, History, and export; `execute(name, ids)` runs reruns and expansions.

    `faults`: shards that could not run. Then, or when a rerun or the expansion cannot run,
    the run ends as an infrastructure error: exported as such, nothing learned.
    `holdout_after`: the holdout runs after the verdict (`finish_holdout`); `outcomes` are the
    selected variants' and the run is judged, exported and learned without it."""
    request = planned.request
    history = ctx.history
    history.save_run(_with_state(history, request.run_id, RunState.FINISHING))
    judged_plan = without_holdout(planned) if holdout_after else planned
    first, more = start(judged_plan, outcomes, execute, faults)
    inventory = None if more.faults else load_inventory(request.inventory)
    judged = judge(judged_plan, inventory, first, ctx, more) if inventory else NOT_JUDGED
    finished, state = settle(judged_plan, first, judged, more.faults)
    verified = judged.verified
    finished.summary = summarize(
        finished, verified.metrics if verified else {}, list(more.removed), first_start(request)
    )
    if holdout_after and planned.holdout:
        finished.summary = _with_metrics(
            finished.summary, {"holdout_after_verdict": len(planned.holdout)}
        )
    found = forensics(finished, verified, history, ctx)
    exporting.export(finished, now_iso(ctx.clock), verified, found)
    # Learn last: only a run whose exports were written teaches History anything. A crash
    # before this line (a full disk, an export that fails) leaves History as it was and the
    # run resumable.
    learn(judged_plan, finished, state, judged.update, ctx)
    finished.summary = replace(finished.summary, finished_at=ctx.clock())
    history.save_run(_with_state(history, request.run_id, state, finished.summary))
    return finished


def without_holdout(planned: PlannedRun) -> PlannedRun:
    """The run as its verdict judges it when the holdout runs after the verdict: the plan's
    selection alone, its shards without the holdout's ids."""
    if not planned.holdout:
        return planned
    held = set(planned.holdout)
    shards = [[vid for vid in shard if vid not in held] for shard in planned.shards]
    plan = replace(planned.plan, holdout=(), holdout_strata=(), holdout_rule=None)
    return replace(planned, plan=plan, shards=[s for s in shards if s], holdout=[])


def finish_holdout(
    planned: PlannedRun,
    outcomes: Sequence[Outcome],
    ctx: RunContext,
    execute: ShardExecutor,
    faults: Sequence[InfraFault] = (),
) -> dict[str, Any]:
    """The holdout of a run whose verdict went out first: judged as the verdict's variants
    were (reruns, the A/B base; no expansion: the verdict is out), the selector's metrics
    completed over the whole plan, History taught what it ran when the run itself was learned
    (completed), and `holdout.json` written in the run's folder. Returns what it wrote."""
    request = replace(planned.request, expand=False)
    planned = replace(planned, request=request)
    history = ctx.history
    run = history.get_run(request.run_id)
    first, more = start(planned, outcomes, execute, faults)
    inventory = None if more.faults else load_inventory(request.inventory)
    judged = judge(planned, inventory, first, ctx, more) if inventory else NOT_JUDGED
    body: dict[str, Any] = {
        "run_id": request.run_id,
        "holdout": len(planned.holdout),
        "ran": len(first),
        "removed": sorted(more.removed),
        "after_verdict": True,
    }
    verified = judged.verified
    learned = False
    if verified is None:
        body["infrastructure"] = [f.summary for f in more.faults]
        metrics: dict[str, Any] = {}
    else:
        results = run.summary.results if run is not None else None
        verdict_metrics = results.metrics if results is not None else {}
        selected_new = int(verdict_metrics.get("selected_new_failures") or 0)
        measured = verified.verdict.metrics
        misses = measured.holdout_misses
        bound = holdout_bound(planned.plan.strata, misses) if planned.holdout else None
        metrics = replace(
            measured,
            selected_new_failures=selected_new,
            false_green=selected_new == 0 and bool(misses),
            recall_lower=None if bound is None else bound.recall_lower(selected_new),
        ).to_json()
        body["classification"] = {v: str(c) for v, c in sorted(verified.classification.items())}
        body["misses"] = list(misses)
        body["metrics"] = metrics
        if run is not None and run.state is RunState.COMPLETED and judged.update is not None:
            history.apply(request.run_id, judged.update)
            learned = True
    body["learned"] = learned
    out = Path(request.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / HOLDOUT_FILE).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    if run is not None:
        merged = {k: v for k, v in metrics.items() if not isinstance(v, list | tuple)}
        merged["holdout_after_verdict"] = len(planned.holdout)
        summary = _with_metrics(run.summary, merged)
        if summary.plan is not None:  # the verdict's plan facts counted no holdout
            summary = replace(summary, plan=replace(summary.plan, holdout=len(planned.holdout)))
        history.save_run(replace(run, summary=summary))
    return body


def _with_metrics(summary: RunSummary, metrics: Mapping[str, Any]) -> RunSummary:
    results = summary.results or RunResults()
    return replace(summary, results=replace(results, metrics={**results.metrics, **metrics}))


def _change_failure(planned: PlannedRun, fault: InfraFault, outcomes: list[Outcome]) -> bool:
    """Whether `fault` is the applied change's own failure, not the tool's: the changed torch,
    or an upstream test file it edits, does not import (its import hung, ended its process or
    raised, as the shard runner found it: `InfraFault.change`; or a syntax error in a changed
    module, named in the fault's cause). Then each variant it left unrun gets an `error`
    outcome saying so (added to `outcomes`): the change broke them, and the A/B comparison
    tells whether they pass without it."""
    broken = list(planned.environment.change.broken) if planned.environment else []
    why = fault.change
    if not why:
        paths = {b.split(":", 1)[0] for b in broken}
        if not any(path in fault.cause for path in paths) or "SyntaxError" not in fault.cause:
            return False
        why = "; ".join(broken[:3])
    what = "a test file it edits" if change_imports.names_test_file(why) else "torch"
    message = f"the change breaks importing {what} (the change's failure, not the tool's): {why}"
    outcomes.extend(Outcome(vid, Status.ERROR, 0.0, message) for vid in fault.unrun)
    return True


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
