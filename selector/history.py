"""The History snapshot the selector reads, and the updates Verify asks the store to record.

Plain dataclasses with JSON round trips. The stores (embedded SQLite, shared Redis) live in
`workflows/`; they build a `History` before planning and apply a `HistoryUpdate` after Verify.

Meaning of the fields, for store implementers:
- `VariantHistory.recent`: statuses of the latest runs of that variant, oldest first, at
  most `RECENT_LIMIT` kept (a store may keep more; the selector reads the tail).
- `VariantHistory.mean_duration_s`: mean wall time over recorded passing or failing runs;
  None when never run (the planner then uses `PlanConfig.default_duration_s`).
- `VariantHistory.flaky`: a failure of this variant once passed on a rerun of the same
  code; cleared by the store when it sees `flaky_clear_after` clean runs (store policy).
- `VariantHistory.baseline`: the last status on the baseline (upstream `main` before the
  change, i.e. the most recent recorded run of a change that landed); None when unknown.
- `History.co_failures[path][variant_id]`: how many times `variant_id` newly failed (a
  confirmed, non-flaky, new failure) in a run whose change touched `path`.
- `History.known_variants`: the ids of the inventory of the last recorded run (run or not);
  a variant outside it is new. Empty means "no record": nothing counts as new.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from suites.model import Status

RECENT_LIMIT = 10
FAILURES = frozenset(s for s in Status if s.is_failure)


@dataclass(frozen=True)
class VariantHistory:
    recent: tuple[Status, ...] = ()
    mean_duration_s: float | None = None
    flaky: bool = False
    baseline: Status | None = None

    @property
    def failing(self) -> bool:
        """Failing now: the last run failed, or the baseline is red."""
        return bool(self.recent and self.recent[-1] in FAILURES) or self.baseline in FAILURES

    def to_json(self) -> dict[str, Any]:
        return {
            "recent": [str(s) for s in self.recent],
            "mean_duration_s": self.mean_duration_s,
            "flaky": self.flaky,
            "baseline": None if self.baseline is None else str(self.baseline),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VariantHistory:
        baseline = data.get("baseline")
        duration = data.get("mean_duration_s")
        return cls(
            recent=tuple(Status(s) for s in data.get("recent", ())),
            mean_duration_s=None if duration is None else float(duration),
            flaky=bool(data.get("flaky", False)),
            baseline=None if baseline is None else Status(baseline),
        )


@dataclass(frozen=True)
class History:
    """What past runs say, as of the start of this plan."""

    variants: Mapping[str, VariantHistory] = field(default_factory=dict)
    co_failures: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    known_variants: frozenset[str] = frozenset()

    def get(self, variant_id: str) -> VariantHistory | None:
        return self.variants.get(variant_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "variants": {vid: h.to_json() for vid, h in sorted(self.variants.items())},
            "co_failures": {p: dict(c) for p, c in sorted(self.co_failures.items())},
            "known_variants": sorted(self.known_variants),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> History:
        """Parse a snapshot; a bad status names the variant (SelectorError)."""
        from selector.errors import SelectorError

        if not isinstance(data, Mapping):
            raise SelectorError("history: the snapshot must be a JSON object")
        for key, kind, name in (
            ("variants", Mapping, "object"),
            ("co_failures", Mapping, "object"),
            ("known_variants", list, "array"),
        ):
            if key in data and not isinstance(data[key], kind):
                raise SelectorError(f"history: {key!r} must be a JSON {name}")
        variants: dict[str, VariantHistory] = {}
        for vid, entry in (data.get("variants") or {}).items():
            try:
                variants[vid] = VariantHistory.from_json(entry)
            except (ValueError, TypeError, AttributeError) as exc:
                raise SelectorError(f"history: variants[{vid!r}]: {exc}") from None
        co: dict[str, dict[str, int]] = {}
        for path, counts in (data.get("co_failures") or {}).items():
            try:
                co[str(path)] = {str(v): int(n) for v, n in counts.items()}
            except (ValueError, TypeError, AttributeError) as exc:
                raise SelectorError(f"history: co_failures[{path!r}]: {exc}") from None
        return cls(variants, co, frozenset(data.get("known_variants", ())))


@dataclass(frozen=True)
class OutcomeRecord:
    """One result for the store to append to `VariantHistory.recent`."""

    id: str
    status: Status
    duration_s: float


@dataclass(frozen=True)
class HistoryUpdate:
    """What Verify asks the store to record for one run (apply idempotently by run key)."""

    outcomes: tuple[OutcomeRecord, ...] = ()
    mark_flaky: tuple[str, ...] = ()  # set VariantHistory.flaky
    baseline: Mapping[str, Status] = field(default_factory=dict)  # new baseline statuses
    co_failures: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # path -> ids +1
    known_variants: frozenset[str] | None = None  # replace when the run had an inventory

    def to_json(self) -> dict[str, Any]:
        return {
            "outcomes": [
                {"id": o.id, "status": str(o.status), "duration_s": o.duration_s}
                for o in self.outcomes
            ],
            "mark_flaky": list(self.mark_flaky),
            "baseline": {vid: str(s) for vid, s in sorted(self.baseline.items())},
            "co_failures": {p: list(ids) for p, ids in sorted(self.co_failures.items())},
            "known_variants": None if self.known_variants is None else sorted(self.known_variants),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryUpdate:
        """Inverse of `to_json` (a held update read back); a bad field raises SelectorError."""
        from selector.errors import SelectorError

        try:
            known = data.get("known_variants")
            return cls(
                outcomes=tuple(
                    OutcomeRecord(str(o["id"]), Status(o["status"]), float(o["duration_s"]))
                    for o in data.get("outcomes", ())
                ),
                mark_flaky=tuple(str(v) for v in data.get("mark_flaky", ())),
                baseline={str(v): Status(s) for v, s in (data.get("baseline") or {}).items()},
                co_failures={
                    str(p): tuple(str(v) for v in ids)
                    for p, ids in (data.get("co_failures") or {}).items()
                },
                known_variants=None if known is None else frozenset(str(v) for v in known),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SelectorError(f"history update: {exc!r}") from None


def apply_update(history: History, update: HistoryUpdate) -> History:
    """The History a store holds after recording `update` (reference semantics for stores)."""
    variants = dict(history.variants)
    for record in update.outcomes:
        old = variants.get(record.id, VariantHistory())
        recent = (*old.recent, record.status)[-RECENT_LIMIT:]
        mean = old.mean_duration_s
        if record.status is not Status.SKIPPED:
            # A mean over the kept window: old runs age out as the code changes.
            n = sum(1 for s in old.recent if s is not Status.SKIPPED)
            mean = record.duration_s if mean is None else (mean * n + record.duration_s) / (n + 1)
        variants[record.id] = VariantHistory(recent, mean, old.flaky, old.baseline)
    for vid in update.mark_flaky:
        old = variants.get(vid, VariantHistory())
        variants[vid] = VariantHistory(old.recent, old.mean_duration_s, True, old.baseline)
    for vid, status in update.baseline.items():
        old = variants.get(vid, VariantHistory())
        variants[vid] = VariantHistory(old.recent, old.mean_duration_s, old.flaky, status)
    co = {path: dict(counts) for path, counts in history.co_failures.items()}
    for path, ids in update.co_failures.items():
        counts = co.setdefault(path, {})
        for vid in ids:
            counts[vid] = counts.get(vid, 0) + 1
    known = history.known_variants if update.known_variants is None else update.known_variants
    return History(variants, co, known)
