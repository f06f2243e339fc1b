"""Stage 1, Scout: what a change touches (areas, ops, templates) and whether it can be narrowed.

Long on purpose: stage 1 is one function (`scout`), the facts it returns (`PathFact`, `TouchedOp`,
`ChangeFacts`) and the helpers only it calls; what it shares with other stages already has its own
module (areas, definitions, diff, opnames, globs).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from contracts.codec import EMPTY, Record, wire
from selector.areas import classify
from selector.changeset import ChangeSet
from selector.definitions import (
    CLASS,
    COSMETIC,
    DOCSTRING,
    FUNCTION,
    MODULE,
    SIGNATURE,
    Located,
    definitions_of,
    locate,
)
from selector.diff import FilePatch, iter_changed_lines
from selector.drift import drifted_locate, hunk_functions
from selector.globs import first_match
from selector.impact import ImpactMap
from selector.index import InventoryIndex
from selector.kernels import NO_MAP, KernelNaming, name_changes
from selector.levels import LEVEL_MODULE, source_level
from selector.opnames import (
    Touch,
    canonical,
    compact,
    line_names,
    located_touches,
    op_key,
    touched_names,
)
from suites.template_names import TEMPLATE_UPSTREAM

NIGHTLY_KINDS = ("nightly", "periodic")
# The upstream test each template reimplements, by its test name (`test_fn_grad` is our
# `backward`, `test_python_ref_torch_fallback` our `python_ref`); another `test_X` names a
# template `X` when a suite has one.
_UPSTREAM_TESTS: dict[str, tuple[str, ...]] = {
    test: tuple(t for t, (_, name) in TEMPLATE_UPSTREAM.items() if name == test)
    for _, test in TEMPLATE_UPSTREAM.values()
}
# PyTorch's own label to turn target determination off for a pull request.
FULL_RUN_LABELS = ("ci-no-td", "ciflow/crcr/spyre-full")
_EVIDENCE_LIMIT = 6
# A blind-area file narrowed through the trace runs in full when the changed functions run in
# more than this share of the runnable variants: the trace records functions, not the
# branches in them, so it cannot say which of those variants the edit reaches, and a full
# run then costs at most 1 / 0.9 = 1.11x the narrowed one.
HUB_FULL_SHARE = 0.9
_SCHEMA_EVIDENCE = ("native_functions.yaml func", "derivatives.yaml name")


@dataclass(frozen=True)
class PathFact(Record):
    path: str
    status: str
    area: str
    policy: str  # none | blind | targeted (from selector.areas)
    ops: tuple[str, ...] = ()
    has_patch: bool = False
    unresolved: bool = False  # kernel code whose ops could not be named
    untested: tuple[str, ...] = ()  # schema entries named that no variant tests (a new op)
    cosmetic: bool = False  # only comments and blank lines changed
    # How changed lines were placed: "source" (the old file's structure), "hunks" (the diff
    # text alone: hunk headers and changed lines), "" (no patch).
    located: str = ""
    definitions: tuple[str, ...] = ()  # "function glu", "entry nn.ELU", ... (source only)
    module_level: bool = False  # a change outside every definition: it runs at import
    # Why a path is run broadly (a fallback the Scout chose), or "".
    broad: str = ""
    # C++: changed definitions the kernel map could not name, each with why (`selector.kernels`);
    # written only when there are some (a plan from before them saves back unchanged).
    unnamed: tuple[str, ...] = field(default=(), metadata=wire(omit=EMPTY))


@dataclass(frozen=True)
class TouchedOp(Record):
    name: str  # canonical op name (namespace kept, overload dropped)
    evidence: tuple[str, ...]  # "path: how"
    weak: bool = False  # only a file-name guess points at it
    # How high in the stack the change sits (`selector.levels`: 0 ops, 1 nn modules). Family
    # matches reach variants at this level or above: callers depend on callees, not the reverse.
    level: int = 0


@dataclass(frozen=True)
class ChangeFacts:
    """What the Scout found, and its decision: none | targeted | blind | rerun-failed."""

    decision: str
    reasons: tuple[str, ...]
    paths: tuple[PathFact, ...]
    ops: tuple[TouchedOp, ...]
    templates: tuple[str, ...]  # test templates whose upstream test function changed
    functions: tuple[str, ...]  # "path:name" of changed Python functions (for impact maps)
    completeness: str  # full | paths-only | partial | truncated
    risk: str  # none | low | medium | high
    risk_reasons: tuple[str, ...]
    kind: str = ""
    head_sha: str = ""
    # Python files changed at module level (outside every definition): code that runs at
    # import, reached by every variant that runs anything of the file.
    modules: tuple[str, ...] = ()

    @property
    def areas(self) -> dict[str, int]:
        return dict(Counter(p.area for p in self.paths))

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.ops)

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reasons": list(self.reasons),
            "kind": self.kind,
            "head_sha": self.head_sha,
            "completeness": self.completeness,
            "risk": self.risk,
            "risk_reasons": list(self.risk_reasons),
            "areas": self.areas,
            "ops": [o.to_json() for o in self.ops],
            "templates": list(self.templates),
            "functions": list(self.functions),
            "modules": list(self.modules),
            "paths": [p.to_json() for p in self.paths],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChangeFacts:
        return cls(
            decision=data["decision"],
            reasons=tuple(data.get("reasons", ())),
            paths=tuple(PathFact.from_json(p) for p in data.get("paths", ())),
            ops=tuple(TouchedOp.from_json(o) for o in data.get("ops", ())),
            templates=tuple(data.get("templates", ())),
            functions=tuple(data.get("functions", ())),
            completeness=data.get("completeness", "full"),
            risk=data.get("risk", ""),
            risk_reasons=tuple(data.get("risk_reasons", ())),
            kind=data.get("kind", ""),
            head_sha=data.get("head_sha", ""),
            modules=tuple(data.get("modules", ())),
        )


def scout(
    changes: ChangeSet,
    index: InventoryIndex | None = None,
    full_run_labels: Iterable[str] = FULL_RUN_LABELS,
    *,
    traced: bool = False,
    traced_ops: Collection[str] = (),
    impact: ImpactMap | None = None,
) -> ChangeFacts:
    """Classify every path, name the touched ops (kept when `index` knows them) and decide.

    `traced`: a trace (impact map) will join the changed functions; without one, a code path
    that names no op and no suite watches cannot be narrowed and runs blind. `traced_ops`:
    the ops (`op_key`) the trace saw dispatched; a kernel of one of them is named even when
    no variant tests it by name (the trace joins it). `impact`: that trace, when at hand: a
    blind-area file whose changed functions most variants run (`HUB_FULL_SHARE`), or that
    run at import, is not narrowed."""
    traced = traced or impact is not None
    path_facts: list[PathFact] = []
    ops: dict[str, list[str]] = {}
    weak_only: dict[str, bool] = {}
    level: dict[str, int] = {}
    templates: set[str] = set()
    functions: dict[str, None] = {}
    modules: dict[str, None] = {}
    for changed in changes.paths:
        rule = classify(changed.path)
        patch = changes.patches.get(changed.path)
        located = _locate(changed.path, patch, changes.sources)
        if located is None and patch is not None and _cosmetic(patch):
            # Without the source, line by line: a `#` line inside a string would count too.
            path_facts.append(
                PathFact(
                    changed.path, changed.status, rule.area, "none", has_patch=True, cosmetic=True
                )
            )
            continue
        if located and all(i.kind in (COSMETIC, DOCSTRING) for i in _innermost(located)):
            # Only blank lines, comments and docstrings changed (placed by the source).
            path_facts.append(
                PathFact(
                    changed.path,
                    changed.status,
                    rule.area,
                    "none",
                    has_patch=True,
                    cosmetic=True,
                    located="source",
                )
            )
            continue
        policy = rule.policy
        narrowed = blind_why = ""
        if policy == "blind" and traced and patch is not None and changed.path.endswith(".py"):
            # A Python file every op depends on (torch/_tensor.py), changed only inside
            # function bodies: the trace knows which variants run those functions.
            placed = _blind_python(changed.path, patch, located, changes.sources, index, impact)
            located, executed, narrowed, blind_why, placed_by = placed
            if narrowed:
                policy = "targeted"
        else:
            executed = _executed(located) if located is not None else None
            placed_by = "source" if located is not None else "hunks" if patch else ""
        # A module-level line runs at import; a memoized function's body runs once per
        # process, credited by a trace to whichever variant called it first: both reach
        # every variant that runs code of the file.
        module_level = located is not None and _at_import(located)
        if policy != "targeted":
            touches: list[Touch] = []
        elif located is not None and patch is not None:
            touches = [*located_touches(changed.path, located), *line_names(patch)]
            if changed.path.endswith(_CPP_SUFFIXES):
                touches += list(touched_names(FilePatch(changed.path, "modified")))
        else:
            touches = _touches(changed.path, patch)
        named: list[str] = []
        untested: list[str] = []
        kernels = KernelNaming()
        if (
            policy == "targeted"
            and index is not None
            and patch is not None
            and changed.path.endswith(_CPP_SUFFIXES)
        ):
            kernels = _kernel_naming(
                changed.path, patch, located, changes.sources.get(changed.path), index, traced_ops
            )
        for op, how in kernels.found:
            # The kernel map first: its evidence is the one a reason shows.
            kernel_op = canonical(op)
            named.append(kernel_op)
            evidence = ops.setdefault(kernel_op, [])
            note = f"{changed.path}: {how}"
            if note not in evidence:
                evidence.append(note)
            weak_only[kernel_op] = False
            level[kernel_op] = min(level.get(kernel_op, LEVEL_MODULE), source_level(changed.path))
        for touch in touches:
            test = touch.name.rsplit(".", 1)[-1]  # `TestCommon.test_out` is `test_out`
            if rule.area == "upstream_tests" and test.startswith("test_"):
                for template in _UPSTREAM_TESTS.get(test, (test[len("test_") :],)):
                    # A new upstream test is not a template any suite reuses.
                    if index is None or template in index.by_template:
                        templates.add(template)
                continue
            if (
                executed is None
                and touch.path.endswith(".py")
                and touch.evidence.endswith(("def", "class"))
            ):
                functions[f"{touch.path}:{touch.name.rsplit('.', 1)[-1]}"] = None
            name = _resolve(touch, index)
            if name is None:
                # A schema entry names an op for sure, even one no variant tests yet (a new
                # op); a C++ symbol the inventory does not know may be a shared helper.
                if touch.evidence in _SCHEMA_EVIDENCE:
                    untested.append(canonical(touch.name))
                continue
            named.append(name)
            evidence = ops.setdefault(name, [])
            note = f"{touch.path}: {touch.evidence}"
            if note not in evidence:
                evidence.append(note)
            weak_only[name] = weak_only.get(name, True) and touch.weak
            level[name] = min(level.get(name, LEVEL_MODULE), source_level(touch.path))
        if executed is not None and policy == "targeted" and changed.path.endswith(".py"):
            for qualname in executed:
                functions[f"{changed.path}:{qualname}"] = None
            if module_level:
                modules[changed.path] = None
        unresolved = (
            policy == "targeted" and rule.unresolved_is_blind and not named and not untested
        )
        broad = narrowed or blind_why
        if (
            policy == "targeted"
            and not unresolved
            and not named
            and not untested
            and not traced
            and rule.area not in ("upstream_tests", "test_db")
            and changed.path.endswith(".py")
            and not _watched(changed.path, index)
        ):
            # No op named, no suite watches it, no trace to join: a silent nothing otherwise.
            unresolved = True
            broad = "no op named, no suite watches it and no trace joins its definitions"
        path_facts.append(
            PathFact(
                changed.path,
                changed.status,
                rule.area,
                policy,
                tuple(dict.fromkeys(named)),
                patch is not None,
                unresolved,
                tuple(dict.fromkeys(untested)),
                located=placed_by,
                definitions=_digest(located) or tuple(f"function {q}" for q in executed or ()),
                module_level=module_level,
                broad=broad,
                unnamed=kernels.unnamed,
            )
        )
    touched = tuple(
        TouchedOp(name, tuple(ev[:_EVIDENCE_LIMIT]), weak_only[name], level[name])
        for name, ev in ops.items()
    )
    decision, reasons = _decide(changes, path_facts, set(full_run_labels))
    completeness = _completeness(changes, path_facts)
    risk, risk_reasons = _risk(decision, path_facts, touched, completeness)
    return ChangeFacts(
        decision=decision,
        reasons=tuple(reasons),
        paths=tuple(path_facts),
        ops=touched,
        templates=tuple(sorted(templates)),
        functions=tuple(functions),
        completeness=completeness,
        risk=risk,
        risk_reasons=tuple(risk_reasons),
        kind=changes.kind,
        head_sha=changes.head_sha,
        modules=tuple(modules),
    )


_CPP_SUFFIXES = (".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".mm", ".c")
_DIGEST_LIMIT = 12


def _locate(path: str, patch: FilePatch | None, sources: Mapping[str, str]) -> list[Located] | None:
    """The definitions holding the changed lines, from the old file's text (None when the
    text is not at hand, not understood, or the patch does not apply to it)."""
    source = sources.get(path)
    if patch is None or source is None or patch.binary or not patch.hunks:
        return None
    return locate(patch, source)  # None too for a file type it does not read


def _innermost(located: Iterable[Located]) -> list[Located]:
    """The innermost definition of each changed line (`locate` lists innermost first)."""
    seen: dict[tuple[str, int], Located] = {}
    for item in located:
        seen.setdefault((item.side, item.line), item)
    return list(seen.values())


def _at_import(located: list[Located]) -> bool:
    """A change that runs at import (module level) or once per process (a memoized body)."""
    return any(item.kind == MODULE for item in _innermost(located)) or any(
        item.cached for item in located
    )


def _blind_python(
    path: str,
    patch: FilePatch,
    located: list[Located] | None,
    sources: Mapping[str, str],
    index: InventoryIndex | None,
    impact: ImpactMap | None,
) -> tuple[list[Located] | None, list[str] | None, str, str, str]:
    """A Python file of a blind area with a trace: (located lines, changed functions, why it is
    narrowed or "", why it runs in full or "", how its lines were placed). Narrowed when every
    changed line is inside a function, placed by the old source (where the patch does not
    apply as it is, at the one place its removed lines and most of its context match: it was
    made against another version of the file, `selector.drift`) or by the hunks' indentation
    (no old source), and those functions are no hub (`_hub`)."""
    source = sources.get(path)
    how, note = "source", ""
    if located is None and source is not None:
        drifted = drifted_locate(patch, source)
        if drifted is not None:
            located, differed = drifted
            how = "drift"
            note = (
                ", placed in the old source where the patch's changed lines match "
                f"({differed} of its context line(s) differ: made against another version)"
            )
    at_hand = (
        "no old source at hand"
        if source is None
        else "the patch does not fit the old source at hand (its removed lines or most of "
        "its context differ)"
    )
    if located is not None:
        names = _executed(located)
        if _at_import(located) or any(i.kind == CLASS for i in _innermost(located)):
            why = "changed at module or class level, or in a memoized function: runs at import"
            return located, names, "", why, how
    else:
        how = "hunks"
        found, unplaced = hunk_functions(patch)
        if not found:
            return (
                None,
                None,
                "",
                f"changed lines not placed in functions: {at_hand}, and "
                f"{unplaced or 'the patch shows no changed line'}",
                how,
            )
        names, note = list(found), f", placed by the hunks' indentation ({at_hand})"
    hub = _hub(path, names, index, impact)
    if not names or hub:
        return located, names, "", hub or "no changed function found", how
    return located, names, f"only function bodies changed{note}; the trace joins them", "", how


def _hub(
    path: str, qualnames: list[str], index: InventoryIndex | None, impact: ImpactMap | None
) -> str:
    """Why the trace cannot narrow the changed functions of a blind-area file, or "": one
    runs at import (the trace's session: every variant may depend on what it builds), or
    together they run in more than HUB_FULL_SHARE of the runnable variants."""
    if impact is None or index is None or not index.runnable_set:
        return ""
    reach: set[str] = set()
    for qualname in qualnames:
        function = f"{path}:{qualname}"
        if impact.in_session(function):
            return (
                f"changed {qualname} runs at import (the trace's session): every variant may "
                "depend on what it builds"
            )
        reach |= impact.executing(function)
    share = len(reach & index.runnable_set) / len(index.runnable_set)
    if share <= HUB_FULL_SHARE:
        return ""
    shown = ", ".join(qualnames[:3]) + (" and more" if len(qualnames) > 3 else "")
    return (
        f"changed {shown} run in {share:.0%} of the variants (a hub: over "
        f"{HUB_FULL_SHARE:.0%}; the trace records functions, not the branches in them)"
    )


def _executed(located: list[Located]) -> list[str]:
    """Qualnames whose code changed: the innermost function of each line (its decorators and
    defaults too: they decide what the name runs), and `Class.*` for a class body."""
    names: dict[str, None] = {}
    for item in _innermost(located):
        if item.kind in (FUNCTION, SIGNATURE):
            names[item.name] = None
        elif item.kind == CLASS:
            names[item.name + ".*"] = None
    return list(names)


def _kernel_naming(
    path: str,
    patch: FilePatch,
    located: list[Located] | None,
    source: str | None,
    index: InventoryIndex,
    traced_ops: Collection[str],
) -> KernelNaming:
    """The kernel map's names for a C++ file's changed definitions (`selector.kernels`): an
    op counts when the inventory tests it or the trace saw it dispatched."""

    def accept(op: str) -> bool:
        return index.knows_op(op) or op_key(op) in traced_ops

    innermost = _innermost(located) if located is not None else None
    return name_changes(index.kernels, patch, innermost, source, accept)


def _digest(located: list[Located] | None) -> tuple[str, ...]:
    if located is None:
        return ()
    seen = [f"{d.kind} {d.name}".strip() for d in definitions_of(_innermost(located))]
    return tuple(seen[:_DIGEST_LIMIT])


def _watched(path: str, index: InventoryIndex | None) -> bool:
    if index is None:
        return True  # without an inventory nothing is known of the watch globs
    return any(first_match(globs, path) is not None for globs in index.by_watch)


# Line comments by file type; a change of only these (and blank lines) changes no behaviour.
# C/C++ `#` lines are preprocessor directives, and `/* */` blocks are not judged line by line.
_COMMENTS = {
    ".py": "#",
    ".pyi": "#",
    ".yaml": "#",
    ".yml": "#",
    ".cpp": "//",
    ".cc": "//",
    ".cu": "//",
    ".cuh": "//",
    ".h": "//",
    ".hpp": "//",
    ".c": "//",
    ".mm": "//",
}


def _cosmetic(patch: FilePatch) -> bool:
    """True when every changed line of a modified text file is blank or a line comment."""
    marker = _COMMENTS.get(PurePosixPath(patch.path).suffix)
    if marker is None or patch.status != "modified" or patch.binary or not patch.hunks:
        return False
    return all(
        not text.strip() or text.lstrip().startswith(marker)
        for _, _, text in iter_changed_lines(patch)
    )


def _touches(path: str, patch: FilePatch | None) -> list[Touch]:
    if patch is None:
        # No patch (a push payload lists paths only): a kernel file's name is all there is.
        patch = FilePatch(path, "modified")
    return list(touched_names(patch))


def _resolve(touch: Touch, index: InventoryIndex | None) -> str | None:
    if touch.weak:
        if index is None or not touch.name:
            return None
        return index.compact_families.get(compact(touch.name))
    if index is None or index.knows_op(touch.name):
        return canonical(touch.name)
    if touch.path.endswith(_CPP_SUFFIXES) and touch.evidence in _CPP_SYMBOL_EVIDENCE:
        # A kernel function is named after its op and what it specialises:
        # `where_self_out`, `div_true_kernel`, `GeluKernelImpl`: the longest leading words
        # that name an op the inventory tests.
        words = _symbol_words(touch.name)
        for n in range(len(words) - 1, 0, -1):
            candidate = "_".join(words[:n])
            if index.knows_op(candidate):
                return canonical(candidate)
    return None


_CPP_SYMBOL_EVIDENCE = frozenset(
    {
        "hunk context",
        "changed definition",
        "enclosing function",
        "enclosing function (source)",
    }
)


def _symbol_words(symbol: str) -> list[str]:
    """`GeluKernelImpl` -> gelu, kernel, impl; `where_self_out` -> where, self, out."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", symbol).lower()
    return [w for w in spaced.split("_") if w]


def _decide(
    changes: ChangeSet, facts: list[PathFact], full_labels: set[str]
) -> tuple[str, list[str]]:
    if changes.kind in NIGHTLY_KINDS:
        return "blind", [f"{changes.kind} run: the whole inventory at {changes.head_sha[:12]}"]
    if changes.rerun == "full":
        return "blind", ["check suite re-run requested: full run"]
    if changes.rerun == "failed":
        return "rerun-failed", ["check run re-run requested: rerun what failed"]
    labels = sorted(full_labels.intersection(changes.labels))
    if labels:
        return "blind", [f"label {labels[0]} asks for a full run"]
    if changes.truncated:
        return "blind", ["the diff is truncated: some changes are unseen"]
    if not changes.complete:
        return "blind", [
            "the list of changed files is incomplete (no diff given and the payload does not "
            "list every file)"
        ]
    if not facts:
        return "none", ["no file changed"]
    blind = [f for f in facts if f.policy == "blind"]
    if blind:
        shown = ", ".join(
            f"{f.path} ({f.area}{': ' + f.broad if f.broad else ''})" for f in blind[:3]
        )
        more = f" and {len(blind) - 3} more" if len(blind) > 3 else ""
        return "blind", [f"change reaches every op: {shown}{more}"]
    unresolved = [f for f in facts if f.unresolved]
    if unresolved:
        shown = ", ".join(_unresolved_why(f) for f in unresolved[:3])
        if all(f.broad for f in unresolved):
            return "blind", [f"cannot narrow: {shown}"]
        return "blind", [f"cannot name the ops changed in kernel code: {shown}"]
    if all(f.policy == "none" for f in facts):
        kinds = sorted({"comments" if f.cosmetic else f.area for f in facts})
        return "none", [f"only {' and '.join(kinds)} changed: no test result can change"]
    targeted = [f for f in facts if f.policy == "targeted"]
    named = len({op for f in targeted for op in f.ops})
    reasons = [
        f"{len(targeted)} path(s) in {', '.join(sorted({f.area for f in targeted}))}; "
        f"{named} distinct op name(s) found"
    ]
    located = [f for f in targeted if f.located == "source"]
    if located:
        reasons.append(
            f"changed lines of {len(located)} file(s) placed in their definitions by the "
            f"old source (e.g. {located[0].path}: {', '.join(located[0].definitions[:3])})"
        )
    reasons += [f"{f.path}: {f.broad}" for f in targeted if f.broad]
    reasons += [
        f"{f.path}: no op named for {why} (the ops named elsewhere in the file stand for it)"
        for f in targeted
        if f.ops
        for why in f.unnamed[:3]
        if why != NO_MAP
    ]
    return "targeted", reasons


def _unresolved_why(fact: PathFact) -> str:
    why = fact.broad or "; ".join(fact.unnamed[:2])
    more = f"; and {len(fact.unnamed) - 2} more" if not fact.broad and len(fact.unnamed) > 2 else ""
    return f"{fact.path} ({why}{more})" if why else fact.path


def _completeness(changes: ChangeSet, facts: list[PathFact]) -> str:
    if changes.truncated:
        return "truncated"
    if not changes.complete:
        return "partial"
    if any(f.policy != "none" and not f.has_patch for f in facts):
        return "paths-only"
    return "full"


def _risk(
    decision: str, facts: list[PathFact], ops: tuple[TouchedOp, ...], completeness: str
) -> tuple[str, list[str]]:
    if decision == "none":
        return "none", []
    if decision == "blind":
        return "high", ["a full run is needed"]
    reasons: list[str] = []
    # Test files name no ops by nature; suites watch them through their globs.
    quiet = [
        f.path
        for f in facts
        if f.policy == "targeted"
        and not f.ops
        and not f.untested
        and f.area not in ("upstream_tests", "test_db")
    ]
    if quiet:
        reasons.append(
            f"{len(quiet)} code path(s) name no op; only watch globs and history "
            f"cover them (e.g. {quiet[0]})"
        )
    unnamed = [
        f.path
        for f in facts
        if f.policy == "targeted" and f.ops and f.unnamed and f.unnamed != (NO_MAP,)
    ]
    if unnamed:
        reasons.append(
            f"{len(unnamed)} C++ file(s) changed definitions the kernel map could not name "
            f"(e.g. {unnamed[0]})"
        )
    loose = [
        f.path
        for f in facts
        if f.policy == "targeted"
        and f.located in ("drift", "hunks")
        and classify(f.path).policy == "blind"
    ]
    if loose:
        reasons.append(
            f"{len(loose)} file(s) of a blind area narrowed through the trace without an old "
            f"source the patch applies to (e.g. {loose[0]})"
        )
    untested = sorted({op for f in facts for op in f.untested})
    if untested:
        reasons.append(f"op(s) no variant tests: {', '.join(untested[:5])}")
    if completeness != "full":
        reasons.append(f"completeness is {completeness}")
    if ops and all(o.weak for o in ops):
        reasons.append("ops were guessed from file names only")
    if len(ops) > 25:
        reasons.append(f"{len(ops)} ops touched")
    return ("medium" if reasons else "low"), reasons
