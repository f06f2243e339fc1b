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

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from selector.impact import ImpactMap
from workflows.bench.mutations.model import Mutation, torch_root


def changed_functions(mutation: Mutation, root: Path | None = None) -> set[str] | None:
    """`path:qualname` of the innermost functions around every changed line of a python
    mutation (in the unmutated file), or None when a change lies outside any function."""
    root = root or torch_root()
    found: set[str] = set()
    for patch in mutation.patches:
        source = (root / patch.path).read_text(encoding="utf-8")
        spans = _function_spans(ast.parse(source))
        for line in _changed_old_lines(patch):
            inner = _innermost(spans, line)
            if inner is None:
                return None
            found.add(f"{patch.path}:{inner}")
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


def _function_spans(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first body line, last line, qualname) of every function. Decorators and the
    signature (default values) run when the module executes the `def`: module-level code."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                spans.append((child.body[0].lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.<locals>.", True)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", in_function)
            else:
                visit(child, prefix, in_function)

    visit(tree, "", False)
    return spans


def _innermost(spans: list[tuple[int, int, str]], line: int) -> str | None:
    best: tuple[int, int, str] | None = None
    for span in spans:
        if span[0] <= line <= span[1] and (best is None or span[0] >= best[0]):
            best = span
    return None if best is None else best[2]


def _changed_old_lines(patch: Any) -> list[int]:
    """Old-file line numbers of removed lines; an insertion counts as the line before it."""
    lines: list[int] = []
    for hunk in patch.hunks:
        old = hunk.old_start
        for text in hunk.lines:
            tag = text[:1]
            if tag == "-":
                lines.append(old)
                old += 1
            elif tag == "+":
                lines.append(max(old - 1, 1))
            else:
                old += 1
    return lines
