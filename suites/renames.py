"""Upstream renames between two versions: which tests, classes and OpInfos went by a new name.

Pure (records in, findings out; no torch, no I/O). Each version's tests are `RenameRecord`s, one
per variant (built by `suites.expand.rename_records` in the version's environment, or read
from the upgrade's details). A variant of the old version whose id the new one lacks is
matched to a new variant only on evidence:

* the same body: the test as written, its name and class left out (`suites.sources
  .body_digest`), plus for a test that runs an OpInfo that OpInfo's definition without its
  name fields; a renamed test, a renamed class, or an OpInfo renamed with nothing else
  changed;
* an alias: the new variant's OpInfo lists the old one's name among its `aliases` (or the
  other way round), for the same test.

Matching is per test subject (`Class::test`, all its dtypes), so a subject's variants move
together. A subject with two candidates (or two subjects with one) is ambiguous: reported,
never carried. What has no match stays removed; a new subject with none is new-exposed, with
a proposed expectation (from its outcome when it ran, else "unknown: run it"), never a
regression.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from contracts.codec import CodecError, Record, decode, wire
from suites.model import Outcome, Status
from suites.record import summarize

# OpInfo fields that only name it: left out of a renamed OpInfo's evidence digest.
NAME_FIELDS = frozenset(
    {"name", "variant_test_name", "aliases", "aten_name", "aten_backward_name", "decomp_aten_name"}
)


@dataclass(frozen=True)
class RenameRecord(Record):
    """One variant of one version, as rename matching sees it."""

    id: str  # suite::template::subject::dtype
    suite: str
    template: str
    subject: str
    dtype: str
    test: str  # what an entry names: `Class::test` (file suites), the template (OpInfo suites)
    body: str = ""  # digest of what it runs, names left out ("" when unknown: never matched)
    op: str = ""  # the OpInfo's name (formatted, with its variant) when it runs one
    aliases: tuple[str, ...] = ()  # the OpInfo's alias names
    listed: bool = True  # an entry or rule names it (False: only a default decides it)
    expectation: str = "pass"
    rule: str = ""  # `file:line` that decided it


def _pairs(rows: object) -> tuple[tuple[str, str], ...]:
    """A rename's variants as written: a list of {"old": id, "new": id}."""
    if not isinstance(rows, list) or not all(
        isinstance(v, Mapping) and {"old", "new"} <= v.keys() for v in rows
    ):
        raise CodecError((), 'expected a list of {"old": ..., "new": ...} objects')
    pairs: tuple[tuple[str, str], ...] = decode(
        tuple[tuple[str, str], ...], [(v["old"], v["new"]) for v in rows]
    )
    return pairs


_PAIRS = wire(encode=lambda pairs: [{"old": a, "new": b} for a, b in pairs], decode=_pairs)


@dataclass(frozen=True)
class Rename(Record):
    """One test subject under a new name, its variants' ids paired by dtype, and why."""

    kind: str  # "test" | "class" | "opinfo" (what differs)
    suite: str
    template: str
    old: str  # old subject
    new: str
    # the name an entry lists (`Class::test`), or the OpInfo for kind opinfo
    old_test: str = field(metadata=wire("old_name"))
    new_test: str = field(metadata=wire("new_name"))
    evidence: str
    # (old id, new id), written as {"old": ..., "new": ...}
    variants: tuple[tuple[str, str], ...] = field(metadata=_PAIRS)

    def line(self) -> str:
        return f"renamed: {self.old_test} -> {self.new_test} ({self.evidence})"


@dataclass(frozen=True)
class ClassRename:
    """Every moved test of a class went to one new class with the same method names."""

    suite: str
    template: str
    old: str
    new: str
    tests: int

    def line(self) -> str:
        return (
            f"renamed: class {self.old} -> {self.new} (same {self.tests} test method(s), "
            "each with the same body)"
        )


@dataclass(frozen=True)
class Ambiguous:
    """Subjects that a rename could join, but not one to one: nothing carried."""

    old: tuple[str, ...]  # old subjects
    new: tuple[str, ...]  # candidates
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"old": list(self.old), "new": list(self.new), "why": self.why}

    def line(self) -> str:
        return (
            f"ambiguous: {', '.join(self.old)} -> one of {', '.join(self.new)} "
            f"({self.why}): nothing carried"
        )


@dataclass(frozen=True)
class NewExposed:
    """A variant the new version exposes that no rename explains: a proposal, not a verdict."""

    id: str
    test: str
    listed: bool
    expectation: str
    proposed: str  # pass | xfail | skip | unknown
    why: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Renames:
    renamed: list[Rename] = field(default_factory=list)
    classes: list[ClassRename] = field(default_factory=list)
    ambiguous: list[Ambiguous] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # old ids without a match
    new_exposed: list[NewExposed] = field(default_factory=list)

    def pairs(self) -> dict[str, str]:
        """new id -> old id of every carried variant."""
        return {b: a for r in self.renamed for a, b in r.variants}

    def to_json(self) -> dict[str, Any]:
        return {
            "renamed": [r.to_json() for r in self.renamed],
            "renamed_classes": [
                {"suite": c.suite, "template": c.template, "old": c.old, "new": c.new}
                | {"tests": c.tests}
                for c in self.classes
            ],
            "ambiguous": [a.to_json() for a in self.ambiguous],
            "removed": list(self.removed),
            "new_exposed": [n.to_json() for n in self.new_exposed],
        }


_Unit = tuple[str, str, str]  # suite, template, subject


def _units(records: Iterable[RenameRecord]) -> dict[_Unit, dict[str, RenameRecord]]:
    out: dict[_Unit, dict[str, RenameRecord]] = defaultdict(dict)
    for r in records:
        out[(r.suite, r.template, r.subject)][r.dtype] = r
    return out


def _first(unit: Mapping[str, RenameRecord]) -> RenameRecord:
    return unit[min(unit)]


def _split(test: str) -> tuple[str, str]:
    cls, sep, name = test.rpartition("::")
    return (cls, name) if sep else ("", test)


def find_renames(
    old: Sequence[RenameRecord],
    new: Sequence[RenameRecord],
    outcomes: Mapping[str, Outcome] | None = None,
) -> Renames:
    """Renames from `old` to `new` (see the module's text); `outcomes`: the new version's,
    when it ran, for the new-exposed proposals."""
    old_ids = {r.id for r in old}
    new_ids = {r.id for r in new}
    gone = _units(r for r in old if r.id not in new_ids)
    fresh = _units(r for r in new if r.id not in old_ids)
    result = Renames()

    def body_key(unit: Mapping[str, RenameRecord]) -> tuple[str, str, frozenset[str]] | None:
        bodies = frozenset(r.body for r in unit.values())
        if "" in bodies:
            return None
        first = _first(unit)
        return (first.suite, first.template, bodies)

    by_body: dict[tuple[str, str, frozenset[str]], list[_Unit]] = defaultdict(list)
    for key, unit in fresh.items():
        bk = body_key(unit)
        if bk is not None:
            by_body[bk].append(key)
    gone_by_body: dict[tuple[str, str, frozenset[str]], list[_Unit]] = defaultdict(list)
    for key, unit in gone.items():
        bk = body_key(unit)
        if bk is not None:
            gone_by_body[bk].append(key)
    taken: set[_Unit] = set()
    matched: dict[_Unit, tuple[_Unit, str]] = {}  # old unit -> (new unit, evidence)
    for bk, olds in sorted(gone_by_body.items(), key=lambda kv: sorted(kv[1])):
        news = by_body.get(bk, [])
        if not news:
            continue
        if len(olds) == 1 and len(news) == 1:
            matched[olds[0]] = (news[0], _body_evidence(sorted(bk[2])[0], _first(gone[olds[0]])))
            taken.add(news[0])
        else:
            result.ambiguous.append(
                Ambiguous(
                    tuple(sorted(u[2] for u in olds)),
                    tuple(sorted(u[2] for u in news)),
                    f"{len(olds)} old and {len(news)} new subject(s) with the same body",
                )
            )
            taken.update(news)
            for u in olds:
                matched[u] = (u, "")  # marked: ambiguous, not carried
    # Aliases: the same test over an OpInfo that names the old one among its aliases.
    for key, unit in sorted(gone.items()):
        if key in matched:
            continue
        a = _first(unit)
        if not a.op:
            continue
        found = [
            k
            for k, u in sorted(fresh.items())
            if k not in taken
            and (b := _first(u)).suite == a.suite
            and b.template == a.template
            and b.test == a.test
            and b.op
            and (a.op in b.aliases or b.op in a.aliases)
        ]
        if len(found) == 1:
            b = _first(fresh[found[0]])
            how = (
                f"{b.op} lists {a.op} among its aliases"
                if a.op in b.aliases
                else f"{a.op} listed {b.op} among its aliases"
            )
            matched[key] = (found[0], how)
            taken.add(found[0])
        elif found:
            result.ambiguous.append(
                Ambiguous(
                    (key[2],),
                    tuple(k[2] for k in found),
                    f"{len(found)} OpInfos alias {a.op}",
                )
            )
            matched[key] = (key, "")
    for key, (target, evidence) in sorted(matched.items()):
        if not evidence:
            continue
        a_unit, b_unit = gone[key], fresh[target]
        a, b = _first(a_unit), _first(b_unit)
        pairs = tuple((a_unit[d].id, b_unit[d].id) for d in sorted(a_unit.keys() & b_unit.keys()))
        if not pairs:
            continue
        kind, old_name, new_name = _what_differs(a, b)
        result.renamed.append(
            Rename(
                kind,
                a.suite,
                a.template,
                key[2],
                target[2],
                old_name,
                new_name,
                f"{evidence}; {_differs_text(kind, a, b)}",
                pairs,
            )
        )
    result.classes = _class_renames(result.renamed, gone, fresh)
    carried_old = {a for r in result.renamed for a, _ in r.variants}
    carried_new = {b for r in result.renamed for _, b in r.variants}
    result.removed = sorted(
        r.id for u in gone.values() for r in u.values() if r.id not in carried_old
    )
    for unit in fresh.values():
        for r in unit.values():
            if r.id not in carried_new:
                result.new_exposed.append(_proposal(r, (outcomes or {}).get(r.id)))
    result.new_exposed.sort(key=lambda n: n.id)
    return result


def _body_evidence(body: str, record: RenameRecord) -> str:
    test, _, definition = body.partition("+")
    if definition and record.test == record.template:  # an OpInfo suite's variant
        return (
            f"same template {test} over the same OpInfo definition {definition[:12]} "
            "apart from names"
        )
    if definition:
        return (
            f"same body, digest {test[:12]}, over the same OpInfo definition "
            f"{definition[:12]} apart from names"
        )
    return f"same body, digest {test[:12]}"


def _what_differs(a: RenameRecord, b: RenameRecord) -> tuple[str, str, str]:
    if a.op and b.op and a.op != b.op and a.test == b.test:
        return "opinfo", a.op, b.op
    (ca, na), (cb, nb) = _split(a.test), _split(b.test)
    if ca != cb and na == nb:
        return "class", a.test, b.test
    return "test", a.test, b.test


def _differs_text(kind: str, a: RenameRecord, b: RenameRecord) -> str:
    if kind == "opinfo":
        return f"OpInfo {a.op} -> {b.op}"
    (ca, na), (cb, nb) = _split(a.test), _split(b.test)
    parts = []
    if ca != cb:
        parts.append(f"class {ca} -> {cb}")
    if na != nb:
        parts.append(f"test {na} -> {nb}")
    return ", ".join(parts) or f"{a.subject} -> {b.subject}"


def _class_renames(
    renamed: Sequence[Rename],
    gone: Mapping[_Unit, Mapping[str, RenameRecord]],
    fresh: Mapping[_Unit, Mapping[str, RenameRecord]],
) -> list[ClassRename]:
    """Class renames: each old class all of whose gone tests moved to one new class, same names."""
    moves: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # old class -> new classes
    for r in renamed:
        if r.kind == "class":
            moves[(r.suite, r.template, _split(r.old_test)[0])].add(_split(r.new_test)[0])
    out: list[ClassRename] = []
    for (suite, template, cls), targets in sorted(moves.items()):
        if len(targets) != 1:
            continue
        (target,) = targets
        olds = {
            _first(u).test
            for k, u in gone.items()
            if k[0] == suite and k[1] == template and _split(_first(u).test)[0] == cls
        }
        moved = {
            r.old_test
            for r in renamed
            if r.suite == suite and r.template == template and _split(r.old_test)[0] == cls
        }
        if olds == moved:
            out.append(ClassRename(suite, template, cls, target, len(moved)))
    return out


def proposals_after(
    items: Sequence[Mapping[str, Any]], outcomes: Mapping[str, Outcome]
) -> list[dict[str, Any]]:
    """New-exposed items (`NewExposed.to_json`) proposed again from the outcomes of a run."""
    out = []
    for item in items:
        record = RenameRecord(
            id=str(item["id"]),
            suite="",
            template="",
            subject="",
            dtype="",
            test=str(item.get("test", "")),
            body="",
            listed=bool(item.get("listed", True)),
            expectation=str(item.get("expectation", "")),
        )
        out.append(_proposal(record, outcomes.get(record.id)).to_json())
    return out


def _proposal(r: RenameRecord, outcome: Outcome | None) -> NewExposed:
    if outcome is None or outcome.status is Status.SKIPPED:
        return NewExposed(r.id, r.test, r.listed, r.expectation, "unknown", "not run: run it")
    if outcome.status in (Status.PASSED, Status.XPASSED):
        return NewExposed(r.id, r.test, r.listed, r.expectation, "pass", f"{outcome.status}")
    if outcome.status in (Status.TIMEOUT, Status.CRASHED):
        return NewExposed(r.id, r.test, r.listed, r.expectation, "skip", f"{outcome.status}")
    summary = summarize(outcome.message) if outcome.message else str(outcome.status)
    return NewExposed(r.id, r.test, r.listed, r.expectation, "xfail", summary)
