"""Heuristics driven by records: definitions, co-failures, failing and flaky tests, new tests."""

from __future__ import annotations

from collections.abc import Mapping

from selector.heuristics.base import RetrieveContext, Score
from selector.history import FAILURES

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
        before = ctx.previous
        now = ctx.index.fingerprints
        scores: dict[str, Score] = {}
        # dict views do the set difference in C: 50,000 variants cost a few milliseconds.
        for vid, fingerprint in now.items() - before.items():
            old = before.get(vid)
            if old is not None:
                scores[vid] = Score(
                    DEFINITION, f"definition changed ({old[:8]} -> {fingerprint[:8]})"
                )
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
        last_run = Score(FAILING, "failing on the last run")
        baseline = Score(FAILING, "failing on the baseline")
        flaky = Score(FLAKY, "known flaky")
        for vid, entry in ctx.history.variants.items():
            recent = entry.recent
            if recent and recent[-1] in FAILURES:
                score = last_run
            elif entry.baseline in FAILURES:
                score = baseline
            elif entry.flaky:
                score = flaky
            else:
                continue
            if vid in by_id:
                scores[vid] = score
        return scores


class NewVariant:
    """A variant the previous inventory (or the History) did not have."""

    name = "new"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        ids = ctx.index.fingerprints.keys()
        if ctx.previous is not None:
            new = ids - ctx.previous.keys()
            source = "previous inventory"
        elif ctx.history.known_variants:
            new = ids - ctx.history.known_variants
            source = "history"
        else:
            return {}  # no record of the past: "new" would mean everything
        reason = Score(NEW, f"new variant (not in the {source})")
        return dict.fromkeys(new, reason)
