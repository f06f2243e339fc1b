"""`suites audit`: what in the specs and expectations no longer matches upstream or spyre.

Long on purpose: every check reads the same rules, facts and entries, and each finding kind is
a short pure function next to the others, so that one reader sees all the ways a spec can
stop matching upstream or spyre; the patches that follow the findings are apart, in
`suites.spec_patch`.

Pure functions over plain data, no torch and no I/O but reading spec text: the caller
(`workflows.cli.audit`) expands the suites, reads History or a run's results and hands in the
facts of the installed torch. Five kinds of finding:

* `xpass`: an xfail variant whose latest observed outcome passed ("an xfail that can go").
* `other_failure`: an xfail variant that failed with a message unlike its reason
  (a heuristic over the message text: candidates only), or that hung, crashed or errored.
* `stale_skip`: a skip rule that matches no variant, or whose reason names a torch version
  condition the installed torch no longer meets.
* `uncovered`: OpInfos / ModuleInfos no suite expands to, templates no suite runs, upstream
  tests only `unlisted_test_mode` decides, new variants only the default decides.
* `orphan`: an xfail rule that matches no variant (names an op, dtype or test that is gone).
* `renamed` / `new_exposed` (with an old upstream tree to compare with, `rename_findings`):
  a test, class or OpInfo upstream renamed, whose entry follows it (the patch renames it),
  with the evidence, or an ambiguous match (nothing carried); a new upstream test no rename
  explains, with a proposed expectation.

The patches that follow the findings (`suites audit --patch`, the upgrade's `upgrade.patch`)
are written by `suites.spec_patch`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suites.loader import SpecFile, as_names, load_spec
from suites.model import Expectation, Status, Variant, split_variant_id
from suites.record import summarize
from suites.rules import MODES, canonical_dtype
from suites.spec_patch import NameEdit
from suites.torch_condition import torch_holds

KINDS = ("xpass", "other_failure", "stale_skip", "uncovered", "orphan", "renamed", "new_exposed")
TITLES = {
    "xpass": "xfails that pass (they can go)",
    "other_failure": "xfails failing for another reason (candidates: messages compared loosely)",
    "stale_skip": "skips whose reason no longer holds",
    "uncovered": "upstream tests no spec covers",
    "orphan": "expectations naming ops, dtypes or tests that no longer exist",
    "renamed": "tests, classes and OpInfos renamed upstream (their entries follow them)",
    "new_exposed": "upstream tests new since the old tree, with a proposed expectation",
}


@dataclass(frozen=True)
class AuditRule:
    """A rule of a spec or expectations file the audit can judge."""

    source: str  # `file:line`, as Variant.rule and Rule.source carry it
    file: Path
    line: int
    kind: str  # "expectations" | "tests" (an opinfo entry's rule) | "file_tests"
    suite: str
    mode: Expectation
    reason: str
    id_glob: str | None = None
    names: tuple[str, ...] = ()  # file suites: the test names of the entry
    index: int = -1  # position in the expectations list (expectations files)
    torch: str = ""  # the entry's torch condition (expectations files), "" for every torch


@dataclass(frozen=True)
class Observed:
    """What runs saw of one variant: statuses oldest first, the latest message when known."""

    statuses: tuple[Status, ...]
    message: str = ""
    flaky: bool = False

    @property
    def latest(self) -> Status:
        return self.statuses[-1]


@dataclass(frozen=True)
class Finding:
    kind: str
    subject: str  # a variant id, an expectation id, an op name, a template
    detail: str
    where: str = ""  # `file:line` of the rule, when there is one
    patched: bool = False  # the proposed patch removes it
    acts: bool = True  # counts for the exit code (False: information only)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "detail": self.detail,
            "where": self.where,
            "patched": self.patched,
            "acts": self.acts,
        }


@dataclass(frozen=True)
class Facts:
    """What the installed torch has, gathered by the caller (torch side)."""

    torch_version: str
    db_names: Mapping[str, frozenset[str]]  # db -> entry names, with and without variants
    dtypes: frozenset[str]  # torch dtype names (float32, bfloat16, ...)


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str = ""  # where outcomes came from
    renames: Any = None  # suites.renames.Renames, with an old upstream tree to compare with
    rename_edits: list[NameEdit] = field(default_factory=list)  # what the patch renames

    @property
    def acts(self) -> bool:
        return any(f.acts for f in self.findings)

    def counts(self) -> dict[str, int]:
        return {k: sum(1 for f in self.findings if f.kind == k) for k in KINDS}

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts(),
            "actionable": sum(1 for f in self.findings if f.acts),
            "outcomes_from": self.source,
            "notes": list(self.notes),
            "findings": [f.to_json() for f in self.findings],
            **({"renames": self.renames.to_json()} if self.renames is not None else {}),
        }

    def render(self, limit: int = 50) -> str:
        """Counts first, then each group's items (at most `limit` a group; --json has all)."""
        counts = self.counts()
        lines = [
            "audit: "
            + ", ".join(f"{counts[k]} {k}" for k in KINDS)
            + f" ({sum(1 for f in self.findings if f.acts)} to act on)",
            f"outcomes from: {self.source or 'none'}",
        ]
        for kind in KINDS:
            items = sorted((f for f in self.findings if f.kind == kind), key=lambda f: not f.acts)
            if not items:
                continue
            lines.append("")
            lines.append(f"{TITLES[kind]}: {len(items)}")
            for f in items[:limit]:
                verb = "renames" if f.kind == "renamed" else "removes"
                mark = f" [patch {verb}]" if f.patched else ("" if f.acts else " [info]")
                where = f"{f.where}: " if f.where else ""
                lines.append(f"  {where}{f.subject}{mark}")
                lines.append(f"      {f.detail}")
            if len(items) > limit:
                lines.append(f"  ... and {len(items) - limit} more (--json lists every one)")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


# --- reading the rules ------------------------------------------------------------------


def audit_rules(specs: Sequence[SpecFile]) -> list[AuditRule]:
    """The rules of loaded specs and of the expectations files they reference (each once)."""
    out: list[AuditRule] = []
    seen_files: set[Path] = set()
    for spec in specs:
        root = spec.get(("test_suite_config",)) or {}
        suite = spec.suite_name
        for oi, entry in enumerate(root.get("opinfo") or ()):
            where = ("test_suite_config", "opinfo", oi)
            for ti, test in enumerate(entry.get("tests") or ()):
                mode = test.get("mode")
                if not mode:
                    continue
                out.append(
                    AuditRule(
                        source=spec.line_ref((*where, "tests", ti)),
                        file=spec.path,
                        line=spec.mark((*where, "tests", ti))[0],
                        kind="tests",
                        suite=suite,
                        mode=MODES[mode],
                        reason=test.get("reason", "") or "",
                    )
                )
            name = entry.get("expectations_file")
            if name and (spec.path.parent / name) not in seen_files:
                seen_files.add(spec.path.parent / name)
                out.extend(_expectation_rules(load_spec(spec.path.parent / name), suite))
        for fi, entry in enumerate(root.get("files") or ()):
            where = ("test_suite_config", "files", fi)
            for ti, test in enumerate(entry.get("tests") or ()):
                mode = test.get("mode", "mandatory_success")
                out.append(
                    AuditRule(
                        source=spec.line_ref((*where, "tests", ti)),
                        file=spec.path,
                        line=spec.mark((*where, "tests", ti))[0],
                        kind="file_tests",
                        suite=suite,
                        mode=MODES[mode],
                        reason=test.get("reason", "") or "",
                        names=tuple(as_names(test.get("names"))),
                    )
                )
    return out


def _expectation_rules(spec: SpecFile, suite: str) -> list[AuditRule]:
    return [
        AuditRule(
            source=spec.line_ref(("expectations", i)),
            file=spec.path,
            line=spec.mark(("expectations", i))[0],
            kind="expectations",
            suite=suite,
            mode=MODES[item["mode"]],
            reason=str(item.get("reason", "")),
            id_glob=str(item["id"]),
            index=i,
            torch=str(item.get("torch") or ""),
        )
        for i, item in enumerate(spec.get(("expectations",)) or ())
    ]


def suite_entries(specs: Sequence[SpecFile]) -> dict[str, list[dict[str, Any]]]:
    """suite -> its opinfo entries (db, templates, canonical dtypes), for explanations."""
    out: dict[str, list[dict[str, Any]]] = {}
    for spec in specs:
        root = spec.get(("test_suite_config",)) or {}
        for entry in root.get("opinfo") or ():
            out.setdefault(spec.suite_name, []).append(
                {
                    "db": entry["db"],
                    "templates": list(entry["templates"]),
                    "dtypes": [canonical_dtype(d) for d in entry.get("dtypes") or ["float32"]],
                }
            )
    return out


def referenced_templates(specs: Sequence[SpecFile]) -> set[str]:
    return {
        t
        for spec in specs
        for entry in (spec.get(("test_suite_config", "opinfo")) or ())
        for t in entry.get("templates") or ()
    }


# --- the checks ---------------------------------------------------------------------------

# How an expectation says its outcome depends on the CPU (tests/suites/test_bundled_expectations.py
# holds the bundled ones against every recorded full run).
CPU_DEPENDENT = "depends on the CPU"
_XFAILS = (Expectation.XFAIL, Expectation.XFAIL_STRICT)
_PASSES = (Status.PASSED, Status.XPASSED)
STRICT_XPASS_MARK = "[XPASS(strict)]"


def passed(seen: Observed) -> bool:
    """The latest outcome is a pass (a strict xfail that passes is reported as failed)."""
    return seen.latest in _PASSES or (
        seen.latest is Status.FAILED and seen.message.startswith(STRICT_XPASS_MARK)
    )


def xpasses(
    variants: Sequence[Variant],
    observed: Mapping[str, Observed],
    rules_by_source: Mapping[str, AuditRule],
) -> list[Finding]:
    """xfail variants whose latest outcome passed (flaky variants left out)."""
    out: list[Finding] = []
    for v in variants:
        seen = observed.get(v.id)
        if v.expectation not in _XFAILS or seen is None or not passed(seen) or seen.flaky:
            continue
        if v.reason.startswith(CPU_DEPENDENT):
            continue  # it passes on some CPUs by design: one CPU's pass removes nothing
        ran = [s for s in seen.statuses if s is not Status.SKIPPED]
        ok = sum(1 for s in ran if s in _PASSES)
        rule = rules_by_source.get(v.rule)
        removable = rule is not None and rule.kind == "expectations" and rule.id_glob == v.id
        if removable:
            how = "its expectations entry can go"
        elif rule is not None and rule.kind == "expectations":
            how = f"decided by the glob {rule.id_glob!r}: narrow it by hand"
        elif rule is not None:
            how = "decided by a spec rule that may cover other variants: edit it by hand"
        else:
            how = "decided upstream (an OpInfo expectedFailure) or by a default: nothing to remove"
        out.append(
            Finding(
                "xpass",
                v.id,
                f"{v.expectation} ({v.reason or 'no reason'}); passed in {ok} of the last "
                f"{len(ran)} run(s), the latest included; {how}",
                where=v.rule,
                patched=removable,
            )
        )
    return out


_HEAD = re.compile(
    r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)|timeout|crashed)\b"
)
_NUMBERS = re.compile(r"0x[0-9a-f]+|0x…|[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
SIMILAR = 0.6


def _normal(text: str) -> str:
    text = _NUMBERS.sub("#", text.lower()).replace("…", "")
    return " ".join(text.split())


def same_failure(reason: str, message: str) -> bool | None:
    """Whether a failure message looks like the one a reason was recorded from; None when the
    reason is not a failure summary (written by hand, or an upstream decorator's)."""
    want = _HEAD.match(reason.strip())
    if want is None:
        return None
    got_text = summarize(message)
    got = _HEAD.match(got_text)
    if got is None or got.group(1) != want.group(1):
        return False
    a, b = _normal(reason), _normal(got_text)
    n = min(len(a), len(b))
    return difflib.SequenceMatcher(None, a[:n], b[:n]).ratio() >= SIMILAR


def other_failures(
    variants: Sequence[Variant], observed: Mapping[str, Observed]
) -> tuple[list[Finding], int]:
    """xfail variants failing unlike their reason; also the count not comparable."""
    out: list[Finding] = []
    uncomparable = 0
    for v in variants:
        seen = observed.get(v.id)
        if v.expectation not in _XFAILS or seen is None or passed(seen):
            continue
        if seen.latest in (Status.TIMEOUT, Status.CRASHED, Status.ERROR, Status.FAILED):
            out.append(
                Finding(
                    "other_failure",
                    v.id,
                    f"expected {v.expectation} ({v.reason or 'no reason'}), got {seen.latest}: "
                    f"{summarize(seen.message) if seen.message else 'no message'}",
                    where=v.rule,
                )
            )
            continue
        if seen.latest is not Status.XFAILED or not seen.message:
            continue
        same = same_failure(v.reason, seen.message)
        if same is None:
            uncomparable += 1
        elif not same:
            out.append(
                Finding(
                    "other_failure",
                    v.id,
                    f"{v.expectation} for {v.reason!r}, failed with {summarize(seen.message)!r}",
                    where=v.rule,
                )
            )
    return out, uncomparable


_VERSION = r"(\d+(?:\.\d+){0,2})"
# "not supported on torch < 2.14", "torch<=2.12", "before torch 2.14", "until torch 2.14",
# "fixed in torch 2.14", "requires torch >= 2.14", "needs torch 2.14+".
_OLD_TORCH = [
    (re.compile(r"torch\s*<=\s*" + _VERSION, re.I), "le"),
    (re.compile(r"torch\s*<\s*" + _VERSION, re.I), "lt"),
    (
        re.compile(
            r"(?:before|until|older than|prior to|fixed in|requires|needs|since|from)\s+"
            r"(?:torch|pytorch)\s*(?:>=\s*)?v?" + _VERSION,
            re.I,
        ),
        "lt",
    ),
    (re.compile(r"(?:torch|pytorch)\s*>=\s*" + _VERSION, re.I), "lt"),
    (re.compile(r"(?:torch|pytorch)\s*" + _VERSION + r"\+", re.I), "lt"),
]


def _version(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def version_condition(reason: str, torch_version: str) -> str | None:
    """The torch-version condition a reason names that the installed torch no longer meets."""
    have = _version(torch_version)
    for pattern, how in _OLD_TORCH:
        match = pattern.search(reason)
        if match is None:
            continue
        bound = _version(match.group(1))
        holds = have <= bound if how == "le" else have < bound
        if not holds:
            return f"{match.group(0)!r} no longer holds: torch is {torch_version}"
        return None
    return None


def explain_missing(vid: str, entries: Mapping[str, list[dict[str, Any]]], facts: Facts) -> str:
    """Why an id (or glob) names no variant, as far as it can be told."""
    if any(c in vid for c in "*?["):
        return "the glob matches no variant"
    try:
        suite, template, subject, dtype = split_variant_id(vid)
    except ValueError:
        return "not a variant id"
    mine = entries.get(suite)
    if not mine:
        return f"no loaded OpInfo suite named {suite!r}"
    runs = [e for e in mine if template in e["templates"]]
    if not runs:
        return f"suite {suite!r} does not run the template {template!r}"
    dbs = sorted({e["db"] for e in runs})
    if not any(subject in facts.db_names.get(db, frozenset()) for db in dbs):
        return f"{subject!r} is not in {'/'.join(dbs)} of torch {facts.torch_version}"
    if dtype != "none" and dtype not in facts.dtypes:
        return f"torch {facts.torch_version} has no dtype {dtype!r}"
    if dtype != "none" and not any(dtype in e["dtypes"] for e in runs):
        return f"suite {suite!r} does not run dtype {dtype}"
    return (
        f"the template does not apply to {subject} at {dtype} in torch {facts.torch_version} "
        "(its OpInfo dtypes or samples changed)"
    )


def stale_rules(
    rules: Sequence[AuditRule],
    used_sources: set[str],
    unavailable_suites: Iterable[str],
    entries: Mapping[str, list[dict[str, Any]]],
    facts: Facts,
) -> list[Finding]:
    """Skips and xfails that match nothing, and skips whose version condition is met."""
    out: list[Finding] = []
    unavailable = set(unavailable_suites)
    for rule in rules:
        if rule.suite in unavailable or rule.kind == "file_tests":
            continue  # file suites are judged by their test names (`unmatched_names`)
        if not torch_holds(rule.torch, rule.source, facts.torch_version):
            continue  # a rule for another torch: it matches nothing here, as it should
        skip = rule.mode is Expectation.SKIP
        what = rule.id_glob or f"{rule.kind} rule ({rule.mode})"
        if rule.source not in used_sources and rule.mode is not Expectation.PASS:
            why = explain_missing(rule.id_glob, entries, facts) if rule.id_glob else ""
            patched = rule.kind == "expectations"
            how = "" if patched else "; remove it by hand"
            out.append(
                Finding(
                    "stale_skip" if skip else "orphan",
                    what,
                    f"{rule.mode} rule matches no variant" + (f": {why}" if why else "") + how,
                    where=rule.source,
                    patched=patched,
                )
            )
            continue
        if skip:
            gone = version_condition(rule.reason, facts.torch_version)
            if gone:
                out.append(
                    Finding(
                        "stale_skip",
                        what,
                        f"skip ({rule.reason}): {gone}; run it and re-record",
                        where=rule.source,
                    )
                )
    return out


def unmatched_names(
    rules: Sequence[AuditRule], base_names: Mapping[str, set[str]], matches: Any
) -> list[Finding]:
    """File-suite test names matching no upstream test of the file (`base_names`: rule source
    -> the generic test names of its file; `matches(name, base)` applies torch-spyre's rule)."""
    out: list[Finding] = []
    for rule in rules:
        if rule.kind != "file_tests" or rule.source not in base_names:
            continue
        bases = base_names[rule.source]
        for name in rule.names:
            if not any(matches(name, base) for base in bases):
                skip = rule.mode is Expectation.SKIP
                out.append(
                    Finding(
                        "stale_skip" if skip else "orphan",
                        name,
                        f"{rule.mode} entry names no test of its upstream file; remove it by hand",
                        where=rule.source,
                    )
                )
    return out


def uncovered_subjects(
    db_subjects: Mapping[str, Sequence[str]],
    covered: set[tuple[str, str]],
    selected: set[tuple[str, str]],
    used_dbs: set[str],
) -> list[Finding]:
    """Database entries no suite expands to. Entries a suite selects that produce no variant
    (no template applies at its dtypes, e.g. integer-only ops) are information only."""
    out: list[Finding] = []
    for db, names in db_subjects.items():
        for name in names:
            if (db, name) in covered:
                continue
            if (db, name) in selected:
                out.append(
                    Finding(
                        "uncovered",
                        f"{db} {name}",
                        "selected, but no template applies at the suites' dtypes",
                        acts=False,
                    )
                )
            else:
                why = "no suite selects it" if db in used_dbs else f"no suite uses {db}"
                out.append(Finding("uncovered", f"{db} {name}", why, acts=db in used_dbs))
    return out


def unreferenced_templates(all_templates: Iterable[str], referenced: set[str]) -> list[Finding]:
    return [
        Finding("uncovered", f"template {t}", "no suite runs this template", acts=False)
        for t in sorted(set(all_templates) - referenced)
    ]


def unlisted_variants(
    variants: Sequence[Variant], known: frozenset[str], default_sources: set[str]
) -> list[Finding]:
    """File-suite tests only `unlisted_test_mode` decides; with History's last inventory
    (`known`), also the OpInfo variants new since then that only the entry's default decides
    (`default_sources`: the `file:line` of each opinfo entry)."""
    out: list[Finding] = []
    for v in variants:
        unlisted = v.reason.startswith("not listed; unlisted_test_mode")
        new = bool(known) and v.id not in known and v.rule in default_sources
        if unlisted or new:
            out.append(
                Finding(
                    "uncovered",
                    v.id,
                    ("new since History's last inventory; " if new else "")
                    + f"decided only by the default ({v.expectation}): list it or record it",
                    where=v.rule,
                )
            )
    return out


# --- renames: entries that follow upstream to a new name ------------------------------------


def rename_findings(
    renames: Any, edits: Sequence[NameEdit], findings: Sequence[Finding]
) -> list[Finding]:
    """`findings` with the renames (`suites.renames.Renames`) in: a renamed test's orphan
    name and its new name's `uncovered` finding give way to one `renamed` finding; ambiguous
    matches and new-exposed tests are listed. `edits`: what the patch renames."""
    edited = {e.old for e in edits}
    carried_new = set(renames.pairs())
    exposed = {n.id for n in renames.new_exposed}
    old_names = {r.old_test for r in renames.renamed}
    old_methods = {n.split("::")[-1] for n in old_names}
    out = [
        f
        for f in findings
        if not (
            f.kind in ("orphan", "stale_skip")
            and (f.subject in old_names or f.subject in old_methods)
        )
        and not (f.kind == "uncovered" and f.subject in carried_new | exposed)
    ]
    for r in renames.renamed:
        listed = r.old_test in edited or r.old_test.split("::")[-1] in edited
        how = (
            "its entries follow it (the patch renames them)"
            if listed
            else "no entry names it by this name: nothing to rename"
        )
        out.append(
            Finding(
                "renamed",
                f"{r.old_test} -> {r.new_test}",
                f"{r.kind} renamed upstream ({r.evidence}); {len(r.variants)} variant(s); {how}",
                patched=listed,
                acts=listed,
            )
        )
    for c in renames.classes:
        out.append(
            Finding(
                "renamed",
                f"class {c.old} -> {c.new}",
                f"{c.template}: same {c.tests} test method(s), each with the same body",
                acts=False,
            )
        )
    for a in renames.ambiguous:
        out.append(
            Finding(
                "renamed",
                f"{', '.join(a.old)} -> ?",
                f"ambiguous: one of {', '.join(a.new)} ({a.why}); nothing carried: "
                "rename the entry by hand if one of them is the test",
            )
        )
    for n in renames.new_exposed:
        proposal = (
            f"proposed: {n.proposed} ({n.why})"
            if n.proposed != "unknown"
            else "proposed: unknown, run it (--results with a run of it)"
        )
        decided = "listed" if n.listed else "not listed"
        out.append(
            Finding(
                "new_exposed",
                n.id,
                f"new upstream test {n.test}, {decided} ({n.expectation}); {proposal}; "
                "never a regression",
                acts=not n.listed,
            )
        )
    return out
