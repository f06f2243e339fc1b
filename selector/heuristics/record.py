"""Heuristics driven by records: definitions, co-failures, failing and flaky tests, new tests."""

from __future__ import annotations

from collections.abc import Mapping

from selector.heuristics.base import RetrieveContext, Score

DEFINITION = 1.0
FAILING = 1.0
FLAKY = -0.1  # ordering hint under a budget: a flaky test says least about this change
NEW = 1.0


class DefinitionChanged:
    """The variant's definition fingerprint differs from the previous inventory's."""

    name = "definition"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        if ctx.previous is None:
            return {}
        before = {v.id: v.fingerprint for v in ctx.previous.variants}
        scores: dict[str, Score] = {}
        for v in ctx.index.inventory.variants:
            old = before.get(v.id)
            if old is not None and old != v.fingerprint:
                scores[v.id] = Score(DEFINITION, f"definition changed ({old[:8]} -> "
                                                 f"{v.fingerprint[:8]})")
        return scores


class CoFailure:
    """Changes to this path made this variant newly fail before."""

    name = "co_failure"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        scores: dict[str, Score] = {}
        for fact in ctx.facts.paths:
            for vid, count in ctx.history.co_failures.get(fact.path, {}).items():
                if vid not in ctx.index.by_id or count <= 0:
                    continue
                value = min(0.9, 0.3 + 0.15 * count)
                old = scores.get(vid)
                if old is None or value > old.value:
                    scores[vid] = Score(value, f"failed {count}x before with {fact.path} changed")
        return scores


class PreviouslyFailing:
    """Failing tests run until green; known-flaky ones sort last under a budget."""

    name = "failing"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        scores: dict[str, Score] = {}
        by_id = ctx.index.by_id
        for vid, entry in ctx.history.variants.items():
            if vid not in by_id:
                continue
            if entry.failing:
                where = "last run" if entry.last and entry.last.is_failure else "baseline"
                scores[vid] = Score(FAILING, f"failing on the {where}")
            elif entry.flaky:
                scores[vid] = Score(FLAKY, "known flaky")
        return scores


class NewVariant:
    """A variant the previous inventory (or the History) did not have."""

    name = "new"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        if ctx.previous is not None:
            known = frozenset(v.id for v in ctx.previous.variants)
            source = "previous inventory"
        elif ctx.history.known_variants:
            known = ctx.history.known_variants
            source = "history"
        else:
            return {}  # no record of the past: "new" would mean everything
        reason = Score(NEW, f"new variant (not in the {source})")
        return {vid: reason for vid in ctx.index.ids if vid not in known}
