"""Placing a Python patch's changed lines in functions when the old source at hand is not the
patch's base: the file moved on upstream since the wheel at hand was built, or no old source
is at hand at all. Pure: text in, names out.

`selector.definitions.locate` places a patch only where its hunks apply as they are. Two
looser ways, in this order, for the Scout to narrow a file through the trace:

1. `drifted_locate`: the old source, each hunk placed where its removed lines match and most
   of its context does (`patch --fuzz` lets 2 context lines at either end differ; here any
   may, as long as no other place fits as well), its context (and its removed lines, up to
   trailing white space) then read from the old source, where it applies exactly.
2. `hunk_functions`: the hunks alone, by indentation. Going up the hunk from a changed line,
   each line less indented than the last one found holds it (an `if`, a `for`, a `def`, a
   `class`); the line belongs to the innermost `def` among them. When the hunk shows the whole
   chain up to the module, the name is the qualname (`Tensor.__rpow__`); when it does not,
   the bare name (`__rpow__`), which the trace joins as any method or nested function of that
   name in the file (`ImpactMap.executing`). git's function context after `@@` is not used:
   git's default (the nearest unindented line) and its Python driver (the nearest `def`) differ,
   and the wrong one names a sibling. A changed line no `def` in its hunk holds (module or
   class level, or a body whose `def` is above the hunk) leaves the file unplaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace

from selector.definitions import Located, locate
from selector.diff import FilePatch, Hunk, split_lines

# A hunk is placed where its removed lines match and at least this share of its other
# (non-blank) context lines: patch's fuzz drops up to 2 context lines at either end; any one
# may differ here, as long as the place is the only one that fits as well.
CONTEXT_SHARE = 0.5
EVIDENCE_MIN = 3  # non-blank lines matching at the place, removed lines included
_DEF = re.compile(r"(?:async\s+)?def\s+(\w+)\s*\(")
_CLASS = re.compile(r"class\s+(\w+)\s*[(:]")


def drifted_locate(patch: FilePatch, source: str) -> tuple[list[Located], int] | None:
    """`locate` for a patch made against another version of `source`: each hunk at the one
    place where its removed lines match and more of its context than anywhere else (at least
    CONTEXT_SHARE of it, EVIDENCE_MIN lines in all), its context taken from `source` there:
    (located lines, context lines that differed), or None."""
    if patch.sections or not patch.hunks:
        return None
    raw = split_lines(source)[0]
    lines = [line.rstrip() for line in raw]
    hunks: list[Hunk] = []
    differed = 0
    for hunk in patch.hunks:
        placed = _place(lines, hunk)
        if placed is None:
            return None
        at, misses = placed
        differed += misses
        # The old side as `source` has it (context, and removed lines up to trailing white
        # space): the hunk then applies there exactly, as `locate` places hunks.
        rows, n = [], at
        for row in hunk.lines:
            if row[:1] in " -":
                row = row[:1] + raw[n]
                n += 1
            rows.append(row)
        hunks.append(replace(hunk, old_start=at + 1, lines=tuple(rows)))
    located = locate(replace(patch, hunks=tuple(hunks)), source)
    return None if located is None else (located, differed)


def _place(lines: Sequence[str], hunk: Hunk) -> tuple[int, int] | None:
    """(where the hunk's old side starts in `lines`, context lines that differ there), at the
    only best place that fits (see `drifted_locate`), or None."""
    old = [(row[:1] == "-", row[1:].rstrip()) for row in hunk.lines if row[:1] in " -"]
    context = sum(1 for removed, text in old if not removed and text.strip())
    best: list[int] = []
    best_score = -1
    for at in range(len(lines) - len(old) + 1):
        score = evidence = 0
        for i, (removed, text) in enumerate(old):
            same = lines[at + i] == text
            if removed and not same:
                break
            if same and text.strip():
                evidence += 1
                score += 0 if removed else 1
        else:
            if evidence < EVIDENCE_MIN or score < CONTEXT_SHARE * context:
                continue
            if score > best_score:
                best, best_score = [at], score
            elif score == best_score:
                best.append(at)
    if len(best) != 1:
        return None
    return best[0], context - best_score


def hunk_functions(patch: FilePatch) -> tuple[tuple[str, ...], str]:
    """(the functions holding the patch's changed code lines, by the hunks' indentation; why
    a line is not placed, or ""). Blank and comment lines are skipped; a changed decorator
    or `def` line belongs to its function."""
    names: dict[str, None] = {}
    for number, hunk in enumerate(patch.hunks, 1):
        for side, what in ((" -", "removed"), (" +", "added")):
            kept = [row for row in hunk.lines if row[:1] in side]
            rows = [row[1:] for row in kept]
            for i, row in enumerate(kept):
                if row[:1] == " ":
                    continue
                name = _holder(rows, i)
                if name is None:
                    shown = rows[i].strip()[:60]
                    return (), f"hunk {number}: no def in the hunk holds the {what} line {shown!r}"
                if name:
                    names[name] = None
    return tuple(names), ""


def _holder(rows: Sequence[str], i: int) -> str | None:
    """The function holding line `i` of one side of a hunk: its qualname, its bare name when
    the hunk does not reach the module, "" for a blank or comment line, None when no def in
    the hunk holds it."""
    text = rows[i].strip()
    if not text or text.startswith("#"):
        return ""
    if text.startswith("@"):  # a decorator: the def it decorates, below at its indentation
        own = _indent(rows[i])
        k = i + 1
        while k < len(rows) and (
            not rows[k].strip() or _indent(rows[k]) > own or rows[k].strip().startswith("@")
        ):
            k += 1
        if k == len(rows) or _indent(rows[k]) != own or not _DEF.match(rows[k].strip()):
            return None
        i, text = k, rows[k].strip()
    if _CLASS.match(text):
        return None  # a class statement: its body runs at import
    chain = list(_enclosing(rows, i))
    if match := _DEF.match(text):
        chain.insert(0, ("def", match.group(1), _indent(rows[i])))
    return _qualname(chain)


def _enclosing(rows: Sequence[str], i: int) -> Iterator[tuple[str, str, int]]:
    """(kind, name, indentation) of the statements holding line `i`, innermost first, as far
    as the rows above it show: each the nearest line above with less indentation. A line
    that starts with a closing bracket ends a statement whose opener is above (a multi-line
    `def` head), at its own indentation: it holds nothing, and belongs to that opener."""
    limit = _indent(rows[i]) + (1 if rows[i].strip()[:1] in ")]}" else 0)
    for k in range(i - 1, -1, -1):
        text = rows[k].strip()
        if not text or text.startswith("#") or text[0] in ")]}":
            continue
        indent = _indent(rows[k])
        if indent >= limit:
            continue
        limit = indent
        if match := _DEF.match(text):
            yield "def", match.group(1), indent
        elif match := _CLASS.match(text):
            yield "class", match.group(1), indent
        else:
            yield "block", "", indent
        if indent == 0:
            return


def _qualname(chain: Sequence[tuple[str, str, int]]) -> str | None:
    """`co_qualname` of the innermost def of `chain` (innermost first); its bare name when
    the chain stops short of the module; None when no def holds the line."""
    start = next((n for n, (kind, _, _) in enumerate(chain) if kind == "def"), None)
    if start is None:
        return None
    if chain[-1][2] != 0:  # the hunk does not show what holds the outermost of them
        return chain[start][1]
    qualname, above = "", ""
    for kind, name, _ in reversed(chain[start:]):
        if kind == "block":
            continue
        qualname += (".<locals>." if above == "def" else "." if above else "") + name
        above = kind
    return qualname


def _indent(row: str) -> int:
    return len(row) - len(row.lstrip(" \t"))
