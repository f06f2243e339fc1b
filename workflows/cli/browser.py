"""The run browser's data: History read into `dashboard_export.browser`'s rows, and the pages
written into a folder (`spyre-ci runs pages`) that the relay serves without reading History."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contracts.run_summary import RunSummary
from dashboard_export.browser import (
    RunRow,
    VariantPage,
    VariantRun,
    page_name,
    render_flaky,
    render_index,
    render_quality,
    render_variant,
)
from selector.history import FAILURES
from workflows.run import forensics
from workflows.stores.history import HistoryStore, RunRecord

_FAILED = frozenset(str(s) for s in FAILURES)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_row(run: RunRecord, runs_dir: Path | None = None) -> RunRow:
    """A run record's row: counts from its summary, quality from its summary's metrics.
    `runs_dir`: the folder the relay serves runs from; a run whose out directory is not
    `runs_dir/<run id>` is marked not served (its report is elsewhere)."""
    facts, results = run.summary.plan, run.summary.results
    metrics: Mapping[str, Any] = results.metrics if results is not None else {}
    holdout = facts.holdout if facts is not None else None
    miss_rate = metrics.get("miss_rate")
    miss_rate = float(miss_rate) if isinstance(miss_rate, int | float) else None
    # The summary keeps the metrics' numbers, not the list of missed ids: the count is the
    # rate times the sample.
    misses = metrics.get("holdout_misses")
    count = len(misses) if isinstance(misses, list) else _int(misses)
    if count is None and miss_rate is not None and holdout:
        count = round(miss_rate * holdout)
    green = metrics.get("false_green")
    return RunRow(
        run.run_id,
        str(run.state),
        run.summary.event,
        run.updated_at,
        facts.selected if facts is not None else None,
        results.failed if results is not None else None,
        results.new_failures if results is not None else None,
        holdout,
        count,
        miss_rate,
        # As selector.verify.false_green_rate: only runs with a holdout are measured.
        bool(green) if isinstance(green, bool) and holdout else None,
        out_dir=facts.out_dir if facts is not None else "",
        served=runs_dir is None or _served(facts.out_dir if facts else "", runs_dir, run.run_id),
    )


def _served(out_dir: str, runs_dir: Path, run_id: str) -> bool:
    """Whether the relay's `/runs/<run_id>` finds this run's files: they are in
    `runs_dir/<run_id>` (an out directory not recorded is taken to be there)."""
    if not out_dir:
        return True
    try:
        return Path(out_dir).resolve() == (runs_dir / run_id).resolve()
    except OSError:
        return False


def variant_pages(history: HistoryStore, runs: list[RunRecord]) -> list[VariantPage]:
    """Every variant that failed or is flaky in `runs`, with its outcomes there and its
    last good / first bad when it is failing now."""
    snapshot = history.snapshot()
    candidates = [
        vid
        for vid, h in snapshot.variants.items()
        if h.flaky or any(str(s) in _FAILED for s in h.recent)
    ]
    outcomes = forensics.outcomes_by_run(history, candidates)
    in_window = {r.run_id for r in runs}
    newest_first = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
    pages = []
    for vid in sorted(candidates):
        h = snapshot.variants[vid]
        statuses = outcomes.get(vid, {})
        failed = any(statuses.get(r) in _FAILED for r in in_window)
        if not (failed or h.flaky):
            continue
        line = [
            VariantRun(r.run_id, r.summary.event, r.created_at, statuses.get(r.run_id))
            for r in newest_first
        ]
        window: forensics.Window | None = None
        latest = next((r for r in newest_first if r.run_id in statuses), None)
        if latest is not None and statuses[latest.run_id] in _FAILED:
            current = forensics.point_of(latest)
            main = forensics.main_line(history, exclude=latest.run_id)
            window = forensics.locate(vid, current, main, statuses)
        pages.append(
            VariantPage(
                vid,
                h.flaky,
                h.mean_duration_s,
                tuple(str(s) for s in h.recent),
                tuple(line),
                window.last_good if window else None,
                window.first_bad if window else None,
                window.last_good_run if window else None,
                window.first_bad_run if window else None,
                window.compare_url if window else None,
                _bisected(latest.summary, vid) if window and latest else None,
            )
        )
    return pages


def write_pages(history: HistoryStore, out: Path, limit: int = 50) -> list[Path]:
    """Write index.html, flaky.html, quality.html and variants/<name>.html into `out` from
    the `limit` most recent runs; the paths written."""
    runs = history.list_runs(limit)
    rows = [run_row(r, out) for r in runs]
    pages = variant_pages(history, runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "variants").mkdir(exist_ok=True)
    files = {
        out / "index.html": render_index(rows, [p.id for p in pages], time.time()),
        out / "flaky.html": render_flaky([p for p in pages if p.flaky]),
        out / "quality.html": render_quality(rows),
    }
    for page in pages:
        files[out / "variants" / f"{page_name(page.id)}.html"] = render_variant(page)
    for path, text in files.items():
        # Written aside and renamed: the relay never serves half a page.
        part = path.with_name(path.name + ".part")
        part.write_text(text, encoding="utf-8")
        part.replace(path)
    return list(files)


def _bisected(summary: RunSummary, vid: str) -> str | None:
    """The bisect's answer for `vid` kept in a run's forensics (`spyre-ci bisect --run`)."""
    return summary.forensics.bisected(vid) if summary.forensics is not None else None
