"""The mutation replay benchmark: selection quality measured by execution.

For each mutation of a mutation set (`benchmarks.selection.mutations`), the selector plans from
what it would see upstream (the unified diff, the Inventory, a History holding the baseline
run's statuses and durations); the ground truth is the set of variants whose outcome changes when
they run with the mutation applied (one pytest subprocess per mutation through the shard
runner, so a crash or hang costs one variant, not the run). Optionally the ground-truth run
is restricted to the variants whose impact map touches the mutated code (exact; see
`benchmarks.selection.mutations.impact` and docs/selection-benchmark.md).

    record = run_benchmark(BenchConfig(mutations=..., out=..., specs=[...]))
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.selection.mutations import Mutation, MutationError, load_mutations, subprocess_env
from benchmarks.selection.mutations.impact import touched_variants
from benchmarks.selection.mutations.model import check_all
from benchmarks.selection.results import (
    BenchConfig,
    BenchError,
    Log,
    MutationResult,
    build_record,
    summary_lines,
)
from selector.impact import ImpactMap
from suites.model import Expectation, Inventory, Outcome, Status
from workflows.runner.scheduling import InOrder, Pool, Work, slices
from workflows.runner.shard_runner import Limits, run_shard, short_message
from workflows.settings import Settings
from workflows.tracing.impact_recorder import record_impact_map

__all__ = ["BenchConfig", "BenchError", "command_line", "rescore", "run_benchmark", "summary_lines"]


def run_benchmark(config: BenchConfig, log: Log = print) -> dict[str, Any]:
    """Baseline, (impact map), then every mutation; returns the record (also written)."""
    import selector

    started = time.monotonic()
    out = config.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        mutations = load_mutations(config.mutations)
        if config.only:
            unknown = sorted(set(config.only) - {m.id for m in mutations})
            if unknown:
                raise BenchError(f"{config.mutations}: no mutation with id {', '.join(unknown)}")
            mutations = [m for m in mutations if m.id in config.only]
        check_all(mutations)
    except MutationError as exc:
        raise BenchError(str(exc)) from None
    specs = tuple(str(Path(s).resolve()) for s in config.specs)
    inventory = _inventory(specs, out, log)
    ids = [v.id for v in inventory.variants if v.expectation is not Expectation.SKIP]
    limits = Limits(test_timeout_s=config.test_timeout_s)

    log(f"baseline: {len(ids)} variants, unmutated")
    baseline = _run_split("baseline", ids, out / "work" / "baseline", specs, limits, config.jobs)
    _save_outcomes(out / "baseline.json", baseline)
    trace = None
    if config.restrict:
        trace = _trace(config, ids, out, specs, limits, log)
    judge = _judge(config, inventory, baseline, selector)

    lock = threading.Lock()
    results: dict[str, MutationResult] = {}

    by_id = {m.id: m for m in mutations}

    def one(work: Work) -> None:
        mutation = by_id[work.shard]
        changed, ran, restricted, wall, removed = _ground_truth(
            mutation, baseline, ids, trace, out, specs, limits
        )
        result = judge(mutation, changed, len(ran), restricted, wall)
        result.removed = removed
        result.ran_ids = ran
        if mutation.id in config.check_restriction and result.restricted:
            # Every variant, or (check_sample) the restricted ones and a seeded sample of
            # the others: a change outside the restriction refutes it either way.
            outside = [v for v in ids if v not in set(result.ran_ids)]
            if config.check_sample:
                rng = random.Random(f"check:{mutation.id}")
                outside = rng.sample(outside, min(config.check_sample, len(outside)))
            checked = [*result.ran_ids, *outside] if config.check_sample else ids
            full = _run(
                mutation.id + ".full",
                checked,
                out / "work" / (mutation.id + ".full"),
                specs,
                limits,
                subprocess_env(mutation, out / "work" / mutation.id),
            )
            result.unrestricted_changed = _changed(baseline, full)
            result.checked_outside = len(outside)
        with lock:
            results[mutation.id] = result
            log(
                f"[{len(results)}/{len(mutations)}] {mutation.id}: {result.decision}, "
                f"selected {len(result.selected)}, failing {len(result.changed)}, caught "
                f"{len(result.caught)}, missed {len(result.missed)} "
                f"(ran {result.ran}, {result.wall_s:.0f} s)"
            )

    Pool(InOrder(Work(m.id, (), m.id) for m in mutations), config.jobs).run(one)
    ordered = [results[m.id] for m in mutations]
    record = build_record(
        config,
        ordered,
        inventory,
        baseline,
        judge.total_s,
        trace is not None,
        time.monotonic() - started,
    )
    (out / "selection.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def _inventory(specs: Sequence[str], out: Path, log: Log) -> Inventory:
    from suites.inventory import build_inventory
    from suites.loader import SpecError

    log(f"inventory of {', '.join(specs)}")
    try:
        inventory = build_inventory(list(specs))
    except SpecError as exc:
        raise BenchError(f"the benchmark specs do not lint:\n{exc}") from None
    if not inventory.variants:
        raise BenchError(f"{', '.join(specs)}: no variants; check the specs")
    inventory.save(out / "inventory.json.gz")
    return inventory


def _run(
    name: str,
    ids: Sequence[str],
    work: Path,
    specs: Sequence[str],
    limits: Limits,
    env: Mapping[str, str] | None,
) -> dict[str, Outcome]:
    result = run_shard(
        name,
        list(ids),
        work,
        limits=limits,
        specs=list(specs),
        env=dict(env) if env else None,
        warm=Settings.from_env().zygote,  # SPYRE_CI_ZYGOTE=0: every process cold
    )
    outcomes = {o.id: o for o in result.outcomes}
    if result.fault is not None:
        # Ground truth of a mutation: an edit that breaks `import torch` does break every
        # test it reaches (the pipeline itself would report an infrastructure error).
        cause = short_message(result.fault.cause)
        outcomes.update({vid: Outcome(vid, Status.ERROR, 0.0, cause) for vid in result.fault.unrun})
    return outcomes


def _run_split(
    name: str, ids: Sequence[str], work: Path, specs: Sequence[str], limits: Limits, jobs: int
) -> dict[str, Outcome]:
    """`_run` over `jobs` interleaved slices at once (the baseline: every variant, once)."""
    if jobs <= 1 or len(ids) < 2 * jobs:
        return _run(name, ids, work, specs, limits, None)
    parts = slices(name, ids, jobs)
    folder = {part.token: work / str(i) for i, part in enumerate(parts)}

    def one(part: Work) -> dict[str, Outcome]:
        return _run(part.shard, part.ids, folder[part.token], specs, limits, None)

    outcomes: dict[str, Outcome] = {}
    pool: Pool[dict[str, Outcome]] = Pool(InOrder(parts), jobs)
    for _part, found in pool.run(one):
        outcomes.update(found)
    return outcomes


def _trace(
    config: BenchConfig,
    ids: Sequence[str],
    out: Path,
    specs: Sequence[str],
    limits: Limits,
    log: Log,
) -> ImpactMap:
    if config.impact_map is not None:
        return _read_trace(config.impact_map)
    log(f"impact map: tracing {len(ids)} variants (functions and aten ops)")
    data = record_impact_map(ids, out / "work" / "trace", specs, limits)
    (out / "impact-map.json").write_text(json.dumps(data) + "\n", encoding="utf-8")
    return _impact(data, str(out / "impact-map.json"))


def _read_trace(path: Path) -> ImpactMap:
    from workflows.tracing.traces import TraceError, read_trace

    try:
        return read_trace(path)
    except TraceError as exc:
        raise BenchError(str(exc)) from None


def _impact(data: Any, source: str) -> ImpactMap:
    from selector import SelectorError

    try:
        return ImpactMap.from_json(data, source)
    except (SelectorError, AttributeError) as exc:
        raise BenchError(str(exc)) from None


@dataclass(frozen=True)
class Judge:
    """What the selector is given, and how selections are costed."""

    inventory: Inventory
    index: Any
    history: Any
    ids: Sequence[str]
    durations: Mapping[str, float]
    holdout: float
    impact: Any = None  # selector.ImpactMap: the trace production plans join
    diff_form: str = "plain"
    trace: bool = True  # the primary plan joins the trace; the alternative does not

    @property
    def total_s(self) -> float:
        return sum(self.durations.values())

    def changes(self, mutation: Mutation) -> Any:
        """The ChangeSet the selector sees: the diff in the configured form, with the old
        sources this machine has (the installed torch), as `workflows.run.planning` adds them."""
        return self.changes_and_form(mutation)[0]

    def changes_and_form(self, mutation: Mutation) -> tuple[Any, str]:
        """(ChangeSet, the form it has). A form without function context is used only when
        this machine has the old source of every patched file (the installed torch holds the
        Python ones; no C++ source is here, where production reads it through GitHub's
        contents API): otherwise the diff keeps git's form."""
        import selector
        from selector.diff import as_form
        from workflows.stores.sources import with_old_sources

        def read(form: str) -> Any:
            changes = selector.ChangeSet.from_diff(as_form(mutation.diff, form), source=mutation.id)
            return with_old_sources(changes, torch_version=self.inventory.torch_version)

        changes = read(self.diff_form)
        if self.diff_form != "git" and set(changes.patches) - set(changes.sources):
            return read("git"), "git"
        return changes, self.diff_form

    def __call__(
        self,
        mutation: Mutation,
        changed: dict[str, str],
        ran: int,
        restricted: bool,
        wall_s: float,
        *,
        joined: bool | None = None,
    ) -> MutationResult:
        import selector
        from selector.explain import why

        primary = joined is None
        joined = self.trace if joined is None else joined
        changes, form = self.changes_and_form(mutation)
        plan = selector.plan(
            changes,
            self.index,
            self.history,
            selector.PlanConfig(holdout_rate=self.holdout, seed=mutation.id),
            impact=self.impact if joined else None,
        )
        selected = list(plan.selected_ids)
        total_s = self.total_s
        result = MutationResult(
            mutation=mutation,
            decision=plan.decision,
            fallback=plan.fallback,
            selected=selected,
            holdout=list(plan.holdout),
            eligible=plan.totals.eligible,
            ran=ran,
            restricted=restricted,
            changed=changed,
            wall_s=wall_s,
            count_ratio=len(selected) / len(self.ids) if self.ids else 0.0,
            time_ratio=(
                sum(self.durations.get(v, 0.0) for v in selected) / total_s if total_s else 0.0
            ),
            holdout_strata=tuple(plan.holdout_strata),
            diff_form=form,
        )
        for vid in result.missed:
            result.missed_why[vid] = (
                self.cause(mutation, vid)
                + " | selector: "
                + _first_lines(why(plan, vid, self.inventory), 3)
            )
        if primary and self.impact is not None:
            result.alternative = self(
                mutation, changed, ran, restricted, wall_s, joined=not self.trace
            )
        return result

    def cause(self, mutation: Mutation, vid: str) -> str:
        """Why a failing variant is out of reach of the diff, from the unmutated trace."""
        subject = vid.split("::")[2] if vid.count("::") >= 3 else vid
        if self.impact is None:
            return f"{subject}: not named by the diff"
        if mutation.kind == "kernel":
            reached = sorted(set(mutation.ops) & set(self.impact.aten_ops.get(vid, ())))
            if reached:
                return (
                    f"{subject} reaches {', '.join(reached)} inside its own computation "
                    f"(CPU reference, composite, backward formula); the diff names "
                    f"{mutation.location} only: the trace links them, the op names do not"
                )
        else:
            from benchmarks.selection.mutations.impact import changed_functions

            functions = changed_functions(mutation) or set()
            ran = sorted(f for f in self.impact.functions.get(vid, ()) if f in functions)
            if ran:
                return (
                    f"{subject} executes {', '.join(ran)}; the diff's names do not "
                    "relate it to that function"
                )
        return f"{subject}: neither the diff's names nor the trace link it to the change"


def _ground_truth(
    mutation: Mutation,
    baseline: Mapping[str, Outcome],
    ids: Sequence[str],
    trace: ImpactMap | None,
    out: Path,
    specs: Sequence[str],
    limits: Limits,
) -> tuple[dict[str, str], list[str], bool, float, list[str]]:
    """(changed id -> transition, ids run, restricted?, wall seconds, removed ids)."""
    touched = touched_variants(mutation, trace, ids) if trace is not None else None
    to_run = [vid for vid in ids if touched is None or vid in touched]
    work = out / "work" / mutation.id
    env = subprocess_env(mutation, work)
    began = time.monotonic()
    outcomes = _run(mutation.id, to_run, work, specs, limits, env) if to_run else {}
    return (
        _changed(baseline, outcomes),
        to_run,
        touched is not None,
        time.monotonic() - began,
        _removed(outcomes),
    )


def rescore(config: BenchConfig, log: Log = print) -> dict[str, Any]:
    """Judge the selector again against the ground truth a previous run recorded in
    `config.out` (no test runs: a selector change is re-measured in seconds)."""
    import selector

    out = config.out.resolve()
    try:
        previous = json.loads((out / "selection.json").read_text(encoding="utf-8"))
        baseline = {
            vid: Outcome.from_json(o)
            for vid, o in json.loads((out / "baseline.json").read_text(encoding="utf-8")).items()
        }
        inventory = Inventory.load(out / "inventory.json.gz")
    except (OSError, ValueError, KeyError) as exc:
        raise BenchError(
            f"{out}: no complete earlier run to rescore ({exc}); run "
            "`python -m benchmarks.selection --out DIR` first"
        ) from None
    try:
        mutations = {m.id: m for m in load_mutations(config.mutations)}
    except MutationError as exc:
        raise BenchError(str(exc)) from None
    judge = _judge(config, inventory, baseline, selector)
    results = []
    for entry in previous["mutations"]:
        mutation = mutations.get(entry["id"])
        if mutation is None:
            raise BenchError(
                f"{config.mutations}: the recorded mutation {entry['id']!r} is not in this set"
            )
        if entry.get("digest", mutation.digest) != mutation.digest:
            raise BenchError(
                f"{config.mutations}: mutation {mutation.id!r} changed since its "
                "ground truth was recorded; run the benchmark again"
            )
        result = judge(
            mutation,
            dict(entry["failing_ids"]),
            entry["ground_truth_ran"],
            entry["ground_truth_restricted"],
            entry["wall_s"],
        )
        result.removed = list(entry.get("removed", ()))
        if "unrestricted_failing_ids" in entry:
            result.unrestricted_changed = dict(entry["unrestricted_failing_ids"])
            result.checked_outside = entry.get("restriction_checked_outside")
        results.append(result)
    record = build_record(
        config,
        results,
        inventory,
        baseline,
        judge.total_s,
        previous["restriction"]["used"],
        previous["wall_s"],
    )
    record["rescored_at"] = record.pop("date")
    record["date"] = previous["date"]
    # The figures need both: the run that recorded the ground truth, and this judgement.
    record["ground_truth_command"] = previous.get("ground_truth_command", previous["command"])
    record["command"] = f"{record['ground_truth_command']} && {config.command}"
    (out / "selection.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    log(f"rescored {len(results)} mutations from {out}")
    return record


def _judge(
    config: BenchConfig, inventory: Inventory, baseline: Mapping[str, Outcome], selector: Any
) -> Judge:
    impact = None
    path = config.impact_map or (config.out / "impact-map.json")
    if path.exists():
        impact = _read_trace(path)
    history = selector.History(
        variants={
            vid: selector.VariantHistory(
                recent=(o.status,), mean_duration_s=o.duration_s, baseline=o.status
            )
            for vid, o in baseline.items()
        },
        known_variants=frozenset(inventory.by_id()),
    )
    return Judge(
        inventory,
        selector.InventoryIndex.build(inventory),
        history,
        list(baseline),
        {vid: o.duration_s for vid, o in baseline.items()},
        config.holdout,
        impact,
        config.diff_form,
        config.trace,
    )


def _changed(baseline: Mapping[str, Outcome], outcomes: Mapping[str, Outcome]) -> dict[str, str]:
    """Variants whose status differs from the baseline. A variant the mutation removed (an
    OpInfo that lost a dtype) is `removed`, not a failure a selector should have caught."""
    return {
        vid: f"{baseline[vid].status} -> {o.status}"
        for vid, o in outcomes.items()
        if vid in baseline and o.status != baseline[vid].status and o.status is not Status.REMOVED
    }


def _removed(outcomes: Mapping[str, Outcome]) -> list[str]:
    return sorted(vid for vid, o in outcomes.items() if o.status is Status.REMOVED)


def _first_lines(text: str, n: int) -> str:
    return " | ".join(line.strip() for line in text.splitlines()[:n] if line.strip())


def _save_outcomes(path: Path, outcomes: Mapping[str, Outcome]) -> None:
    path.write_text(
        json.dumps({vid: o.to_json() for vid, o in sorted(outcomes.items())}, indent=0) + "\n",
        encoding="utf-8",
    )


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that made the record: this module with its options."""
    given = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python -m benchmarks.selection", *given])
