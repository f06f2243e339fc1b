"""Stage 4, Verify: after the run, on recorded outcomes (pure).

1. `to_rerun(outcomes)`: the failures to run again.
2. `verify(plan, outcomes, reruns, history, inventory)`: flaky vs real, new vs pre-existing
   (baseline in History), the expansion set to run next, the History update, the metrics.
   The holdout gives a bound, not a point: `holdout_bound` (Wilson score per stratum,
   Horvitz-Thompson weights; see docs/selector.md).
3. `false_green_rate(metrics)`: over many runs, how often selection missed a new failure
   that the holdout caught while the selection itself was green.
4. `mass_failure(outcomes, shards, new)`: whether a run's failures look like the tool's
   fault (a whole shard failing alike, most of the run failing): such a run is held back
   from History until someone confirms it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from contracts.classification import Classification
from selector.history import History, HistoryUpdate, OutcomeRecord
from selector.holdout import HoldoutStratum
from selector.index import InventoryIndex
from selector.plan import Plan
from suites.model import Expectation, Inventory, Outcome, Status

EXPANSION_LIMIT = 500
CONFIDENCE = 0.95
BOUND_METHOD = "wilson-stratified"


@dataclass(frozen=True)
class FailureVerdict:
    id: str
    first: Status
    rerun: Status | None  # None when it was not rerun
    kind: str  # flaky | real | unconfirmed (no rerun outcome: counted as real)
    novelty: str  # new | pre-existing (only meaningful when not flaky)
    baseline: Status | None
    in_holdout: bool
    message: str = ""

    @property
    def confirmed_new(self) -> bool:
        return self.kind != "flaky" and self.novelty == "new"

    @property
    def classification(self) -> Classification:
        """flaky when a rerun passed, else new or pre-existing against the baseline."""
        if self.kind == "flaky":
            return Classification.FLAKY
        return Classification.NEW if self.novelty == "new" else Classification.PRE_EXISTING

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "first": str(self.first),
            "rerun": None if self.rerun is None else str(self.rerun),
            "kind": self.kind,
            "novelty": self.novelty,
            "baseline": None if self.baseline is None else str(self.baseline),
            "in_holdout": self.in_holdout,
            "message": self.message,
        }


@dataclass(frozen=True)
class Metrics:
    selected: int
    holdout: int
    eligible: int
    ratio_count: float
    ratio_time: float
    selected_new_failures: int
    holdout_misses: tuple[str, ...]  # new failures only the holdout found
    miss_rate: float | None  # weighted (Horvitz-Thompson) share of unselected missed; None
    estimated_missed: float | None  # miss_rate x unselected variants (a point: see the bound)
    false_green: bool  # the selection was green on new failures, the holdout was not
    # The bound (CONFIDENCE) the point estimates above lack; None without a holdout.
    miss_rate_upper: float | None = None
    missed_upper: float | None = None  # new failures among the unselected, at most
    recall_lower: float | None = None  # selected new / (selected new + missed_upper)
    unselected_time_share: float | None = None  # holdout seconds / unselected seconds
    method: str = ""
    strata: tuple[dict[str, Any], ...] = ()  # per stratum: population, drawn, rate, weight, ...

    def to_json(self) -> dict[str, Any]:
        return {
            "selected": self.selected,
            "holdout": self.holdout,
            "eligible": self.eligible,
            "ratio_count": self.ratio_count,
            "ratio_time": self.ratio_time,
            "selected_new_failures": self.selected_new_failures,
            "holdout_misses": list(self.holdout_misses),
            "miss_rate": self.miss_rate,
            "estimated_missed": self.estimated_missed,
            "false_green": self.false_green,
            "miss_rate_upper": self.miss_rate_upper,
            "missed_upper": self.missed_upper,
            "recall_lower": self.recall_lower,
            "unselected_time_share": self.unselected_time_share,
            "method": self.method,
            "strata": [dict(s) for s in self.strata],
        }


@dataclass(frozen=True)
class Verdict:
    failures: tuple[FailureVerdict, ...]
    fixed: tuple[str, ...]  # failing on the baseline, passing now
    expansion: tuple[str, ...]  # to run next, around confirmed new failures
    history_update: HistoryUpdate
    metrics: Metrics

    @property
    def new_failures(self) -> tuple[str, ...]:
        return tuple(f.id for f in self.failures if f.confirmed_new)

    @property
    def flaky(self) -> tuple[str, ...]:
        return tuple(f.id for f in self.failures if f.kind == "flaky")

    @property
    def pre_existing(self) -> tuple[str, ...]:
        return tuple(
            f.id for f in self.failures if f.kind != "flaky" and f.novelty == "pre-existing"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "failures": [f.to_json() for f in self.failures],
            "new_failures": list(self.new_failures),
            "flaky": list(self.flaky),
            "pre_existing": list(self.pre_existing),
            "fixed": list(self.fixed),
            "expansion": list(self.expansion),
            "history_update": self.history_update.to_json(),
            "metrics": self.metrics.to_json(),
        }


def to_rerun(outcomes: Iterable[Outcome]) -> tuple[str, ...]:
    """The ids whose first run failed: rerun them to tell flaky from real."""
    return tuple(sorted({o.id for o in outcomes if o.status.is_failure}))


def verify(
    plan: Plan,
    outcomes: Sequence[Outcome],
    reruns: Sequence[Outcome],
    history: History,
    inventory: Inventory | InventoryIndex,
    *,
    on_baseline: bool = True,
    expansion_limit: int = EXPANSION_LIMIT,
) -> Verdict:
    """Judge a finished run. `on_baseline`: the change landed, so results become the baseline."""
    index = InventoryIndex.of(inventory)
    holdout = set(plan.holdout)
    rerun_by_id: dict[str, list[Status]] = {}
    for r in reruns:
        rerun_by_id.setdefault(r.id, []).append(r.status)
    failures: list[FailureVerdict] = []
    final: dict[str, Status] = {}
    fixed: list[str] = []
    for o in outcomes:
        entry = history.get(o.id)
        baseline = entry.baseline if entry else None
        final[o.id] = o.status
        if not o.status.is_failure:
            if baseline is not None and baseline.is_failure:
                fixed.append(o.id)
            continue
        again = rerun_by_id.get(o.id)
        if again is None:
            kind, rerun_status = "unconfirmed", None
        elif any(not s.is_failure for s in again):
            kind = "flaky"
            rerun_status = next(s for s in again if not s.is_failure)
            final[o.id] = rerun_status
        else:
            kind, rerun_status = "real", again[-1]
        novelty = "pre-existing" if baseline is not None and baseline.is_failure else "new"
        failures.append(
            FailureVerdict(
                o.id, o.status, rerun_status, kind, novelty, baseline, o.id in holdout, o.message
            )
        )
    failures.sort(key=lambda f: f.id)
    new_ids = [f.id for f in failures if f.confirmed_new]
    ran = {o.id for o in outcomes}
    expansion = _expand(new_ids, index, ran, expansion_limit)
    paths = tuple(p.path for p in plan.facts.paths)
    update = HistoryUpdate(
        outcomes=tuple(OutcomeRecord(o.id, o.status, o.duration_s) for o in (*outcomes, *reruns)),
        mark_flaky=tuple(f.id for f in failures if f.kind == "flaky"),
        baseline=dict(sorted(final.items())) if on_baseline else {},
        co_failures={p: tuple(new_ids) for p in paths} if new_ids else {},
        known_variants=frozenset(index.ids),
    )
    return Verdict(
        tuple(failures), tuple(sorted(fixed)), expansion, update, _metrics(plan, failures, holdout)
    )


def _expand(
    new_ids: Sequence[str], index: InventoryIndex, ran: set[str], limit: int
) -> tuple[str, ...]:
    """Same subject in other dtypes and templates first, then the rest of the op family."""
    same_subject: dict[str, None] = {}
    same_family: dict[str, None] = {}
    for vid in new_ids:
        variant = index.by_id.get(vid)
        if variant is None:
            continue
        for other in index.by_op.get(index.op_of_id[vid], ()):
            same_subject[other] = None
        for other in index.by_family.get(index.family_of_id[vid], ()):
            same_family[other] = None
    ordered = [*same_subject, *(v for v in same_family if v not in same_subject)]
    keep = [
        v for v in ordered if v not in ran and index.by_id[v].expectation is not Expectation.SKIP
    ]
    return tuple(keep[:limit])


def _metrics(plan: Plan, failures: Sequence[FailureVerdict], holdout: set[str]) -> Metrics:
    t = plan.totals
    selected_new = sum(1 for f in failures if f.confirmed_new and not f.in_holdout)
    misses = tuple(f.id for f in failures if f.confirmed_new and f.in_holdout)
    bound = holdout_bound(plan.strata, misses) if holdout else None
    return Metrics(
        selected=t.selected,
        holdout=len(holdout),
        eligible=t.eligible,
        ratio_count=t.ratio_count,
        ratio_time=t.ratio_time,
        selected_new_failures=selected_new,
        holdout_misses=misses,
        miss_rate=None if bound is None else bound.miss_rate,
        estimated_missed=None if bound is None else round(bound.estimated_missed, 3),
        false_green=selected_new == 0 and bool(misses),
        miss_rate_upper=None if bound is None else bound.miss_rate_upper,
        missed_upper=None if bound is None else round(bound.missed_upper, 3),
        recall_lower=None if bound is None else bound.recall_lower(selected_new),
        unselected_time_share=None if bound is None else bound.time_share,
        method="" if bound is None else bound.method,
        strata=() if bound is None else bound.strata,
    )


@dataclass(frozen=True)
class HoldoutBound:
    """What a holdout says about the unselected: a weighted point and an upper bound."""

    unselected: int
    estimated_missed: float  # Horvitz-Thompson: sum over strata of weight x found
    missed_upper: float  # sum over strata of population x that stratum's Wilson upper bound
    time_share: float | None  # drawn seconds / population seconds, None when untimed
    method: str
    strata: tuple[dict[str, Any], ...]

    @property
    def miss_rate(self) -> float:
        return self.estimated_missed / self.unselected if self.unselected else 0.0

    @property
    def miss_rate_upper(self) -> float:
        return round(self.missed_upper / self.unselected, 6) if self.unselected else 0.0

    def recall_lower(self, caught: int) -> float | None:
        """Test recall at least: `caught` of `caught` plus the most that can have been missed."""
        total = caught + self.missed_upper
        return round(caught / total, 6) if total else None


def wilson_upper(found: int, drawn: int, z: float = 1.959964) -> float:
    """Upper end of the Wilson score interval for `found` of `drawn` (z = 1.96: the 95 %
    two-sided interval, a 97.5 % one-sided bound). 0 of 10 -> 0.2775."""
    if drawn <= 0:
        return 1.0
    p = found / drawn
    z2 = z * z
    centre = p + z2 / (2 * drawn)
    margin = z * math.sqrt(p * (1 - p) / drawn + z2 / (4 * drawn * drawn))
    return min(1.0, (centre + margin) / (1 + z2 / drawn))


def holdout_bound(
    strata: Sequence[HoldoutStratum], found: Collection[str], confidence: float = CONFIDENCE
) -> HoldoutBound:
    """Missed variants among the unselected, from the holdout's strata and the ids in it
    that failed new. The bound: each stratum's Wilson upper bound at a one-sided level of
    1 - (1 - confidence) / max(2, strata), times its population, summed; by the union bound
    the sum holds with at least `confidence`. A stratum drawn whole is known exactly."""
    found_set = set(found)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / max(2, len(strata)))
    estimated = upper = 0.0
    population_s = drawn_s = 0.0
    rows: list[dict[str, Any]] = []
    for s in strata:
        hits = sum(1 for v in s.ids if v in found_set)
        rate_upper = hits / s.drawn if s.drawn >= s.population else wilson_upper(hits, s.drawn, z)
        estimated += s.weight * hits
        upper += s.population * rate_upper
        population_s += s.population_s
        drawn_s += s.drawn_s
        rows.append(
            {
                "name": s.name,
                "population": s.population,
                "drawn": s.drawn,
                "rate": round(s.rate, 6),
                "weight": round(s.weight, 6),
                "found": hits,
                "miss_rate_upper": round(rate_upper, 6),
            }
        )
    return HoldoutBound(
        unselected=sum(s.population for s in strata),
        estimated_missed=estimated,
        missed_upper=upper,
        time_share=round(drawn_s / population_s, 6) if population_s > 0 else None,
        method=f"{BOUND_METHOD} {confidence:.0%}",
        strata=tuple(rows),
    )


def false_green_rate(runs: Iterable[Metrics]) -> float | None:
    """Share of runs with a holdout where selection was green but the holdout found a new
    failure: an estimate of how often a targeted run reports green wrongly."""
    sampled = [m for m in runs if m.holdout > 0]
    if not sampled:
        return None
    return sum(1 for m in sampled if m.false_green) / len(sampled)


MASS_FAILURE_MIN = 20  # fewer new failures than this are never "most of the run"
SHARD_FAILURE_MIN = 5  # a shard this big failing alike is suspect
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\d+")


def _gist(message: str) -> str:
    """A failure's first line with its numbers blanked: what the same cause has in common."""
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return _VOLATILE.sub("#", line)[:200]


def mass_failure(
    outcomes: Iterable[Outcome],
    shards: Sequence[Sequence[str]],
    new_failures: Collection[str],
    *,
    max_share: float = 0.5,
) -> str | None:
    """Why the new failures of a run look like the tool's fault, or None when they do not.

    Two signs: every variant of a shard (at least SHARD_FAILURE_MIN) failed new with the same
    message (its first line, numbers aside); or more than `max_share` of the variants that
    ran failed new (at least MASS_FAILURE_MIN of them). A real upstream break can do either;
    that is why such a run is held back, not thrown away.
    """
    by_id = {o.id: o for o in outcomes}
    new = set(new_failures)
    for index, shard in enumerate(shards):
        ran = [by_id[v] for v in shard if v in by_id and by_id[v].status is not Status.SKIPPED]
        if len(ran) < SHARD_FAILURE_MIN or any(o.id not in new for o in ran):
            continue
        gists = {_gist(o.message) for o in ran}
        if len(gists) == 1:
            return (
                f"every variant of shard-{index} ({len(ran)}) failed with the same "
                f"message: {next(iter(gists)) or '(no message)'}"
            )
    ran_total = sum(1 for o in by_id.values() if o.status is not Status.SKIPPED)
    failed = len(new & by_id.keys())
    if failed >= MASS_FAILURE_MIN and ran_total and failed / ran_total > max_share:
        return (
            f"{failed} of {ran_total} variants failed new ({failed / ran_total:.0%}, more "
            f"than the {max_share:.0%} a change is expected to break)"
        )
    return None
