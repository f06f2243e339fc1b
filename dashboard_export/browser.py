"""The run browser's pages (pure): plain rows in, self-contained HTML out (inline CSS, no
scripts). `workflows.cli.browser` reads History into these rows; `spyre-ci serve` serves the
files at `/runs/`, `/variants/<name>`, `/flaky` and `/quality`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from dashboard_export.pages import render
from dashboard_export.readiness_report import duration, when

NAV = (("/runs/", "Runs"), ("/flaky", "Flaky variants"), ("/quality", "Selection quality"))
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class RunRow:
    """One run of the runs list and of the quality page."""

    run_id: str
    state: str
    event: str
    updated_at: float
    selected: int | None
    failed: int | None
    new_failures: int | None
    holdout: int | None = None
    holdout_misses: int | None = None
    miss_rate: float | None = None
    false_green: bool | None = None
    # Where the run's files are, and whether the relay serves them at /runs/<id> (written
    # into its runs folder); a run written elsewhere gets no link that would answer 404.
    out_dir: str = ""
    served: bool = True


@dataclass(frozen=True)
class VariantRun:
    """One variant's outcome in one run (`status` None: the run did not run it)."""

    run_id: str
    event: str
    created_at: float
    status: str | None


@dataclass(frozen=True)
class VariantPage:
    """One variant across the runs of the window, newest run first."""

    id: str
    flaky: bool
    mean_duration_s: float | None
    recent: tuple[str, ...]
    runs: tuple[VariantRun, ...]
    last_good: str | None = None  # sha, from workflows.run.forensics (None: unknown)
    first_bad: str | None = None
    last_good_run: str | None = None
    first_bad_run: str | None = None
    compare_url: str | None = None
    # `spyre-ci bisect --run`'s answer for the failing run: culprit or window, confidence.
    bisect: str | None = None


def page_name(variant_id: str) -> str:
    """The file name (without `.html`) of a variant's page: letters, digits, `_` and `-` only
    (the relay refuses anything else), unique by a hash of the id."""
    slug = _NOT_NAME.sub("_", variant_id).strip("_-")[:80] or "variant"
    digest = hashlib.sha256(variant_id.encode()).hexdigest()[:10]
    return f"{slug}-{digest}"


def _page(template: str, title: str, **values: object) -> str:
    return render(
        template,
        title=title,
        nav=NAV,
        run_link=_run_link,
        variant_link=_variant_link,
        **values,
    )


def _number(value: int | float | None) -> str:
    return "-" if value is None else str(value)


def _run_link(run_id: str) -> Markup:
    return Markup('<a href="/runs/{0}"><code>{0}</code></a>').format(run_id)


def _variant_link(variant_id: str) -> Markup:
    return Markup('<a href="/variants/{}"><code>{}</code></a>').format(
        page_name(variant_id), variant_id
    )


def _status(status: str | None) -> Markup:
    if status is None:
        return Markup('<span class="muted">not run</span>')
    hot = status in ("failed", "error", "timeout", "crashed")
    return Markup('<span class="{}">{}</span>').format("hot" if hot else "", status)


def render_index(runs: Sequence[RunRow], variants: Sequence[str], generated_at: float) -> str:
    """The runs list, newest first, and the variants that have a page."""
    rows = [
        [
            _run_link(r.run_id) if r.served else Markup("<code>{}</code>").format(r.run_id),
            r.state,
            r.event,
            when(r.updated_at),
            _number(r.selected),
            _number(r.failed),
            _number(r.new_failures),
            Markup('<a href="/runs/{0}">report</a> · <a href="/runs/{0}/tests">tests</a>').format(
                r.run_id
            )
            if r.served
            else Markup(
                '<span class="muted">written to <code>{}</code>, not served here</span>'
            ).format(r.out_dir or "another folder"),
        ]
        for r in runs
    ]
    return _page(
        "runs_index.html",
        "spyre-ci runs",
        runs=runs,
        rows=rows,
        variants=variants,
        written=when(generated_at),
    )


def render_variant(v: VariantPage) -> str:
    """One variant's history: outcomes per run, duration, last good / first bad."""
    rows = [[_run_link(r.run_id), r.event, when(r.created_at), _status(r.status)] for r in v.runs]
    return _page(
        "variant.html",
        f"Variant {v.id}",
        v=v,
        mean_duration=duration(v.mean_duration_s),
        ran=sum(1 for r in v.runs if r.status is not None),
        rows=rows,
    )


def render_flaky(variants: Sequence[VariantPage]) -> str:
    """The variants History marks flaky."""
    rows = [
        [_variant_link(v.id), " ".join(v.recent) or "-", duration(v.mean_duration_s)]
        for v in variants
    ]
    return _page("flaky.html", f"Flaky variants ({len(rows)})", rows=rows)


def render_quality(runs: Sequence[RunRow]) -> str:
    """Selection quality per run: holdout, its misses, false green; the false-green rate."""
    measured = [r for r in runs if r.false_green is not None]
    green = sum(1 for r in measured if r.false_green)
    rows = [
        [
            _run_link(r.run_id),
            r.event,
            when(r.updated_at),
            _number(r.selected),
            _number(r.holdout),
            _number(r.holdout_misses),
            "-" if r.miss_rate is None else f"{r.miss_rate:.1%}",
            "-"
            if r.false_green is None
            else (Markup('<b class="hot">yes</b>') if r.false_green else "no"),
        ]
        for r in runs
    ]
    return _page(
        "quality.html",
        "Selection quality",
        rows=rows,
        green=green,
        measured=len(measured),
        rate=f"{green / len(measured):.1%}" if measured else "-",
    )
