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
from typing import TypeVar

from contracts.codec import CodecError, Record, from_json, sorted_keys, wire
from suites.model import Status

_SORTED = wire(encode=sorted_keys)
RECENT_LIMIT = 10
FAILURES = frozenset(s for s in Status if s.is_failure)


@dataclass(frozen=True)
class VariantHistory(Record):
    recent: tuple[Status, ...] = ()
    mean_duration_s: float | None = None
    flaky: bool = False
    baseline: Status | None = None

    @property
    def failing(self) -> bool:
        """Failing now: the last run failed, or the baseline is red."""
        return bool(self.recent and self.recent[-1] in FAILURES) or self.baseline in FAILURES


@dataclass(frozen=True)
class History(Record):
    """What past runs say, as of the start of this plan."""

    variants: Mapping[str, VariantHistory] = field(default_factory=dict, metadata=_SORTED)
    co_failures: Mapping[str, Mapping[str, int]] = field(default_factory=dict, metadata=_SORTED)
    known_variants: frozenset[str] = frozenset()

    def get(self, variant_id: str) -> VariantHistory | None:
        return self.variants.get(variant_id)

    @classmethod
    def from_json(cls, data: object) -> History:
        """Parse a snapshot; a bad value names its path (SelectorError)."""
        if not isinstance(data, Mapping):
            from selector.errors import SelectorError

            raise SelectorError("history: the snapshot must be a JSON object")
        return _read(cls, data, "history")


@dataclass(frozen=True)
class OutcomeRecord:
    """One result for the store to append to `VariantHistory.recent`."""

    id: str
    status: Status
    duration_s: float


@dataclass(frozen=True)
class HistoryUpdate(Record):
    """What Verify asks the store to record for one run (apply idempotently by run key)."""

    outcomes: tuple[OutcomeRecord, ...] = ()
    mark_flaky: tuple[str, ...] = ()  # set VariantHistory.flaky
    # new baseline statuses
    baseline: Mapping[str, Status] = field(default_factory=dict, metadata=_SORTED)
    # path -> ids +1
    co_failures: Mapping[str, tuple[str, ...]] = field(default_factory=dict, metadata=_SORTED)
    known_variants: frozenset[str] | None = None  # replace when the run had an inventory

    @classmethod
    def from_json(cls, data: object) -> HistoryUpdate:
        """Inverse of `to_json` (a held update read back); a bad field raises SelectorError."""
        return _read(cls, data, "history update")


R = TypeVar("R")


def _read(cls: type[R], data: object, what: str) -> R:
    from selector.errors import SelectorError

    try:
        return from_json(cls, data)
    except CodecError as exc:
        raise SelectorError(f"{what}: {exc}") from None


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
