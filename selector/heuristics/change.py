"""Heuristics driven by the change itself: watch globs, op names, test templates, the trace."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from selector.globs import first_match
from selector.heuristics.base import RetrieveContext, Score
from selector.opnames import family_of, op_key
from selector.scout import PathFact

EXACT_OP = 1.0
FAMILY_OP = 0.6
WEAK_EXACT_OP = 0.5
WEAK_FAMILY_OP = 0.4
WATCH = 0.5
TEMPLATE = 0.7
IMPACT_OP = 0.9
IMPACT_FUNCTION = 0.8
IMPACT_MODULE = 0.4
UNTRACED = 0.3
TEST_ITSELF = 1.0
TEST_HELPER = 0.8
TEST_MODULE = 0.6
HUB_SHARE = 0.5  # reached by more than this share of the inventory: a hub
HUB_FACTOR = 0.5


def _keep_best(scores: dict[str, Score], ids: Iterable[str], score: Score) -> None:
    for vid in ids:
        old = scores.get(vid)
        if old is None or score.value > old.value:
            scores[vid] = score


class WatchGlobs:
    """A suite lists the upstream paths it cares about (`watch:`); a changed path matches.

    Only paths whose patch names no op count: when the patch of a watched file (the OpInfo
    database, say) names its ops, op matching is the sharper tool for it.
    """

    name = "watch"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        scores: dict[str, Score] = {}
        paths = [p.path for p in ctx.facts.paths if not p.ops and not _joined(p, ctx)]
        for globs, ids in ctx.index.by_watch.items():
            for path in paths:
                glob = first_match(globs, path)
                if glob is not None:
                    _keep_best(scores, ids, Score(WATCH, f"watch glob {glob!r} matches {path}"))
                    break
        return scores


def _joined(fact: PathFact, ctx: RetrieveContext) -> bool:
    """A path the trace joins precisely: its changed lines were placed in definitions by the
    old source, none at module level. The trace, not a glob over the whole file, says which
    variants run them (`torch/_decomp/**` is watched by nearly every op variant)."""
    return (
        ctx.impact is not None
        and fact.located == "source"
        and not fact.module_level
        and fact.area != "upstream_tests"
    )


class OpMatch:
    """Touched ops reach variants of the same op (aliases, in-place, out, refs) or family."""

    name = "op_match"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        scores: dict[str, Score] = {}
        index = ctx.index
        for op in ctx.facts.ops:
            where = op.evidence[0] if op.evidence else "the change"
            key = op_key(op.name)
            family = family_of(op.name, index.aliases)
            exact_ids = index.by_op.get(key, ())
            exact = WEAK_EXACT_OP if op.weak else EXACT_OP
            related = WEAK_FAMILY_OP if op.weak else FAMILY_OP
            _keep_best(scores, exact_ids, Score(exact, f"op {op.name} touched ({where})"))
            # Callers depend on callees: a family match reaches its level and above only.
            level = index.level_of_id
            _keep_best(
                scores,
                (v for v in index.by_family.get(family, ()) if level[v] >= op.level),
                Score(related, f"same op family {family!r} as touched op {op.name} ({where})"),
            )
        return scores


class TemplateChanged:
    """An upstream test function changed (test/test_ops.py `test_compare_cpu`)."""

    name = "template"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        scores: dict[str, Score] = {}
        for template in ctx.facts.templates:
            ids = ctx.index.by_template.get(template, ())
            _keep_best(scores, ids, Score(TEMPLATE, f"upstream test_{template} changed"))
        return scores


class UpstreamTestChanged:
    """A reused upstream test file changed: the file-suite variants of the tests whose code
    changed, and of the tests that use a changed helper of the file (`Variant.sources`). A
    change at the file's module level (imports, op lists) reaches all of its variants."""

    name = "upstream_test"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        index = ctx.index
        if not index.by_source:
            return {}
        scores: dict[str, Score] = {}
        for changed in ctx.facts.functions:
            path, _, name = changed.partition(":")
            for source, ids in _sources_of(index.by_source, path, name):
                qualname = source.partition(":")[2]
                own = [v for v in ids if index.by_id[v].sources[0] == source]
                _keep_best(scores, own, Score(TEST_ITSELF, f"upstream test {changed} changed"))
                _keep_best(
                    scores,
                    ids,
                    Score(TEST_HELPER, f"uses {path}:{qualname}, changed"),
                )
        for path in ctx.facts.modules:
            ids = index.by_test_file.get(path, ())
            _keep_best(
                scores, ids, Score(TEST_MODULE, f"{path} changed at module level (import time)")
            )
        return scores


def _sources_of(
    by_source: Mapping[str, tuple[str, ...]], path: str, name: str
) -> Iterable[tuple[str, tuple[str, ...]]]:
    """Sources a changed `name` of `path` names: `Class.method` exactly, `Class.*` (a class
    body) every definition of the class, code nested in a definition that definition, and a
    bare `method` (from hunk headers, without the source) any class's method of that name."""
    prefix = f"{path}:"
    if name.endswith(".*"):
        cls = name[:-2]
        return [
            (s, ids)
            for s, ids in by_source.items()
            if s.startswith(prefix)
            and (s[len(prefix) :] == cls or s[len(prefix) :].startswith(cls + "."))
        ]
    outer = name.split(".<locals>.")[0]
    exact = by_source.get(prefix + outer)
    if exact is not None:
        return [(prefix + outer, exact)]
    if "." not in outer:
        return [
            (s, ids)
            for s, ids in by_source.items()
            if s.startswith(prefix) and s.endswith("." + outer)
        ]
    return []


class ImpactMapMatch:
    """A traced run saw this variant execute a changed function or dispatch a touched op.

    Functions are joined by the line-level facts of the Scout (`path:qualname`, code nested
    in it, `Class.*` for a class body; a module-level change reaches every variant that ran
    anything of the file). Variants with no fresh trace (never traced, or their definition
    changed since) cannot be ruled out and score low. What most of the inventory reaches is
    a hub: said so, and scored below direct matches so that a budget keeps the closest.
    """

    name = "impact_map"

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]:
        impact = ctx.impact
        if impact is None:
            return {}
        facts = ctx.facts
        if not (facts.functions or facts.modules or facts.ops):
            return {}
        by_op = impact.inverted()[1]
        runnable = ctx.index.runnable_set
        scores: dict[str, Score] = {}
        reached: list[tuple[set[str], float, str]] = []
        for function in facts.functions:
            reached.append(
                (impact.executing(function), IMPACT_FUNCTION, f"executes changed {function}")
            )
            if impact.in_session(function):
                # It runs at import or collection (an OpInfo's __post_init__, a factory of
                # references): what it builds there, every variant may use.
                reached.append(
                    (
                        set(runnable),
                        IMPACT_MODULE,
                        f"changed {function} runs at import or collection (the trace's "
                        "session): any variant may depend on what it builds",
                    )
                )
        for path in facts.modules:
            reached.append(
                (
                    impact.executing_file(path),
                    IMPACT_MODULE,
                    f"runs code of {path}, changed at module level (import time)",
                )
            )
        for op in facts.ops:
            ids = set(by_op.get(op_key(op.name), ()))
            reached.append((ids, IMPACT_OP, f"dispatches touched aten::{op.name}"))
        size = max(1, len(runnable))
        for ids, value, reason in reached:
            ids &= runnable
            share = len(ids) / size
            if share > HUB_SHARE:
                value, reason = (
                    value * HUB_FACTOR,
                    f"{reason} (a hub: {share:.0%} of the inventory)",
                )
            _keep_best(scores, ids, Score(value, reason))
        # Traces record torch's own files: only a change there can run unseen in a variant
        # whose trace is stale (a changed upstream test is a template, matched by name).
        in_torch = any(f.startswith("torch/") for f in (*facts.functions, *facts.modules))
        stale = impact.stale(ctx.index.fingerprints) & runnable if in_torch else set()
        if stale:
            _keep_best(
                scores,
                stale,
                Score(
                    UNTRACED, "stale trace (definition changed since): a changed function may run"
                ),
            )
        return scores
