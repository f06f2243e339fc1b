"""Stages 2 and 3: score every variant with the heuristics, then decide what runs.

Long on purpose: it holds stages 2 and 3 with the records they fill (`PlanConfig`, `Reason`,
`Selected`, `Plan`): the records are the selector's contract with the workflows, and the stages
are the only code that builds them.

`plan()` is the entry point the workflows call. It never reads files: the caller hands in the
ChangeSet, the Inventory, the History snapshot and, when it has them, the previous inventory
and an impact map.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from contracts.codec import ALWAYS, NONE, CodecError, Record, from_json, to_json, wire
from selector.changeset import ChangeSet
from selector.errors import SelectorError
from selector.heuristics import REGISTRY, Heuristic, RetrieveContext
from selector.history import History
from selector.holdout import (
    HoldoutRule,
    HoldoutStratum,
    draw_holdout,
    near_variants,
    uniform_holdout,
)
from selector.impact import ImpactMap
from selector.index import InventoryIndex
from selector.plan_parts import Budget, ChangeNote, Totals, TrialNote
from selector.scout import FULL_RUN_LABELS, ChangeFacts, scout
from selector.shard import Shard, shard_lpt
from suites.model import Inventory

PLAN_FORMAT = 1
DEFAULT_HOLDOUT_RATE = 0.02
# Heuristics whose variants run whatever the budget and the threshold say.
MANDATORY = ("failing", "new")

SKIP_DECLARED = "declared skip in the suite spec"
SKIP_NO_MATCH = "no heuristic matched"
SKIP_THRESHOLD = "score at or below the threshold"
SKIP_COUNT_BUDGET = "over the count budget"
SKIP_TIME_BUDGET = "over the time budget"
SKIP_NOTHING = "nothing to run for this change"
SKIP_NOT_FAILING = "not failing (re-run of failed tests)"


@dataclass(frozen=True)
class PlanConfig:
    """Knobs of stages 2 and 3; the defaults are the safe ones."""

    budget_count: int | None = None
    budget_seconds: float | None = None
    # Share of the unselected drawn for the holdout (a count budget holds it too,
    # `holdout_room`). None, the default: DEFAULT_HOLDOUT_RATE, its cost bounded by the
    # selection's (`holdout_time_share`, `holdout_floor`); a share given: that share, whatever
    # it costs (the rule before the bound).
    holdout_rate: float | None = None
    shards: int = 1
    threshold: float = 0.0  # selected when the summed score is above it
    default_duration_s: float = 1.0  # for variants the History never timed
    force_full: bool = False
    trial: frozenset[str] = frozenset()  # heuristics recorded but not counted
    disabled: frozenset[str] = frozenset()
    full_run_labels: tuple[str, ...] = FULL_RUN_LABELS
    extra_families: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    seed: str | None = None  # holdout seed; the change's own (`ChangeSet.seed`) when None
    # Drawn at least (when there are that many): 2 % of a few hundred is too few to bound.
    holdout_min: int = 30
    # The default holdout's expected seconds at most this share of the selection's...
    holdout_time_share: float = 0.25
    # ...but at least this many draws: one per stratum minimum (holdout.STRATUM_MIN) of both.
    holdout_floor: int = 10

    def __post_init__(self) -> None:
        if self.budget_count is not None and self.budget_seconds is not None:
            raise SelectorError("give a budget by count or by time, not both")
        if self.budget_count is not None and self.budget_count < 0:
            raise SelectorError(f"budget_count must be >= 0, not {self.budget_count}")
        if self.budget_seconds is not None and self.budget_seconds < 0:
            raise SelectorError(f"budget_seconds must be >= 0, not {self.budget_seconds}")
        if self.holdout_rate is not None and not 0.0 <= self.holdout_rate <= 1.0:
            raise SelectorError(f"holdout rate must be within [0, 1], not {self.holdout_rate}")
        if self.holdout_time_share < 0:
            raise SelectorError(f"holdout_time_share must be >= 0, not {self.holdout_time_share}")
        if self.shards < 1:
            raise SelectorError(f"shards must be at least 1, not {self.shards}")
        if self.holdout_min < 0 or self.holdout_floor < 0:
            raise SelectorError(
                f"holdout_min and holdout_floor must be >= 0, not {self.holdout_min}, "
                f"{self.holdout_floor}"
            )

    @property
    def holdout_share(self) -> float:
        """The share of the unselected the holdout draws (before any time bound)."""
        return DEFAULT_HOLDOUT_RATE if self.holdout_rate is None else self.holdout_rate

    @property
    def holdout_bound(self) -> float | None:
        """The bound on the holdout's expected seconds, as a share of the selection's; None
        when a holdout rate was given (that share runs whatever it costs)."""
        return self.holdout_time_share if self.holdout_rate is None else None


@dataclass(frozen=True)
class Reason(Record):
    heuristic: str
    score: float
    reason: str
    trial: bool = False


@dataclass(frozen=True)
class Selected(Record):
    id: str
    score: float = field(metadata=wire(encode=lambda v: round(v, 4)))
    reasons: tuple[Reason, ...] = ()
    duration_s: float = 0.0
    mandatory: bool = False


@dataclass(frozen=True)
class Plan(Record):
    """What runs for one change, and why (stages 1-3)."""

    decision: str  # none | targeted | full | rerun-failed
    fallback: str | None  # why a full run, or None
    selected: tuple[Selected, ...]
    holdout: tuple[str, ...]
    shards: tuple[Shard, ...]
    skipped: Mapping[str, int]  # reason -> count of variants not run
    budget: Budget
    facts: ChangeFacts = field(metadata=wire("change_facts"))
    change: ChangeNote
    totals: Totals
    trial: Mapping[str, TrialNote]  # trial heuristic -> what it would have done
    # Reasons of variants that scored but were not selected (for `--why`); sparse; kept only
    # in the process, never written.
    unselected: Mapping[str, tuple[tuple[Reason, ...], str]] = field(
        default_factory=dict, metadata=wire(omit=ALWAYS)
    )
    # How the holdout was drawn; empty in a plan from before the strata (see `strata`).
    holdout_strata: tuple[HoldoutStratum, ...] = ()
    # how it was sized; None: no holdout (or older); a plan without one saves back unchanged
    holdout_rule: HoldoutRule | None = field(default=None, metadata=wire(omit=NONE))

    WIRE_ORDER: ClassVar[tuple[str, ...]] = (
        *("decision", "fallback", "selected", "holdout", "holdout_strata", "shards"),
        *("skipped", "budget", "totals", "trial", "change", "facts", "holdout_rule"),
    )

    @property
    def strata(self) -> tuple[HoldoutStratum, ...]:
        """The holdout's strata; an older plan's holdout as one uniform stratum."""
        if self.holdout_strata or not self.holdout:
            return self.holdout_strata
        t = self.totals
        return uniform_holdout(self.holdout, t.unselected, t.unselected_s, t.holdout_s)

    @property
    def selected_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.selected)

    @property
    def run_ids(self) -> tuple[str, ...]:
        """Everything to run: the selection, then the holdout."""
        return (*self.selected_ids, *self.holdout)

    def to_json(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, **to_json(self)}

    @classmethod
    def from_json(cls, data: object) -> Plan:
        """A Plan back from `to_json()` (another process runs Verify); `unselected`, kept
        only for `why`, is not carried."""
        format = data.get("format") if isinstance(data, Mapping) else None
        if format != PLAN_FORMAT:
            raise SelectorError(f"plan format {format!r} is not {PLAN_FORMAT}; plan again")
        try:
            return from_json(cls, data)
        except CodecError as exc:
            raise SelectorError(f"plan: {exc}") from None


def plan(
    changes: ChangeSet,
    inventory: Inventory | InventoryIndex,
    history: History | None = None,
    config: PlanConfig | None = None,
    *,
    previous: Inventory | InventoryIndex | None = None,
    impact: ImpactMap | None = None,
    heuristics: Iterable[Heuristic] | None = None,
) -> Plan:
    """Scout, retrieve and plan. Pass an `InventoryIndex` to reuse lookups across plans
    (build it with the same `config.extra_families`: a given index is used as it is)."""
    config = config or PlanConfig()
    history = history or History()
    index = (
        inventory
        if isinstance(inventory, InventoryIndex)
        else InventoryIndex.build(inventory, config.extra_families)
    )
    before: Mapping[str, str] | None = None
    if isinstance(previous, InventoryIndex):
        before = previous.fingerprints
    elif previous is not None:
        before = {v.id: v.fingerprint for v in previous.variants}
    facts = scout(
        changes,
        index,
        config.full_run_labels,
        traced=impact is not None,
        traced_ops=impact.inverted()[1] if impact is not None else (),
        impact=impact,
    )
    available = list(heuristics or REGISTRY.values())
    unknown = (config.trial | config.disabled) - {h.name for h in available}
    if unknown:
        raise SelectorError(
            f"unknown heuristic(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(h.name for h in available)}"
        )
    plugins = [h for h in available if h.name not in config.disabled]
    ctx = RetrieveContext(facts, index, history, before, impact)
    reasons = _retrieve(ctx, plugins, config.trial) if facts.decision != "none" else {}
    return _decide(changes, facts, index, history, config, reasons)


def _retrieve(
    ctx: RetrieveContext, plugins: Iterable[Heuristic], trial: frozenset[str]
) -> dict[str, list[Reason]]:
    reasons: dict[str, list[Reason]] = {}
    for plugin in plugins:
        is_trial = plugin.name in trial
        for vid, score in plugin.score(ctx).items():
            reasons.setdefault(vid, []).append(
                Reason(plugin.name, score.value, score.reason, is_trial)
            )
    return reasons


def _strongest_first(reasons: list[Reason]) -> list[Reason]:
    """A variant's reasons, the strongest counted evidence first (the report's "top reason"
    is the first): a trace hit before a mere op-family relation. Ties keep registry order."""
    return sorted(reasons, key=lambda r: (r.trial, -r.score))


def _counted(reasons: list[Reason]) -> float:
    return sum(r.score for r in reasons if not r.trial)


def _decide(
    changes: ChangeSet,
    facts: ChangeFacts,
    index: InventoryIndex,
    history: History,
    config: PlanConfig,
    reasons: dict[str, list[Reason]],
) -> Plan:
    declared_skip = index.declared_skip
    eligible = index.runnable
    durations = _Durations(history, config.default_duration_s)
    skipped: Counter[str] = Counter()
    if declared_skip:
        skipped[SKIP_DECLARED] = len(declared_skip)
    fallback = None
    if config.force_full:
        fallback = "full run requested"
    elif facts.decision == "blind":
        fallback = "; ".join(facts.reasons)
    scores = {vid: _counted(rs) for vid, rs in reasons.items()}
    mandatory = {
        vid
        for vid, rs in reasons.items()
        if any(r.heuristic in MANDATORY and r.score > 0 and not r.trial for r in rs)
        and vid not in declared_skip
    }
    budget = Budget()
    unselected: dict[str, tuple[tuple[Reason, ...], str]] = {}
    if fallback is not None:
        decision = "full"
        chosen = sorted(eligible, key=lambda v: (-scores.get(v, 0.0), v))
        tail: tuple[Reason, ...] = (Reason("fallback", 0.0, f"full run: {fallback}"),)
        given = config.budget_count is not None or config.budget_seconds is not None
        budget = Budget(
            used=len(chosen),
            not_applied="a full run (everything runs) has no budget" if given else None,
        )
    elif facts.decision == "none":
        decision, chosen, tail = "none", [], ()
        skipped[SKIP_NOTHING] += len(eligible)
    else:
        decision = facts.decision
        tail = ()
        if decision == "rerun-failed":
            pool = frozenset(
                v for v, h in history.variants.items() if h.failing and v in index.runnable_set
            )
            skipped[SKIP_NOT_FAILING] += len(eligible) - len(pool)
            mandatory &= pool
        else:
            pool = index.runnable_set
        chosen, budget = _fit(
            pool, scores, mandatory, durations, config, skipped, reasons, unselected
        )
    chosen_set = set(chosen)
    total_s = durations.total(index.runnable_set)
    selected_s = sum(durations[v] for v in chosen)
    strata: tuple[HoldoutStratum, ...] = ()
    rule = None
    if decision == "targeted" and config.holdout_share > 0:
        # Inventory order keeps the sample reproducible without sorting 50,000 ids.
        unchosen = [v for v in eligible if v not in chosen_set]
        strata = draw_holdout(
            unchosen,
            near_variants(facts, index, chosen),
            config,
            random.Random(config.seed or changes.seed()),
            durations,
            total_s - selected_s,
            limit=None if config.budget_count is None else config.budget_count - len(chosen),
            selected_s=selected_s,
        )
        bound = config.holdout_bound
        rule = HoldoutRule(
            config.holdout_share,
            config.holdout_min,
            bound,
            None if bound is None else bound * selected_s,
            config.holdout_floor if bound is not None else config.holdout_min,
            sum(s.expected_s for s in strata),
        )
    holdout = tuple(sorted(v for s in strata for v in s.ids))
    if budget.kind == "count":  # N bounds what runs: the selection and the holdout
        budget = replace(budget, holdout=len(holdout), used=len(chosen) + len(holdout))
    for vid in holdout:
        reason = unselected.pop(vid, None)
        skipped[reason[1] if reason else SKIP_NO_MATCH] -= 1
    durations.prefetch(chosen)
    durations.prefetch(holdout)
    no_reasons: list[Reason] = []
    selected = tuple(
        Selected(
            vid,
            scores.get(vid, 0.0),
            (*_strongest_first(reasons.get(vid, no_reasons)), *tail),
            durations[vid],
            vid in mandatory,
        )
        for vid in chosen
    )
    run = [*chosen, *holdout]
    shards = shard_lpt(run, durations, config.shards) if run else ()
    totals = Totals(
        variants=len(index.ids),
        eligible=len(eligible),
        selected=len(chosen),
        holdout=len(holdout),
        selected_s=round(selected_s, 3),
        holdout_s=round(sum(durations[v] for v in holdout), 3),
        eligible_s=round(total_s, 3),
        ratio_count=round(len(chosen) / len(eligible), 6) if eligible else 0.0,
        ratio_time=round(selected_s / total_s, 6) if total_s else 0.0,
    )
    return Plan(
        decision=decision,
        fallback=fallback,
        selected=selected,
        holdout=holdout,
        shards=shards,
        skipped={k: n for k, n in sorted(skipped.items()) if n > 0},
        budget=budget,
        facts=facts,
        change=changes.summary(),
        totals=totals,
        trial=_trial_summary(reasons, config, chosen_set),
        unselected=unselected,
        holdout_strata=strata,
        holdout_rule=rule if strata else None,
    )


class _Durations(dict[str, float]):
    """Historical mean durations, looked up only for the variants a plan touches."""

    def __init__(self, history: History, default: float) -> None:
        super().__init__()
        self.history = history
        self.default = default

    def __missing__(self, vid: str) -> float:
        entry = self.history.variants.get(vid)
        mean = None if entry is None else entry.mean_duration_s
        self[vid] = value = self.default if mean is None else mean
        return value

    def prefetch(self, ids: Iterable[str]) -> None:
        """Look many up at once (a full run): one loop instead of a `__missing__` call each."""
        known, default = self.history.variants, self.default
        for vid in ids:
            if vid not in self:
                entry = known.get(vid)
                mean = None if entry is None else entry.mean_duration_s
                self[vid] = default if mean is None else mean

    def total(self, ids: frozenset[str]) -> float:
        """Sum over `ids` without a lookup per id: timed ones from History, the rest default."""
        timed = 0
        total = 0.0
        for vid, entry in self.history.variants.items():
            if entry.mean_duration_s is not None and vid in ids:
                timed += 1
                total += entry.mean_duration_s
        return total + self.default * (len(ids) - timed)


def _fit(
    pool: frozenset[str],
    scores: Mapping[str, float],
    mandatory: set[str],
    durations: _Durations,
    config: PlanConfig,
    skipped: Counter[str],
    reasons: Mapping[str, list[Reason]],
    unselected: dict[str, tuple[tuple[Reason, ...], str]],
) -> tuple[list[str], Budget]:
    """Mandatory variants first, then by score (cheaper first on ties) within the budget; a
    count budget keeps `holdout_room` of it for the holdout."""
    must = sorted((v for v in mandatory if v in pool), key=lambda v: (-scores[v], v))
    candidates: list[str] = []
    scored = 0
    # Only scored variants are visited: the rest of the pool is counted, not walked.
    for vid, rs in reasons.items():
        if vid in mandatory or vid not in pool:
            continue
        scored += 1
        if scores[vid] <= config.threshold:
            skipped[SKIP_THRESHOLD] += 1
            unselected[vid] = (tuple(rs), SKIP_THRESHOLD)
        else:
            candidates.append(vid)
    skipped[SKIP_NO_MATCH] += len(pool) - len(must) - scored
    candidates.sort(key=lambda v: (-scores[v], durations[v], v))
    chosen = list(must)
    if config.budget_count is not None:
        reserved = holdout_room(config)
        room = max(0, config.budget_count - reserved - len(chosen))
        over = candidates[room:]
        chosen += candidates[:room]
        budget = Budget(
            "count",
            config.budget_count,
            len(chosen),
            applied=True,
            mandatory=len(must),
            holdout_reserved=reserved,
        )
        for vid in over:
            unselected[vid] = (tuple(reasons[vid]), SKIP_COUNT_BUDGET)
        skipped[SKIP_COUNT_BUDGET] += len(over)
    elif config.budget_seconds is not None:
        used = sum(durations[v] for v in must)
        for vid in candidates:
            if used + durations[vid] <= config.budget_seconds:
                chosen.append(vid)
                used += durations[vid]
            else:
                unselected[vid] = (tuple(reasons[vid]), SKIP_TIME_BUDGET)
                skipped[SKIP_TIME_BUDGET] += 1
        budget = Budget(
            "time", config.budget_seconds, round(used, 3), applied=True, mandatory=len(must)
        )
    else:
        chosen += candidates
        budget = Budget(used=len(chosen))
    return chosen, budget


def holdout_room(config: PlanConfig) -> int:
    """Of a count budget N, what the selection leaves to the holdout: `holdout_share` of N
    (none of a tiny budget). The holdout takes more when the selection leaves more room."""
    if config.budget_count is None or config.force_full:
        return 0
    return min(config.budget_count, round(config.holdout_share * config.budget_count))


def _trial_summary(
    reasons: Mapping[str, list[Reason]], config: PlanConfig, chosen: set[str]
) -> dict[str, TrialNote]:
    """For each trial heuristic: how many it scored and which it alone would have added."""
    summary: dict[str, TrialNote] = {}
    for name in sorted(config.trial):
        scored, would_add = 0, []
        for vid, rs in reasons.items():
            mine = [r for r in rs if r.heuristic == name]
            if not mine:
                continue
            scored += 1
            if vid not in chosen and _counted(rs) + sum(r.score for r in mine) > config.threshold:
                would_add.append(vid)
        summary[name] = TrialNote(scored, len(would_add), tuple(sorted(would_add)[:10]))
    return summary
