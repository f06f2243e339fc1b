"""Which variants a mutation can affect, from an impact map of the unmutated inventory.

The restriction is exact under two conditions, argued in docs/selection-benchmark.md:

* a run with the mutation executes exactly like the run without it up to the first time the
  mutated code runs: for a python mutation, a code object compiled from a changed line (the
  innermost function around it, or code nested in it); for a kernel mutation, a dispatcher
  call of one of its ops (the override calls the original kernel and only then perturbs);
* variants do not depend on which other variants ran before them in the same process
  (shards are cut arbitrarily; a dependence would already be flakiness).

So a variant whose unmutated trace contains none of the mutated code, in a process whose
session-level trace (imports, collection) contains none of it either, has its baseline
outcome under the mutation. A change outside every function (module level, a decorator, a
class body) runs at import: it touches every variant, and nothing is restricted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from benchmarks.selection.mutations.model import Mutation, torch_root
from selector.definitions import COSMETIC, FUNCTION, Located, locate
from selector.impact import ImpactMap


def changed_functions(mutation: Mutation, root: Path | None = None) -> set[str] | None:
    """`path:qualname` of the innermost functions around every changed line of a python
    mutation (in the unmutated file and the mutated one), or None when a change lies outside
    any function body (module level, a class body, a decorator or default: import time)."""
    root = root or torch_root()
    found: set[str] = set()
    for patch in mutation.patches:
        source = (root / patch.path).read_text(encoding="utf-8")
        located = locate(patch, source)
        if located is None:
            return None
        if any(item.cached for item in located):
            return None  # a memoized function (or code in one) runs once per process
        innermost: dict[tuple[str, int], Located] = {}
        for item in located:
            innermost.setdefault((item.side, item.line), item)
        for item in innermost.values():
            if item.kind == COSMETIC:
                continue  # a blank or comment line compiles to nothing
            if item.kind != FUNCTION:
                return None  # runs at import: every variant
            found.add(f"{patch.path}:{item.name}")
    return found


def touched_variants(mutation: Mutation, trace: ImpactMap, ids: Iterable[str]) -> set[str] | None:
    """Variants of `ids` the mutation can affect, or None when it can affect all of them
    (or the trace does not cover some of them)."""
    ids = list(ids)
    if any(vid not in trace.functions for vid in ids):
        return None
    if mutation.kind == "kernel":
        ops = set(mutation.ops)
        if ops & trace.session_ops:
            return None
        return {vid for vid in ids if ops & trace.aten_ops[vid]}
    functions = changed_functions(mutation)
    if functions is None:
        return None

    def hits(names: Iterable[str]) -> bool:
        return any(_within(name, f) for name in names for f in functions)

    if hits(trace.session_functions):
        return None
    return {vid for vid in ids if hits(trace.functions[vid])}


def _within(name: str, function: str) -> bool:
    # The function itself, or code nested in it (lambdas, comprehensions, inner defs).
    return name == function or name.startswith(function + ".<locals>.")
