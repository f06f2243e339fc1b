"""The run browser's pages (pure): plain rows in, self-contained HTML out (inline CSS, no
scripts). `workflows.cli.browser` reads History into these rows; `spyre-ci serve` serves the
files at `/runs/`, `/variants/<name>`, `/flaky` and `/quality`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from dashboard_export.readiness_report import duration, when
from dashboard_export.report import _CSS, _html_table

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


def _page(title: str, body: Sequence[str]) -> str:
    nav = " · ".join(f'<a href="{href}">{escape(label)}</a>' for href, label in NAV)
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                '<meta name="viewport" content="width=device-width, initial-scale=1">',
                f"<title>{escape(title)}</title>",
                f"<style>{_CSS}</style></head><body><main>",
                f'<header><h1>{escape(title)}</h1><div class="muted">{nav} · '
                '<a href="/readiness">Readiness</a></div></header>',
                *body,
                "</main></body></html>",
            ]
        )
        + "\n"
    )


def _number(value: int | float | None) -> str:
    return "-" if value is None else escape(str(value))


def _run_link(run_id: str) -> str:
    return f'<a href="/runs/{escape(run_id, quote=True)}"><code>{escape(run_id)}</code></a>'


def _variant_link(variant_id: str) -> str:
    return f'<a href="/variants/{page_name(variant_id)}"><code>{escape(variant_id)}</code></a>'


def _status(status: str | None) -> str:
    if status is None:
        return '<span class="muted">not run</span>'
    hot = status in ("failed", "error", "timeout", "crashed")
    return f'<span class="{"hot" if hot else ""}">{escape(status)}</span>'


def render_index(runs: Sequence[RunRow], variants: Sequence[str], generated_at: float) -> str:
    """The runs list, newest first, and the variants that have a page."""
    rows = [
        [
            _run_link(r.run_id),
            escape(r.state),
            escape(r.event),
            escape(when(r.updated_at)),
            _number(r.selected),
            _number(r.failed),
            _number(r.new_failures),
            f'<a href="/runs/{escape(r.run_id, quote=True)}">report</a> · '
            f'<a href="/runs/{escape(r.run_id, quote=True)}/tests">tests</a>',
        ]
        for r in runs
    ]
    body = [
        f'<section><div class="muted">{len(runs)} runs; written {escape(when(generated_at))} '
        "by <code>spyre-ci runs pages</code></div>",
        _html_table(
            ["run", "state", "event", "updated (UTC)", "selected", "failed", "new", "links"],
            rows,
        )
        if rows
        else "<p>No runs yet: start one with <code>spyre-ci run --event FILE</code>.</p>",
        "</section>",
    ]
    if variants:
        body += [
            "<section><h2>Variants that failed or flaked in these runs</h2><ul>",
            *(f"<li>{_variant_link(v)}</li>" for v in variants),
            "</ul></section>",
        ]
    return _page("spyre-ci runs", body)


def render_variant(v: VariantPage) -> str:
    """One variant's history: outcomes per run, duration, last good / first bad."""
    ran = [r for r in v.runs if r.status is not None]
    facts = [
        f"<li>flaky: <b>{'yes' if v.flaky else 'no'}</b></li>",
        f"<li>mean duration: {escape(duration(v.mean_duration_s))}</li>",
        f"<li>recent outcomes (oldest first): {escape(' '.join(v.recent) or '-')}</li>",
        f"<li>runs in the window that ran it: {len(ran)} of {len(v.runs)}</li>",
    ]
    if v.first_bad_run is not None:
        good = (
            f"<code>{escape(v.last_good)}</code> (run {_run_link(v.last_good_run)})"
            if v.last_good and v.last_good_run
            else "never seen passing"
        )
        facts.append(f"<li>last good: {good}</li>")
        facts.append(
            f"<li>first bad: <code>{escape(v.first_bad or '?')}</code> "
            f"(run {_run_link(v.first_bad_run)})</li>"
        )
        if v.compare_url:
            url = escape(v.compare_url, quote=True)
            text = escape(v.compare_url)
            facts.append(f'<li>commits in between: <a href="{url}">{text}</a></li>')
        if v.bisect:
            facts.append(f"<li>bisect: {escape(v.bisect)}</li>")
    rows = [
        [_run_link(r.run_id), escape(r.event), escape(when(r.created_at)), _status(r.status)]
        for r in v.runs
    ]
    body = [
        f"<section><h2><code>{escape(v.id)}</code></h2><ul>",
        *facts,
        "</ul></section>",
        "<section><h2>Outcomes per run (newest first)</h2>",
        _html_table(["run", "event", "planned (UTC)", "outcome"], rows),
        "</section>",
    ]
    return _page(f"Variant {v.id}", body)


def render_flaky(variants: Sequence[VariantPage]) -> str:
    """The variants History marks flaky."""
    rows = [
        [
            _variant_link(v.id),
            escape(" ".join(v.recent) or "-"),
            escape(duration(v.mean_duration_s)),
        ]
        for v in variants
    ]
    body = [
        "<section>",
        _html_table(["variant", "recent outcomes (oldest first)", "mean duration"], rows)
        if rows
        else "<p>No variant is marked flaky.</p>",
        "</section>",
    ]
    return _page(f"Flaky variants ({len(rows)})", body)


def render_quality(runs: Sequence[RunRow]) -> str:
    """Selection quality per run: holdout, its misses, false green; the false-green rate."""
    measured = [r for r in runs if r.false_green is not None]
    green = sum(1 for r in measured if r.false_green)
    rate = f"{green / len(measured):.1%}" if measured else "-"
    rows = [
        [
            _run_link(r.run_id),
            escape(r.event),
            escape(when(r.updated_at)),
            _number(r.selected),
            _number(r.holdout),
            _number(r.holdout_misses),
            "-" if r.miss_rate is None else f"{r.miss_rate:.1%}",
            "-" if r.false_green is None else ('<b class="hot">yes</b>' if r.false_green else "no"),
        ]
        for r in runs
    ]
    body = [
        '<section><div class="cards">',
        f'<div class="card {"bad" if green else "good"}"><b>{escape(rate)}</b>'
        f'<span class="muted">false-green rate ({green} of {len(measured)} measured runs)'
        "</span></div></div></section>",
        "<section><h2>Per run (newest first)</h2>",
        _html_table(
            [
                "run",
                "event",
                "updated (UTC)",
                "selected",
                "holdout",
                "holdout misses",
                "miss rate",
                "false green",
            ],
            rows,
            5,
        ),
        "</section>",
    ]
    return _page("Selection quality", body)
