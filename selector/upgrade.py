"""The version-upgrade diff: what moved between the Inventories of two torch versions.

Long on purpose: the steps of one upgrade diff (diff, select, classify, validate, replay) are
pure functions over the same two Inventories and share its records (`VariantChange`,
`InventoryDiff`, `UpgradeSelection`, `Moved`); split apart, each file would import the others'
records and a reader would follow one data flow across several files.

Pure functions over plain data (no I/O, never torch):

    diff = diff_inventories(old, new, details_old, details_new)   # -> InventoryDiff
    sel = select_upgrade(diff, old, new, holdout_rate=0.02, seed="2.13.0->2.14.1")
    sel.run_on_old(old), sel.run_on_new()                          # what each version runs
    rows = classify(ids_old, ids_new, outcomes_old, outcomes_new, diff.removed, diff.added)
    scored = replay(diff, sel, old, new, full_old, full_new)       # against a full run

Fingerprints come from the suites (`Variant.fingerprint`). When both Inventories have
`details` (per-subject field digests, per-variant decorators, template digests, built next to
each Inventory by `workflows.drivers.upgrade`), every changed variant is named with what
changed, and only what BOTH versions carry is compared: a field that exists in one version only
(2.14 adds `backward_dtypesIfXPU` to every OpInfo) cannot mark a variant changed. Without
details, the fingerprints decide alone and the change is named as far as the Inventory shows it.

Selection reuses the selector's stage-2 heuristics (`definition`, `new`, `op_match`) through a
`RetrieveContext`: the API-surface diff becomes touched ops, so the op-name rules (aliases,
in-place, out, refs, families) decide which variants an added, removed or re-signed aten
overload reaches.

A kernel or an implementation can change without any definition changing (2.14.1's
`quantile` allocates float64 that spyre refuses; nothing in its OpInfo moved). So every op
also runs one canary: its most telling variant that the definitions did not select
(`canary_of`), and a seeded holdout sample of the rest runs too. A canary or holdout variant
that moves is a selector miss, and `expansion` runs its neighbours.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from selector.errors import SelectorError
from selector.heuristics import REGISTRY, RetrieveContext
from selector.history import History
from selector.index import InventoryIndex
from selector.opnames import canonical
from selector.plan import SKIP_DECLARED, Reason
from selector.scout import ChangeFacts, TouchedOp
from suites.model import Expectation, Inventory, Outcome, Status, Variant
from suites.renames import RenameRecord, Renames, find_renames

DETAILS_FORMAT = 1
UPGRADE_HEURISTICS = ("definition", "new", "op_match")
SKIP_UNAFFECTED = "not affected by the upgrade"

# aten spells namespaced ops with an underscore (`linalg_polar`); op_db with a dot.
_ATEN_NAMESPACES = ("linalg_", "special_", "fft_")

CHANGED = "changed"
ADDED = "added"
REMOVED = "removed"
SIGNATURE = "signature"


@dataclass(frozen=True)
class VariantChange:
    """One variant whose definition differs between the versions, and what differs."""

    id: str
    what: tuple[str, ...]
    before: str  # fingerprint on the old version
    after: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "what": list(self.what), "before": self.before, "after": self.after}


@dataclass(frozen=True)
class ApiChange:
    """An aten overload added, removed, or with a new signature."""

    name: str  # `aten::qr.Q`
    kind: str  # added | removed | signature
    before: str | None
    after: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "before": self.before, "after": self.after}


@dataclass(frozen=True)
class InventoryDiff:
    from_version: str
    to_version: str
    variants_from: int
    variants_to: int
    changed: tuple[VariantChange, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    api: tuple[ApiChange, ...]
    # Variants whose suites fingerprint differs but whose common definition does not
    # (id -> why they do not count); empty without details.
    ignored: Mapping[str, str] = field(default_factory=dict)
    details_used: bool = False
    notes: tuple[str, ...] = ()
    # What upstream renamed (tests, classes, OpInfos), when both details carry `renames`:
    # a renamed variant is neither added nor removed; `carried` pairs new id -> old id.
    renames: Renames | None = None

    @property
    def carried(self) -> dict[str, str]:
        return self.renames.pairs() if self.renames is not None else {}

    @property
    def affected(self) -> int:
        return len(self.changed) + len(self.added) + len(self.removed)

    def api_by_kind(self) -> dict[str, list[ApiChange]]:
        out: dict[str, list[ApiChange]] = {ADDED: [], REMOVED: [], SIGNATURE: []}
        for change in self.api:
            out[change.kind].append(change)
        return out

    def what_counts(self) -> dict[str, int]:
        """How many changed variants name each kind of change (`field sample_inputs_func`)."""
        counts: dict[str, int] = defaultdict(int)
        for change in self.changed:
            for what in change.what:
                counts[what.split(":", 1)[0]] += 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def to_json(self) -> dict[str, Any]:
        api = self.api_by_kind()
        return {
            "from_version": self.from_version,
            "to_version": self.to_version,
            "variants_from": self.variants_from,
            "variants_to": self.variants_to,
            "affected": self.affected,
            "details_used": self.details_used,
            "notes": list(self.notes),
            "changed": [c.to_json() for c in self.changed],
            "changed_by_what": self.what_counts(),
            "added": list(self.added),
            "removed": list(self.removed),
            "fingerprint_only_changes_ignored": dict(self.ignored),
            **(
                {
                    "renamed": [r.to_json() | {"line": r.line()} for r in self.renames.renamed],
                    "renamed_classes": self.renames.to_json()["renamed_classes"],
                    "ambiguous": [a.to_json() | {"line": a.line()} for a in self.renames.ambiguous],
                    "new_exposed": [n.to_json() for n in self.renames.new_exposed],
                }
                if self.renames is not None
                else {}
            ),
            "api": {
                "added": [c.to_json() for c in api[ADDED]],
                "removed": [c.to_json() for c in api[REMOVED]],
                "signature_changed": [c.to_json() for c in api[SIGNATURE]],
            },
        }


def _check_details(details: Mapping[str, Any] | None, which: str) -> Mapping[str, Any] | None:
    if details is None:
        return None
    if details.get("format") != DETAILS_FORMAT:
        raise SelectorError(
            f"{which} details: format {details.get('format')!r} is not "
            f"{DETAILS_FORMAT}; build them again with the same spyre-ci"
        )
    for key in ("subjects", "templates", "variants"):
        if not isinstance(details.get(key), Mapping):
            raise SelectorError(f"{which} details: field {key!r} is missing or not an object")
    return details


def diff_api(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[ApiChange, ...]:
    """aten overloads added, removed, or whose schema text changed (sorted by name)."""
    out = [ApiChange(n, ADDED, None, new[n]) for n in new.keys() - old.keys()]
    out += [ApiChange(n, REMOVED, old[n], None) for n in old.keys() - new.keys()]
    out += [
        ApiChange(n, SIGNATURE, old[n], new[n]) for n in old.keys() & new.keys() if old[n] != new[n]
    ]
    return tuple(sorted(out, key=lambda c: c.name))


def diff_inventories(
    old: Inventory,
    new: Inventory,
    details_old: Mapping[str, Any] | None = None,
    details_new: Mapping[str, Any] | None = None,
) -> InventoryDiff:
    """Changed (named), added and removed variants, and the aten API-surface diff."""
    d_old = _check_details(details_old, f"torch {old.torch_version}")
    d_new = _check_details(details_new, f"torch {new.torch_version}")
    use_details = d_old is not None and d_new is not None
    before, after = old.by_id(), new.by_id()
    renames = _renames(d_old, d_new) if use_details else None
    carried = renames.pairs() if renames is not None else {}
    carried_old = set(carried.values())
    added = tuple(sorted(after.keys() - before.keys() - carried.keys()))
    removed = tuple(sorted(before.keys() - after.keys() - carried_old))
    changed: list[VariantChange] = []
    ignored: dict[str, str] = {}
    notes: list[str] = []
    one_sided: dict[str, set[str]] = defaultdict(set)  # field -> versions' subjects
    for vid in sorted(before.keys() & after.keys()):
        a, b = before[vid], after[vid]
        plain = _plain_changes(a, b)
        if use_details:
            assert d_old is not None and d_new is not None
            what, only_one_side = _detail_changes(vid, a, b, d_old, d_new)
            for name in only_one_side:
                one_sided[name].add(a.subject)
            if what is None:  # no details for this variant (file suites): fingerprints decide
                what = (_fingerprint_only(a, b),) if a.fingerprint != b.fingerprint else ()
            what = tuple(dict.fromkeys([*plain, *what]))
            if what:
                changed.append(VariantChange(vid, what, a.fingerprint, b.fingerprint))
            elif a.fingerprint != b.fingerprint:
                ignored[vid] = (
                    f"only fields one version lacks differ: {', '.join(sorted(only_one_side))}"
                    if only_one_side
                    else "the fingerprint differs, but nothing both versions' "
                    "details carry (fields, decorators, template, precision) does"
                )
        elif a.fingerprint != b.fingerprint or plain:
            what = tuple(
                dict.fromkeys(
                    [*plain, *([_fingerprint_only(a, b)] if a.fingerprint != b.fingerprint else [])]
                )
            )
            changed.append(VariantChange(vid, what, a.fingerprint, b.fingerprint))
    common = len(before.keys() & after.keys())
    if not use_details:
        notes.append(
            "no details beside the inventories: changes are named from the "
            "fingerprints and the variant records only"
        )
    elif renames is None:
        notes.append(
            "the details carry no rename records (built by an older spyre-ci): renamed "
            "tests and OpInfos show as removed and added"
        )
    for name, subjects in sorted(one_sided.items()):
        notes.append(
            f"field {name} exists in one version only (on {len(subjects)} subjects): not compared"
        )
    fingerprint_changed = sum(
        1
        for vid in before.keys() & after.keys()
        if before[vid].fingerprint != after[vid].fingerprint
    )
    if common and fingerprint_changed > 0.9 * common:
        notes.append(
            f"the suites fingerprint differs on {fingerprint_changed} of {common} "
            "common variants: it sees a change every variant shares"
            + (
                "; the named diff compares only what both versions carry"
                if use_details
                else "; give details to compare only what both carry"
            )
        )
    return InventoryDiff(
        from_version=old.torch_version,
        to_version=new.torch_version,
        variants_from=len(old),
        variants_to=len(new),
        changed=tuple(changed),
        added=added,
        removed=removed,
        api=diff_api(old.api_surface, new.api_surface),
        ignored=ignored,
        details_used=use_details,
        notes=tuple(notes),
        renames=renames,
    )


def _renames(d_old: Mapping[str, Any] | None, d_new: Mapping[str, Any] | None) -> Renames | None:
    """`suites.renames.find_renames` over both details' rename records (None: either lacks
    them). New-exposed: new variants no rename explains, proposed "unknown" (not run yet)."""
    if d_old is None or d_new is None:
        return None
    records = []
    for which, details in (("old", d_old), ("new", d_new)):
        raw = details.get("renames")
        if not isinstance(raw, list):
            return None
        try:
            records.append([RenameRecord.from_json(r) for r in raw])
        except ValueError as exc:
            raise SelectorError(f"{which} details: renames: {exc}") from None
    return find_renames(records[0], records[1])


def _plain_changes(a: Variant, b: Variant) -> list[str]:
    """What the Inventory records itself show (expectations, timeouts)."""
    out = []
    if a.expectation != b.expectation:
        out.append(f"expectation: {a.expectation} -> {b.expectation}")
    if a.timeout_s != b.timeout_s:
        out.append(f"timeout_s: {a.timeout_s} -> {b.timeout_s}")
    return out


def _fingerprint_only(a: Variant, b: Variant) -> str:
    return (
        f"definition: fingerprint {a.fingerprint[:8]} -> {b.fingerprint[:8]} (OpInfo "
        "fields, decorators or template; no details to say which)"
    )


def _detail_changes(
    vid: str, a: Variant, b: Variant, d_old: Mapping[str, Any], d_new: Mapping[str, Any]
) -> tuple[tuple[str, ...] | None, set[str]]:
    """Named differences of one variant from both versions' details, and one-sided fields."""
    va, vb = d_old["variants"].get(vid), d_new["variants"].get(vid)
    if va is None or vb is None:
        return None, set()
    what: list[str] = []
    lone: set[str] = set()
    sa = d_old["subjects"].get(va.get("subject", ""), {})
    sb = d_new["subjects"].get(vb.get("subject", ""), {})
    for name in sorted(sa.keys() | sb.keys()):
        if name not in sa or name not in sb:
            lone.add(name)
        elif sa[name] != sb[name]:
            what.append(f"field: {name}")
    ta = d_old["templates"].get(a.template)
    tb = d_new["templates"].get(b.template)
    if ta != tb:
        what.append(f"template: {a.template} source")
    deco_a, deco_b = list(va.get("decorators", ())), list(vb.get("decorators", ()))
    if sorted(deco_a) != sorted(deco_b):
        for text in sorted(set(deco_b) - set(deco_a)):
            what.append(f"decorator: + {text}")
        for text in sorted(set(deco_a) - set(deco_b)):
            what.append(f"decorator: - {text}")
        if set(deco_a) == set(deco_b):
            what.append("decorator: count changed")
    if va.get("precision") != vb.get("precision"):
        what.append(f"precision: {va.get('precision')} -> {vb.get('precision')}")
    return tuple(what), lone


@dataclass(frozen=True)
class UpgradeSelection:
    """What an upgrade run executes on each version, with the reasons for every variant:
    a selected one's heuristics (as a Plan's `Selected.reasons`), why an unselected one runs
    all the same (`held`: a canary, the holdout sample, a removed or renamed id on the old
    version), and how many were skipped, by why (as a Plan's `skipped`)."""

    reasons: Mapping[str, tuple[Reason, ...]]  # selected id -> its reasons, the first first
    removed: tuple[str, ...]  # in the old inventory only: run on the old version
    holdout: tuple[str, ...]  # unselected runnable variants run all the same: canaries + sample
    runnable_to: int  # runnable variants of the new inventory (the share's denominator)
    seed: str
    api_ops: tuple[str, ...] = ()  # op names the API diff named
    canary: tuple[str, ...] = ()  # the part of `holdout` that is one canary per op
    held: Mapping[str, Reason] = field(default_factory=dict)  # holdout and removed id -> why
    skipped: Mapping[str, int] = field(default_factory=dict)  # why not run -> count

    @property
    def selected(self) -> tuple[str, ...]:
        return tuple(self.reasons)

    @property
    def share(self) -> float:
        """Selected plus holdout over the new inventory's runnable variants."""
        if not self.runnable_to:
            return 0.0
        return round((len(self.reasons) + len(self.holdout)) / self.runnable_to, 6)

    def run_on_old(self, old: Inventory) -> tuple[str, ...]:
        """Selected and holdout ids the old inventory has (runnable), then the removed ones."""
        ids = {v.id for v in old.variants if v.expectation is not Expectation.SKIP}
        chosen = [v for v in (*self.reasons, *self.holdout) if v in ids]
        return tuple(dict.fromkeys([*chosen, *[v for v in self.removed if v in ids]]))

    def run_on_new(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.reasons, *self.holdout]))

    def by_heuristic(self) -> dict[str, int]:
        """Selected variants by the heuristic of their first reason, the most first."""
        counts = Counter(rs[0].heuristic for rs in self.reasons.values() if rs)
        return dict(counts.most_common())

    def to_json(self) -> dict[str, Any]:
        """upgrade.json's selection: each reason as its line (`heuristic: reason`)."""
        return {
            "seed": self.seed,
            "selected": [
                {"id": vid, "reasons": [reason_line(r) for r in rs]}
                for vid, rs in self.reasons.items()
            ],
            "held": {vid: reason_line(r) for vid, r in self.held.items()},
            "by_heuristic": self.by_heuristic(),
            "skipped": dict(self.skipped),
            "removed": list(self.removed),
            "holdout": list(self.holdout),
            "canary": list(self.canary),
            "api_ops": list(self.api_ops),
            "runnable_to": self.runnable_to,
            "share": self.share,
        }


def reason_line(reason: Reason) -> str:
    """A reason as upgrade.json writes it: `heuristic: reason`."""
    return f"{reason.heuristic}: {reason.reason}"


def api_ops(changes: Iterable[ApiChange]) -> tuple[TouchedOp, ...]:
    """The ops an API diff touches, named as the selector names ops (with evidence)."""
    evidence: dict[str, list[str]] = defaultdict(list)
    for change in changes:
        name = canonical(change.name)
        for ns in _ATEN_NAMESPACES:
            if name.startswith(ns) and len(name) > len(ns):
                name = ns[:-1] + "." + name[len(ns) :]
                break
        evidence[name].append(f"aten API: {change.name} {change.kind}")
    return tuple(TouchedOp(n, tuple(ev)) for n, ev in sorted(evidence.items()))


# Which variant of an op tells most about its kernels, best first. Forward against the CPU
# reference reaches the op's main kernels; float32 takes the widest path spyre computes
# (upcasts, accumulators, the float64 intermediates it refuses); an expected pass can
# regress, an expected failure can only be fixed.
CANARY_TEMPLATES = (
    "compare_cpu",
    "module_forward",
    "compile",
    "noncontiguous_samples",
    "variant_consistency_eager",
    "backward",
    "out",
    "errors",
    "numpy_ref",
    "python_ref",
)
CANARY_DTYPES = ("float32", "float16", "bfloat16")


def _canary_rank(v: Variant) -> tuple[int, int, int, str]:
    def at(order: Sequence[str], value: str) -> int:
        return order.index(value) if value in order else len(order)

    return (
        0 if v.expectation is Expectation.PASS else 1,
        at(CANARY_TEMPLATES, v.template),
        at(CANARY_DTYPES, v.dtype),
        v.id,
    )


def canary_of(index: InventoryIndex) -> dict[str, str]:
    """Each op's canary: op key -> its best-ranked runnable variant (`_canary_rank`), over
    all suites (one per suite would run nearly all of the compile suite: one variant per op).
    """
    best: dict[str, Variant] = {}
    for vid in index.runnable:
        v, op = index.by_id[vid], index.op_of_id[vid]
        if op not in best or _canary_rank(v) < _canary_rank(best[op]):
            best[op] = v
    return {op: v.id for op, v in best.items()}


def select_upgrade(
    diff: InventoryDiff,
    old: Inventory,
    new: Inventory | InventoryIndex,
    *,
    holdout_rate: float = 0.02,
    seed: str | None = None,
    heuristics: Sequence[str] = UPGRADE_HEURISTICS,
    canaries: bool = True,
) -> UpgradeSelection:
    """Changed, new and removed variants, what the API diff reaches, one canary per op and a
    seeded holdout.

    `changed` comes from `diff` (so fields one version lacks do not select anything);
    the selector's `new` and `op_match` heuristics add new variants and the variants of ops
    the API diff touched, with their reasons. An op whose canary the heuristics selected
    needs no other; the holdout samples `holdout_rate` of what is left after the canaries.
    """
    if not 0.0 <= holdout_rate <= 1.0:
        raise SelectorError(f"holdout rate must be within [0, 1], not {holdout_rate}")
    unknown = set(heuristics) - REGISTRY.keys()
    if unknown:
        raise SelectorError(
            f"unknown heuristic(s) {', '.join(sorted(unknown))}; known: {', '.join(REGISTRY)}"
        )
    index = InventoryIndex.of(new)
    ops = api_ops(diff.api)
    facts = ChangeFacts(
        decision="targeted",
        reasons=(f"upgrade torch {diff.from_version} -> {diff.to_version}",),
        paths=(),
        ops=ops,
        templates=(),
        functions=(),
        completeness="full",
        risk="high",
        risk_reasons=("a new torch release",),
        kind="upgrade",
    )
    # Only the fingerprints of variants the diff calls changed differ from "previous":
    # the definition heuristic then names exactly the diff's changes (details included).
    changed = {c.id: c for c in diff.changed}
    previous: dict[str, str] = {}
    for v in old.variants:
        now = index.fingerprints.get(v.id)
        if now is None:
            continue  # removed: runs on the old version only
        if v.id in changed:
            # A change the records show with an equal fingerprint (a timeout) still counts.
            previous[v.id] = v.fingerprint if v.fingerprint != now else f"{v.fingerprint}~"
        else:
            previous[v.id] = now
    ctx = RetrieveContext(facts, index, History(), previous, None)
    reasons: dict[str, list[Reason]] = defaultdict(list)
    for name in heuristics:
        for vid, score in REGISTRY[name].score(ctx).items():
            if score.value > 0 and vid in index.runnable_set:
                text = score.reason
                if name == "definition" and vid in changed:
                    text = f"{text}: {'; '.join(changed[vid].what)}"
                reasons[vid].append(Reason(name, score.value, text))
    if diff.renames is not None:
        for r in diff.renames.renamed:
            for old_id, new_id in r.variants:
                if new_id in index.runnable_set:
                    why = f"{old_id} -> {new_id} ({r.evidence})"
                    reasons[new_id].insert(0, Reason("renamed", 0.0, why))
    ordered = {vid: tuple(reasons[vid]) for vid in index.runnable if vid in reasons}
    held: dict[str, Reason] = {}
    if canaries:
        for op, vid in sorted(canary_of(index).items(), key=lambda kv: kv[1]):
            if vid not in ordered:
                held[vid] = Reason("canary", 0.0, f"the canary of op {op}: none of it selected")
    canary = sorted(held)
    unchosen = [vid for vid in index.runnable if vid not in ordered and vid not in held]
    seed = seed or f"{diff.from_version}->{diff.to_version}"
    sample: list[str] = []
    if unchosen and holdout_rate > 0:
        k = min(len(unchosen), max(1, round(holdout_rate * len(unchosen))))
        sample = random.Random(seed).sample(unchosen, k)
    for vid in sample:
        held[vid] = Reason("holdout", 0.0, f"the seeded holdout sample ({seed})")
    # A renamed variant's old id runs on the old version, to compare with its new id.
    renamed_old = {old_id: new_id for new_id, old_id in diff.carried.items() if new_id in ordered}
    for vid in diff.removed:
        held.setdefault(vid, Reason("removed", 0.0, f"only in torch {diff.from_version}"))
    for old_id, new_id in renamed_old.items():
        held.setdefault(old_id, Reason("renamed", 0.0, f"{old_id} -> {new_id}: the old id"))
    skipped = {
        SKIP_DECLARED: len(index.declared_skip),
        SKIP_UNAFFECTED: len(unchosen) - len(sample),
    }
    return UpgradeSelection(
        ordered,
        tuple(dict.fromkeys([*diff.removed, *renamed_old])),
        tuple(sorted([*canary, *sample])),
        len(index.runnable),
        seed,
        tuple(o.name for o in ops),
        tuple(canary),
        held,
        {k: n for k, n in skipped.items() if n > 0},
    )


@dataclass(frozen=True)
class Moved:
    """One variant's outcome on both versions and its DiffCategory value (or None)."""

    id: str
    category: str | None  # regressed | fixed | new-failing | new-passing | removed |
    #                       unchanged-failing; None: passing on both (or not compared)
    before: Status | None
    after: Status | None
    message: str = ""
    renamed_from: str = ""  # the old version's id of a renamed variant


def broken(status: Status) -> bool | None:
    """Does the op fail this test? True: a failure or an expected one (xfailed); False:
    passed or xpassed; None: skipped (nothing known).

    The expectations are the same on both versions, so an xfail that starts passing is a fix
    and a pass that turns into a failure is a regression, whatever the spec expected.
    """
    if status is Status.SKIPPED:
        return None
    return status.is_failure or status is Status.XFAILED


def classify(
    ids_old: Iterable[str],
    ids_new: Iterable[str],
    outcomes_old: Mapping[str, Outcome],
    outcomes_new: Mapping[str, Outcome],
    removed: Iterable[str],
    added: Iterable[str],
    renamed: Mapping[str, str] | None = None,
) -> list[Moved]:
    """Per variant that ran: regressed, fixed, new-failing, new-passing, removed, unchanged-failing.

    Failing is `broken`: failed, error, timeout, crashed, and xfailed (an expected failure is
    still one). A variant that runs on the new version but did not on the old one (skipped
    there by an upstream decorator, or a declared skip: not in `ids_old`) is new to testing:
    new-failing or new-passing. Skipped on the new version compares nothing. `renamed`
    (new id -> old id, what upstream renamed) compares a renamed variant's new id with its
    old one; the old id has no row of its own.
    """
    carried = dict(renamed or {})
    sources = set(carried.values())
    removed_set, added_set = set(removed) - sources, set(added) - carried.keys()
    old_set = set(ids_old) | {new for new, old in carried.items() if old in set(ids_old)}
    out: list[Moved] = []
    for vid in sorted((set(ids_old) - sources) | set(ids_new)):
        a, b = outcomes_old.get(carried.get(vid, vid)), outcomes_new.get(vid)
        before = a.status if a else None
        after = b.status if b else None
        was = broken(before) if before else None
        now = broken(after) if after else None
        message = b.message if b and now else a.message if a and was else ""
        if vid in removed_set:
            category: str | None = "removed"
        elif vid in added_set or (
            now is not None and (before is Status.SKIPPED or vid not in old_set)
        ):
            if now is None:
                continue
            category = "new-failing" if now else "new-passing"
        elif was is None or now is None:
            continue  # skipped, or ran on one side only: nothing to compare
        elif not was and now:
            category = "regressed"
        elif was and not now:
            category = "fixed"
        elif was and now:
            category = "unchanged-failing"
        else:
            category = None
        out.append(Moved(vid, category, before, after, message, carried.get(vid, "")))
    return out


def validation(full: Sequence[Moved], ran: Iterable[str], runnable: int) -> dict[str, Any]:
    """Against a full run of both versions: outcome changes the selection caught and missed."""
    ran_set = set(ran)
    moving = [m for m in full if m.category in ("regressed", "fixed", "new-failing", "removed")]
    caught = [m.id for m in moving if m.id in ran_set]
    missed = [m.id for m in moving if m.id not in ran_set]
    return {
        "outcome_changes": len(moving),
        "caught": len(caught),
        "missed": len(missed),
        "missed_ids": missed,
        "share_ran": round(len(ran_set) / runnable, 6) if runnable else 0.0,
    }


def expansion(
    moved: Iterable[Moved],
    selection: UpgradeSelection,
    new: Inventory | InventoryIndex,
    already: Iterable[str] = (),
    limit: int = 500,
) -> dict[str, str]:
    """Around failures only a canary or the holdout found (selector misses): the same op's
    other variants and its family, not yet run, declared skips left out. Returns id -> why,
    at most `limit`.

    Such a miss says the definitions did not show a change that reached this op (a kernel or
    an implementation changed): its neighbours are the likeliest to have moved too.
    """
    index = InventoryIndex.of(new)
    ran = set(already) | set(selection.reasons) | set(selection.holdout)
    canary = set(selection.canary)
    out: dict[str, str] = {}
    for m in moved:
        if m.category not in ("regressed", "new-failing") or m.id in selection.reasons:
            continue
        if m.id not in selection.holdout or m.id not in index.by_id:
            continue
        op, family = index.op_of_id[m.id], index.family_of_id[m.id]
        near = [*index.by_op.get(op, ()), *index.by_family.get(family, ())]
        kind = "canary" if m.id in canary else "holdout"
        for vid in near:
            if vid not in ran and vid in index.runnable_set and vid not in out:
                out[vid] = f"expansion: {m.category} {kind} variant {m.id} (op {op})"
                if len(out) >= limit:
                    return out
    return out


def replay(
    diff: InventoryDiff,
    selection: UpgradeSelection,
    old: Inventory,
    new: Inventory,
    full_old: Mapping[str, Outcome],
    full_new: Mapping[str, Outcome],
) -> dict[str, Any]:
    """What `selection` would have caught, given every variant's outcome on both versions.

    Replays an upgrade run from a full run's outcomes: the selection's variants on each
    version, the expansion its canary and holdout misses trigger, then `validation` against
    the full run. Lets one full run score other selections (no canaries, other seeds)
    without running anything again.
    """
    ids_old = selection.run_on_old(old)
    ids_new = selection.run_on_new()
    moved = classify(ids_old, ids_new, full_old, full_new, diff.removed, diff.added, diff.carried)
    grown = expansion(moved, selection, new, already=ids_new)
    old_ids = {v.id for v in old.variants}
    ran = {*ids_old, *ids_new, *grown}
    full = classify(full_old, full_new, full_old, full_new, diff.removed, diff.added, diff.carried)
    result = validation(full, ran, selection.runnable_to)
    result["expansion"] = len(grown)
    result["expansion_on_old"] = sum(1 for vid in grown if vid in old_ids)
    return result
