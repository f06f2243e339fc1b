"""Stage 1, Scout: what a change touches (areas, ops, templates) and whether it can be narrowed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from selector.areas import classify
from selector.changeset import ChangeSet
from selector.diff import FilePatch, iter_changed_lines
from selector.index import InventoryIndex
from selector.levels import LEVEL_MODULE, source_level
from selector.opnames import Touch, canonical, compact, touched_names

NIGHTLY_KINDS = ("nightly", "periodic")
# PyTorch's own label to turn target determination off for a pull request.
FULL_RUN_LABELS = ("ci-no-td", "ciflow/crcr/spyre-full")
_EVIDENCE_LIMIT = 6
_SCHEMA_EVIDENCE = ("native_functions.yaml func", "derivatives.yaml name")


@dataclass(frozen=True)
class PathFact:
    path: str
    status: str
    area: str
    policy: str  # none | blind | targeted (from selector.areas)
    ops: tuple[str, ...] = ()
    has_patch: bool = False
    unresolved: bool = False  # kernel code whose ops could not be named
    untested: tuple[str, ...] = ()  # schema entries named that no variant tests (a new op)
    cosmetic: bool = False  # only comments and blank lines changed

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "area": self.area,
            "policy": self.policy,
            "ops": list(self.ops),
            "has_patch": self.has_patch,
            "unresolved": self.unresolved,
            "untested": list(self.untested),
            "cosmetic": self.cosmetic,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PathFact:
        return cls(
            data["path"],
            data["status"],
            data["area"],
            data["policy"],
            tuple(data.get("ops", ())),
            bool(data.get("has_patch")),
            bool(data.get("unresolved")),
            tuple(data.get("untested", ())),
            bool(data.get("cosmetic")),
        )


@dataclass(frozen=True)
class TouchedOp:
    name: str  # canonical op name (namespace kept, overload dropped)
    evidence: tuple[str, ...]  # "path: how"
    weak: bool = False  # only a file-name guess points at it
    # How high in the stack the change sits (`selector.levels`: 0 ops, 1 nn modules). Family
    # matches reach variants at this level or above: callers depend on callees, not the reverse.
    level: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "evidence": list(self.evidence),
            "weak": self.weak,
            "level": self.level,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TouchedOp:
        return cls(
            data["name"],
            tuple(data.get("evidence", ())),
            bool(data.get("weak")),
            int(data.get("level", 0)),
        )


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
        )


def scout(
    changes: ChangeSet,
    index: InventoryIndex | None = None,
    full_run_labels: Iterable[str] = FULL_RUN_LABELS,
) -> ChangeFacts:
    """Classify every path, name the touched ops (kept when `index` knows them) and decide."""
    path_facts: list[PathFact] = []
    ops: dict[str, list[str]] = {}
    weak_only: dict[str, bool] = {}
    level: dict[str, int] = {}
    templates: set[str] = set()
    functions: dict[str, None] = {}
    for changed in changes.paths:
        rule = classify(changed.path)
        patch = changes.patches.get(changed.path)
        if patch is not None and _cosmetic(patch):
            path_facts.append(
                PathFact(
                    changed.path, changed.status, rule.area, "none", has_patch=True, cosmetic=True
                )
            )
            continue
        touches = _touches(changed.path, patch) if rule.policy == "targeted" else []
        named: list[str] = []
        untested: list[str] = []
        for touch in touches:
            if rule.area == "upstream_tests" and touch.name.startswith("test_"):
                template = touch.name[len("test_") :]
                # A new upstream test is not a template any suite reuses.
                if index is None or template in index.by_template:
                    templates.add(template)
                continue
            if touch.path.endswith(".py") and touch.evidence.endswith(("def", "class")):
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
        unresolved = (
            rule.policy == "targeted" and rule.unresolved_is_blind and not named and not untested
        )
        path_facts.append(
            PathFact(
                changed.path,
                changed.status,
                rule.area,
                rule.policy,
                tuple(dict.fromkeys(named)),
                patch is not None,
                unresolved,
                tuple(dict.fromkeys(untested)),
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
    )


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
    return None


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
        shown = ", ".join(f"{f.path} ({f.area})" for f in blind[:3])
        more = f" and {len(blind) - 3} more" if len(blind) > 3 else ""
        return "blind", [f"change reaches every op: {shown}{more}"]
    unresolved = [f for f in facts if f.unresolved]
    if unresolved:
        shown = ", ".join(f.path for f in unresolved[:3])
        return "blind", [f"cannot name the ops changed in kernel code: {shown}"]
    if all(f.policy == "none" for f in facts):
        kinds = sorted({"comments" if f.cosmetic else f.area for f in facts})
        return "none", [f"only {' and '.join(kinds)} changed: no test result can change"]
    targeted = [f for f in facts if f.policy == "targeted"]
    named = len({op for f in targeted for op in f.ops})
    return "targeted", [
        f"{len(targeted)} path(s) in {', '.join(sorted({f.area for f in targeted}))}; "
        f"{named} distinct op name(s) found"
    ]


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
