"""The selection benchmark's records: configuration, per-mutation results, the figures.

`record` turns the judged mutations into the JSON `benchmarks/results/selection.json` holds
(recall, selection ratios, holdout estimate, restriction check); `summary_lines` prints it.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.selection.mutations import Mutation
from selector.holdout import HoldoutStratum, uniform_holdout
from selector.verify import HoldoutBound, holdout_bound
from suites.model import Inventory, Outcome

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MUTATIONS = REPO / "benchmarks" / "selection" / "mutations.yaml"
DEFAULT_SPECS = REPO / "benchmarks" / "selection" / "specs"

Log = Callable[[str], None]


class BenchError(Exception):
    """The benchmark cannot run; the message names the input and what to do."""


@dataclass(frozen=True)
class BenchConfig:
    mutations: Path = DEFAULT_MUTATIONS
    out: Path = Path("out/bench-selection")
    specs: tuple[str, ...] = (str(DEFAULT_SPECS),)
    only: tuple[str, ...] = ()  # mutation ids; empty: all
    restrict: bool = True  # ground truth only on variants the impact map says can change
    check_restriction: tuple[str, ...] = ()  # also run these mutations unrestricted, compare
    check_sample: int = 0  # >0: check on the restricted ids and this many others, not all
    impact_map: Path | None = None  # a recorded trace; default: record one
    jobs: int = 1
    holdout: float = 0.02
    test_timeout_s: float = 120.0
    command: str = ""
    # How the selector sees each diff: git (function context) | plain (`diff -u`) | github.
    diff_form: str = "plain"
    # Plans join the trace (the impact map) as production does; False: names alone.
    trace: bool = True


@dataclass
class MutationResult:
    mutation: Mutation
    decision: str
    fallback: str | None
    selected: list[str]
    holdout: list[str]
    eligible: int
    ran: int
    restricted: bool
    changed: dict[str, str]  # id -> "baseline -> mutated"
    wall_s: float
    count_ratio: float
    time_ratio: float
    missed_why: dict[str, str] = field(default_factory=dict)
    unrestricted_changed: dict[str, str] | None = None
    # The other plan: without the trace when the primary joins it, and the reverse.
    alternative: MutationResult | None = None
    removed: list[str] = field(default_factory=list)  # variant ids the mutation removed
    diff_form: str = "git"  # the form the selector saw (`BenchConfig.diff_form` or git)
    ran_ids: list[str] = field(default_factory=list)  # what the ground-truth run ran
    checked_outside: int | None = None  # variants outside the restriction the check ran
    # How the plan drew its holdout (`plan.holdout_strata`); empty: one uniform sample.
    holdout_strata: tuple[HoldoutStratum, ...] = ()

    @property
    def caught(self) -> list[str]:
        chosen = set(self.selected)
        return sorted(v for v in self.changed if v in chosen)

    @property
    def missed(self) -> list[str]:
        chosen = set(self.selected)
        return sorted(v for v in self.changed if v not in chosen)

    @property
    def holdout_found(self) -> list[str]:
        held = set(self.holdout)
        return sorted(v for v in self.changed if v in held)

    @property
    def unselected(self) -> int:
        return self.eligible - len(self.selected)

    @property
    def holdout_bound(self) -> HoldoutBound | None:
        """Verify's figures for this holdout (weighted point, 95 % bound); None without one."""
        if not self.holdout:
            return None
        strata = self.holdout_strata or uniform_holdout(self.holdout, self.unselected)
        return holdout_bound(strata, self.holdout_found)

    @property
    def estimated_missed(self) -> float:
        """The Verify point estimate: Horvitz-Thompson over the holdout's strata."""
        bound = self.holdout_bound
        return 0.0 if bound is None else bound.estimated_missed

    @property
    def missed_upper(self) -> float | None:
        bound = self.holdout_bound
        return None if bound is None else bound.missed_upper

    @property
    def true_miss_rate(self) -> float | None:
        return len(self.missed) / self.unselected if self.unselected else None

    def bound_json(self) -> dict[str, Any] | None:
        """The bound against the truth: does the 95 % upper bound cover the true miss rate?"""
        bound, truth = self.holdout_bound, self.true_miss_rate
        if bound is None:
            return None
        return {
            "method": bound.method,
            "miss_rate": round(bound.miss_rate, 6),
            "miss_rate_upper": bound.miss_rate_upper,
            "missed_upper": round(bound.missed_upper, 3),
            "unselected_time_share": bound.time_share,
            "true_miss_rate": None if truth is None else round(truth, 6),
            "covers": None if truth is None else len(self.missed) <= bound.missed_upper,
            "strata": list(bound.strata),
        }

    def to_json(self) -> dict[str, Any]:
        data = {
            **self.mutation.to_json(),
            "decision": self.decision,
            "fallback": self.fallback,
            "failing": len(self.changed),
            "failing_ids": dict(sorted(self.changed.items())),
            "selected": len(self.selected),
            "holdout": len(self.holdout),
            "caught": self.caught,
            "missed": self.missed,
            "missed_why": self.missed_why,
            "holdout_found": self.holdout_found,
            "estimated_missed": round(self.estimated_missed, 3),
            "holdout_bound": self.bound_json(),
            "count_ratio": round(self.count_ratio, 5),
            "time_ratio": round(self.time_ratio, 5),
            "removed": self.removed,
            "diff_form_seen": self.diff_form,
            "ground_truth_ran": self.ran,
            "ground_truth_restricted": self.restricted,
            "wall_s": round(self.wall_s, 1),
        }
        if self.unrestricted_changed is not None:
            data["unrestricted_failing_ids"] = dict(sorted(self.unrestricted_changed.items()))
            data["restriction_exact"] = self.unrestricted_changed == self.changed
            data["restriction_checked_outside"] = self.checked_outside
        if self.alternative is not None:
            w = self.alternative
            data["alternative"] = {
                "decision": w.decision,
                "selected": len(w.selected),
                "holdout": len(w.holdout),
                "caught": len(w.caught),
                "missed": w.missed,
                "count_ratio": round(w.count_ratio, 5),
                "time_ratio": round(w.time_ratio, 5),
            }
        return data


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 5) if den else None


def build_record(
    config: BenchConfig,
    results: Sequence[MutationResult],
    inventory: Inventory,
    baseline: Mapping[str, Outcome],
    total_s: float,
    restricted: bool,
    wall_s: float,
) -> dict[str, Any]:
    failing = sum(len(r.changed) for r in results)
    caught = sum(len(r.caught) for r in results)
    with_failure = [r for r in results if r.changed]
    caught_some = [r for r in with_failure if r.caught]
    est_missed = sum(r.estimated_missed for r in results)
    est_with_failure = [r for r in results if r.caught or r.holdout_found]
    bounded = [(r, r.bound_json()) for r in results]
    checked = [b for _, b in bounded if b is not None and b["covers"] is not None]
    # A mutation without a holdout (a full run, nothing to run) bounds nothing it left out.
    missed_upper = sum(r.unselected if b is None else b["missed_upper"] for r, b in bounded)
    counts: dict[str, int] = {}
    for o in baseline.values():
        counts[str(o.status)] = counts.get(str(o.status), 0) + 1
    test_recall = _ratio(caught, failing)
    checks = [r for r in results if r.unrestricted_changed is not None]
    alternative = [r.alternative for r in results if r.alternative is not None]
    extra: dict[str, Any] = {}
    if alternative and len(alternative) == len(results):
        extra["alternative"] = {
            "what": (
                "the same plans without the trace (`spyre-ci select --no-trace`): names, "
                "globs and History only"
                if config.trace
                else "the same plans joined with the trace (the impact map)"
            ),
            **_figures(alternative),
        }
    return {
        "name": "selection",
        "value": test_recall,
        "unit": "test recall (failing variants selected / failing variants)",
        "command": config.command,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()} (shared with other work)",
        "diff_form": config.diff_form,
        "trace": config.trace,
        "notes": (
            f"inventory of {', '.join(config.specs)}; the selector saw each diff in the "
            f"{config.diff_form!r} form, old sources from the installed torch"
            + ("; plans join the trace" if config.trace else "; plans join no trace")
            + "; ground truth = variants whose status differs from the unmutated baseline"
            + (
                "; ground-truth runs restricted by the impact map (exact, see "
                "docs/selection-benchmark.md)"
                if restricted
                else ""
            )
            + (
                f"; impact map {config.impact_map} recorded beforehand with `spyre-ci "
                f"impact-map --specs {' '.join(config.specs)} --out {config.impact_map}`"
                if config.impact_map
                else ""
            )
        ),
        "test_recall": test_recall,
        "change_recall": _ratio(len(caught_some), len(with_failure)),
        "count_ratio": _ratio(
            sum(len(r.selected) for r in results), sum(r.eligible for r in results)
        ),
        "time_ratio": _ratio(sum(r.time_ratio for r in results), len(results)),
        "holdout_estimate": {
            "method": "per mutation: Horvitz-Thompson point and the 95 % upper bound of "
            "Verify (Wilson score per stratum, summed); overall: the sums over mutations",
            "test_recall": _ratio(caught, caught + est_missed),
            "test_recall_lower": _ratio(caught, caught + missed_upper),
            "change_recall": _ratio(len(caught_some), len(est_with_failure)),
            "estimated_missed": round(est_missed, 2),
            "missed_upper": round(missed_upper, 2),
            "mutations_with_holdout_failure": sum(1 for r in results if r.holdout_found),
            "mutations_bounded": len(checked),
            "mutations_covered": sum(1 for b in checked if b["covers"]),
        },
        "truth": {
            "failing": failing,
            "caught": caught,
            "missed": failing - caught,
            "mutations": len(results),
            "mutations_with_failure": len(with_failure),
            "mutations_caught": len(caught_some),
        },
        "aim": {"change_recall": 1.0, "test_recall": 0.99, "time_ratio": 0.10},
        "inventory": {
            "specs": [
                str(Path(s).relative_to(REPO)) if Path(s).is_relative_to(REPO) else s
                for s in config.specs
            ],
            "variants": len(inventory.variants),
            "runnable": len(baseline),
            "baseline_statuses": counts,
            "baseline_test_s": round(total_s, 1),
        },
        "restriction": {
            "used": restricted,
            "checked_against_unrestricted": [r.mutation.id for r in checks],
            "exact_on_all_checked": all(r.unrestricted_changed == r.changed for r in checks),
            "variants_run": sum(r.ran for r in results),
            "variants_unrestricted": len(baseline) * len(results),
        },
        **extra,
        "wall_s": round(wall_s, 1),
        "mutations": [r.to_json() for r in results],
    }


def _figures(results: Sequence[MutationResult]) -> dict[str, Any]:
    failing = sum(len(r.changed) for r in results)
    with_failure = [r for r in results if r.changed]
    return {
        "test_recall": _ratio(sum(len(r.caught) for r in results), failing),
        "change_recall": _ratio(sum(1 for r in with_failure if r.caught), len(with_failure)),
        "count_ratio": _ratio(
            sum(len(r.selected) for r in results), sum(r.eligible for r in results)
        ),
        "time_ratio": _ratio(sum(r.time_ratio for r in results), len(results)),
        "missed": sum(len(r.missed) for r in results),
    }


def summary_lines(record: Mapping[str, Any]) -> list[str]:
    """The figures as a short table for the terminal."""
    lines = [
        f"{'mutation':30s} {'decision':9s} {'sel':>4s} {'fail':>4s} {'caught':>6s} "
        f"{'missed':>6s} {'time%':>6s}"
    ]
    for m in record["mutations"]:
        lines.append(
            f"{m['id'][:30]:30s} {m['decision']:9s} {m['selected']:4d} "
            f"{m['failing']:4d} {len(m['caught']):6d} {len(m['missed']):6d} "
            f"{100 * m['time_ratio']:6.2f}"
        )

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f} %"

    h = record["holdout_estimate"]
    w = record.get("alternative")
    if w:
        label = "without the trace" if record.get("trace", True) else "with the trace"
        lines.append(
            f"{label}: test recall {pct(w['test_recall'])}, change recall "
            f"{pct(w['change_recall'])}, ratio by count {pct(w['count_ratio'])}, "
            f"by time {pct(w['time_ratio'])}"
        )
    lower = h.get("test_recall_lower")
    lines += [
        f"test recall {pct(record['test_recall'])} (holdout: at least {pct(lower)} at 95 %, "
        f"point {pct(h['test_recall'])}; bound covers the true miss rate in "
        f"{h.get('mutations_covered', 0)} of {h.get('mutations_bounded', 0)} mutations), "
        f"change recall {pct(record['change_recall'])} (holdout estimate "
        f"{pct(h['change_recall'])})",
        f"selection ratio by count {pct(record['count_ratio'])}, by time "
        f"{pct(record['time_ratio'])}",
    ]
    return lines
