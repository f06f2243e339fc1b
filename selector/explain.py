"""Readable accounts of a Plan: the whole decision (`--explain`) and one variant (`--why`)."""

from __future__ import annotations

from collections import Counter

from selector.plan import SKIP_DECLARED, SKIP_NO_MATCH, SKIP_NOTHING, Plan, Reason
from suites.model import Expectation, Inventory, split_variant_id

_TOP = 15


def _reason_line(r: Reason) -> str:
    trial = " [trial, not counted]" if r.trial else ""
    return f"{r.heuristic:<11} {r.score:+.2f}  {r.reason}{trial}"


def explain(plan: Plan, top: int = _TOP) -> str:
    """The change facts, the decision and why, the strongest reasons, and what was skipped."""
    f = plan.facts
    c = plan.change
    out = [
        f"change: {c.kind} {c.repo} {c.head_sha[:12]} "
        f"({c.files} file(s), {c.files_with_patch} with a patch; "
        f"completeness {f.completeness})",
    ]
    if f.areas:
        out.append("areas:  " + ", ".join(f"{a} {n}" for a, n in sorted(f.areas.items())))
    for p in f.paths[:20]:
        ops = f" -> {', '.join(p.ops[:6])}{' ...' if len(p.ops) > 6 else ''}" if p.ops else ""
        flag = " (ops not found)" if p.unresolved else ""
        out.append(f"  {p.status:<8} {p.path} [{p.area}/{p.policy}]{ops}{flag}")
    if len(f.paths) > 20:
        out.append(f"  ... and {len(f.paths) - 20} more path(s)")
    if f.ops:
        out.append(
            "ops touched: "
            + ", ".join(o.name + (" (from file name)" if o.weak else "") for o in f.ops)
        )
    if f.templates:
        out.append("templates touched: " + ", ".join(f.templates))
    out.append(f"risk: {f.risk}" + (f" ({'; '.join(f.risk_reasons)})" if f.risk_reasons else ""))
    out.append(f"decision: {plan.decision}: {'; '.join(f.reasons)}")
    if plan.fallback:
        out.append(f"fallback: {plan.fallback}")
    t = plan.totals
    out.append(
        f"selected {t.selected} of {t.eligible} runnable variants "
        f"({100 * t.ratio_count:.2f}% by count, {100 * t.ratio_time:.2f}% by time, "
        f"~{t.selected_s:.1f} s); holdout {t.holdout} (~{t.holdout_s:.1f} s), "
        f"reported apart"
    )
    b = plan.budget
    if b.applied:
        out.append(f"budget: {b.kind} limit {b.limit}, used {b.used}")
    elif b.not_applied:
        out.append(f"budget: not applied ({b.not_applied})")
    if plan.selected and plan.decision != "full":
        by_heuristic = Counter(r.heuristic for s in plan.selected for r in s.reasons)
        out.append(
            "reasons by heuristic: " + ", ".join(f"{h} {n}" for h, n in by_heuristic.most_common())
        )
        subjects = Counter(split_variant_id(s.id)[2] for s in plan.selected)
        shown = ", ".join(f"{name} {n}" for name, n in subjects.most_common(20))
        more = f", ... {len(subjects) - 20} more" if len(subjects) > 20 else ""
        out.append(f"selected subjects ({len(subjects)}): {shown}{more}")
        out.append(f"top {min(top, len(plan.selected))} selected:")
        for s in sorted(plan.selected, key=lambda s: (-s.score, s.id))[:top]:
            best = max(s.reasons, key=lambda r: r.score)
            out.append(f"  {s.score:+.2f} {s.id}  <- {best.heuristic}: {best.reason}")
    if plan.skipped:
        out.append("skipped:")
        for reason, n in sorted(plan.skipped.items(), key=lambda kv: -kv[1]):
            out.append(f"  {n:>7}  {reason}")
    for name, info in plan.trial.items():
        out.append(f"trial {name}: scored {info.scored}, would add {info.would_add}")
    if plan.shards:
        out.append(
            "shards: "
            + ", ".join(f"#{s.index} {len(s.ids)} (~{s.estimated_s:.1f} s)" for s in plan.shards)
        )
    return "\n".join(out)


def why(plan: Plan, variant_id: str, inventory: Inventory) -> str:
    """The story of one variant: run or not, and each heuristic's say."""
    variant = next((v for v in inventory.variants if v.id == variant_id), None)
    if variant is None:
        return f"{variant_id}: not in the inventory (check the id: suite::template::subject::dtype)"
    head = (
        f"{variant_id} (suite {variant.suite}, template {variant.template}, "
        f"subject {variant.subject}, dtype {variant.dtype})"
    )
    selected = next((s for s in plan.selected if s.id == variant_id), None)
    if selected is not None:
        lines = [
            head,
            f"SELECTED with score {selected.score:+.2f}"
            + (" (mandatory: failing or new)" if selected.mandatory else "")
            + f", ~{selected.duration_s:.2f} s",
        ]
        lines += ["  " + _reason_line(r) for r in selected.reasons]
        shard = next((s.index for s in plan.shards if variant_id in s.ids), None)
        if shard is not None:
            lines.append(f"  runs in shard #{shard}")
        return "\n".join(lines)
    if variant_id in plan.holdout:
        return "\n".join(
            [
                head,
                "HOLDOUT: not selected, runs in the random holdout sample "
                "(reported apart to measure what selection misses)",
            ]
        )
    if variant.expectation is Expectation.SKIP:
        return "\n".join(
            [
                head,
                f"NOT RUN: {SKIP_DECLARED} ({variant.reason or 'no reason'}, "
                f"{variant.rule or 'rule unknown'})",
            ]
        )
    if plan.decision == "none":
        return "\n".join([head, f"NOT RUN: {SKIP_NOTHING}: {'; '.join(plan.facts.reasons)}"])
    entry = plan.unselected.get(variant_id)
    if entry is None:
        return "\n".join(
            [
                head,
                f"NOT RUN: {SKIP_NO_MATCH} "
                f"(ops touched: {', '.join(plan.facts.op_names) or 'none'})",
            ]
        )
    reasons, verdict = entry
    lines = [head, f"NOT RUN: {verdict}"]
    lines += ["  " + _reason_line(r) for r in reasons]
    return "\n".join(lines)
