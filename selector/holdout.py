"""The holdout: a seeded, stratified sample of the variants a plan did not select.

Variants near the change (the op families of the touched and selected ops, changed
templates) are drawn NEAR_BOOST times as often as the others; Verify weighs each drawn
variant back by its stratum (`HoldoutStratum.weight`, Horvitz-Thompson), so the estimate of
what selection missed stays unbiased (docs/selector.md, "The holdout: strata and weights").

By default the holdout's cost is bounded by the selection's: the number of draws is cut until
their expected seconds (draws x the stratum's mean duration) fit in a share of the selected
seconds, never below a floor. The count is fixed before any variant is drawn and each stratum
is still a simple random sample of that many, so a slow variant is as likely to be drawn as
a fast one of its stratum and the weights stay population / drawn.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from selector.index import InventoryIndex
from selector.opnames import family_of
from selector.scout import ChangeFacts

# A near variant (see `_near`) is this many times likelier to be in the holdout than a far one.
NEAR_BOOST = 4.0
# Every non-empty stratum gets at least this many draws: a stratum drawn once bounds nothing.
STRATUM_MIN = 5


class HoldoutKnobs(Protocol):
    """What of the plan's configuration the draw reads (`PlanConfig` has them all)."""

    @property
    def holdout_share(self) -> float: ...  # of the unselected

    @property
    def holdout_min(self) -> int: ...  # drawn at least, before the time bound

    @property
    def holdout_bound(self) -> float | None: ...  # of the selected seconds; None: unbounded

    @property
    def holdout_floor(self) -> int: ...  # drawn at least, whatever the time bound


@dataclass(frozen=True)
class HoldoutStratum:
    """One stratum of the holdout sample: its unselected population and what was drawn.

    Verify weighs each drawn variant by `weight` (population / drawn, Horvitz-Thompson), so
    drawing near variants more often does not bias the estimate of what selection missed.
    """

    name: str  # near | far | all (one uniform stratum: a plan from before the strata)
    population: int  # unselected runnable variants in the stratum
    ids: tuple[str, ...]  # the drawn ones, sorted
    population_s: float = 0.0  # historical seconds of the population
    drawn_s: float = 0.0

    @property
    def drawn(self) -> int:
        return len(self.ids)

    @property
    def rate(self) -> float:
        return self.drawn / self.population if self.population else 0.0

    @property
    def weight(self) -> float:
        return self.population / self.drawn if self.drawn else 0.0

    @property
    def expected_s(self) -> float:
        """The seconds this many draws take on average: drawn x the population's mean."""
        return self.drawn * self.population_s / self.population if self.population else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "population": self.population,
            "drawn": self.drawn,
            "rate": round(self.rate, 6),
            "weight": round(self.weight, 6),
            "population_s": round(self.population_s, 3),
            "drawn_s": round(self.drawn_s, 3),
            "ids": list(self.ids),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HoldoutStratum:
        return cls(
            str(data["name"]),
            int(data["population"]),
            tuple(data.get("ids", ())),
            float(data.get("population_s", 0.0)),
            float(data.get("drawn_s", 0.0)),
        )


def uniform_holdout(
    holdout: Iterable[str], population: int, population_s: float = 0.0, drawn_s: float = 0.0
) -> tuple[HoldoutStratum, ...]:
    """A holdout drawn uniformly from `population` unselected variants, as one stratum."""
    ids = tuple(sorted(holdout))
    if not ids:
        return ()
    return (HoldoutStratum("all", max(population, len(ids)), ids, population_s, drawn_s),)


def near_variants(
    facts: ChangeFacts, index: InventoryIndex, chosen: Iterable[str]
) -> frozenset[str]:
    """Variants near the change: the op families of the touched ops and of the selection,
    and the templates whose upstream test changed. A miss is likelier there (a relative of
    what was chosen, one a budget or the threshold cut), so the holdout looks there more."""
    families = {family_of(op.name, index.aliases) for op in facts.ops}
    families.update(index.family_of_id[v] for v in chosen)
    near: set[str] = set()
    for family in families:
        near.update(index.by_family.get(family, ()))
    for template in facts.templates:
        near.update(index.by_template.get(template, ()))
    return frozenset(near)


@dataclass(frozen=True)
class HoldoutRule:
    """How a plan sized its holdout (plan.json `holdout_rule`)."""

    share: float  # of the unselected, at least `minimum`
    minimum: int
    time_share: float | None  # of the selected seconds (None: not bounded by time)
    allowance_s: float | None  # time_share x the selected seconds
    floor: int  # drawn at least, whatever the allowance
    expected_s: float  # the drawn count's expected seconds (strata means)

    def to_json(self) -> dict[str, Any]:
        return {
            "share": self.share,
            "minimum": self.minimum,
            "time_share": self.time_share,
            "allowance_s": None if self.allowance_s is None else round(self.allowance_s, 3),
            "floor": self.floor,
            "expected_s": round(self.expected_s, 3),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HoldoutRule:
        time_share, allowance = data.get("time_share"), data.get("allowance_s")
        return cls(
            float(data["share"]),
            int(data.get("minimum", 0)),
            None if time_share is None else float(time_share),
            None if allowance is None else float(allowance),
            int(data.get("floor", 0)),
            float(data.get("expected_s", 0.0)),
        )


def draw_holdout(
    unchosen: Sequence[str],
    near: Collection[str],
    config: HoldoutKnobs,
    rng: random.Random,
    durations: Mapping[str, float],
    unselected_s: float,
    limit: int | None = None,
    selected_s: float = 0.0,
) -> tuple[HoldoutStratum, ...]:
    """The holdout's strata: `holdout_share` of `unchosen` (at least `holdout_min`, at most
    `limit`: what a count budget leaves), a `near` one NEAR_BOOST times as likely to be drawn
    as a far one. With `holdout_bound`, fewer: the most draws whose expected seconds fit
    in that share of `selected_s` (the selection's), at least `holdout_floor`. `unselected_s`:
    the seconds of all of `unchosen` (the far stratum's are what the near one's leave)."""
    if not unchosen or (limit is not None and limit <= 0):
        return ()
    pools = {
        "near": [v for v in unchosen if v in near],
        "far": [v for v in unchosen if v not in near],
    }
    k = min(len(unchosen), max(1, config.holdout_min, round(config.holdout_share * len(unchosen))))
    if limit is not None:
        k = min(k, limit)
    near_s = sum(durations[v] for v in pools["near"])
    seconds = {"near": near_s, "far": max(0.0, unselected_s - near_s)}
    if config.holdout_bound is not None:
        means = [seconds[n] / len(p) if p else 0.0 for n, p in pools.items()]
        allowance = config.holdout_bound * selected_s
        k = _fitting(
            k, allowance, config.holdout_floor, len(pools["near"]), len(pools["far"]), means
        )
    sizes = _allocate(k, len(pools["near"]), len(pools["far"]))
    if limit is not None and sum(sizes) > limit:  # the strata minimums do not fit: near first
        near_n = min(sizes[0], limit - min(sizes[1], limit // 2))
        sizes = (near_n, min(sizes[1], limit - near_n))
    strata = []
    for (name, pool), n in zip(pools.items(), sizes, strict=True):
        if pool:
            ids = tuple(sorted(rng.sample(pool, n)))
            strata.append(
                HoldoutStratum(name, len(pool), ids, seconds[name], sum(durations[v] for v in ids))
            )
    return tuple(strata)


def _fitting(
    most: int, allowance: float, floor: int, near: int, far: int, means: Sequence[float]
) -> int:
    """The most draws (up to `most`) whose expected seconds, as `_allocate` splits them over
    the strata, fit in `allowance`; at least `floor` (or `most`, when less). The count depends
    on the strata's sizes and mean durations only, never on which variants are drawn."""
    k = min(most, floor)
    while k < most:
        n_near, n_far = _allocate(k + 1, near, far)
        if n_near * means[0] + n_far * means[1] > allowance:
            break
        k += 1
    return k


def _allocate(k: int, near: int, far: int) -> tuple[int, int]:
    """Draws per stratum: k split so a near variant is NEAR_BOOST times as likely to be drawn,
    each non-empty stratum at least STRATUM_MIN (or all of it), what one cannot take spilling
    to the other."""
    if not near or not far:
        return min(k, near), min(k, far)
    far_rate = k / (NEAR_BOOST * near + far)
    k_near = max(min(near, STRATUM_MIN), min(near, round(NEAR_BOOST * far_rate * near)))
    k_far = min(far, max(min(far, STRATUM_MIN), k - k_near))
    return min(near, max(k_near, k - k_far)), k_far
