"""Promotion readiness as people read it: a terminal table, Markdown, and a self-contained
HTML page (inline CSS, no scripts), all rendered from one `Readiness` (pure)."""

from __future__ import annotations

import datetime as dt

from markupsafe import Markup

from dashboard_export.pages import render
from dashboard_export.readiness import WINDOW_DAYS, Criterion, Readiness
from dashboard_export.report import _md, _md_table

TITLE = "Promotion readiness (L2 -> L3)"


def shown(value: float | None, unit: str) -> str:
    """A criterion's value or bound as read: a percentage, or a duration."""
    if value is None:
        return "n/a"
    if unit == "share":
        return f"{100 * value:.1f} %"
    if unit == "days":
        return f"{value:.1f} days"
    return duration(value)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 60:
        return f"{minutes:.1f} min"
    return f"{int(minutes // 60)} h {int(minutes % 60):02d} min"


def when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _bound(c: Criterion) -> str:
    return f"{c.comparison} {shown(c.bound, c.unit)}"


def _result(c: Criterion) -> str:
    return {"pass": "pass", "fail": "FAIL"}.get(c.status, "NOT ENOUGH DATA")


def _evidence(c: Criterion) -> str:
    """What the value rests on, and, below the evidence it needs, what is missing."""
    return f"not enough data: {c.missing} ({c.detail})" if c.missing else c.detail


def _window(r: Readiness) -> str:
    return (
        f"{r.days:g} days, {when(r.start)} to {when(r.end)}: {r.runs} runs "
        f"({r.older} older runs left out); History covers {r.covered_days:.1f} of the "
        f"{WINDOW_DAYS:g} days the relay judges"
    )


def _not_counted(r: Readiness) -> list[str]:
    lines = []
    if r.verdicts.get("cancelled"):
        lines.append(
            f"{r.verdicts['cancelled']} cancelled (interrupted) runs, not counted: "
            + ", ".join(r.not_counted["cancelled"])
        )
    if r.verdicts.get("running"):
        lines.append(
            f"{r.verdicts['running']} unfinished runs, not counted in the pass rate: "
            + ", ".join(r.not_counted["running"])
        )
    if r.not_counted.get("tried"):
        lines.append(
            "runs of a patch tried with --diff, no CI jobs, not counted: "
            + ", ".join(r.not_counted["tried"])
        )
    return lines


def _worst(c: Criterion) -> str:
    return ", ".join(
        f"{w.run_id} ({w.note if w.value is None else duration(w.value)})" for w in c.worst
    )


def render_text(r: Readiness) -> str:
    """The table `spyre-ci readiness` prints."""
    row = "{:<32} {:>12} {:>12} {:>15}  {}"
    out = [
        f"{TITLE}: {r.verdict}",
        f"window: {_window(r)}",
        "",
        row.format("criterion", "value", "needed", "result", "evidence"),
    ]
    for c in r.criteria:
        out.append(row.format(c.title, shown(c.value, c.unit), _bound(c), _result(c), _evidence(c)))
    out.append("")
    for c in r.criteria:
        if c.worst:
            out.append(f"{c.title}, worst: {_worst(c)}")
    out += _not_counted(r)
    return "\n".join(out).rstrip() + "\n"


def render_markdown(r: Readiness) -> str:
    out = [
        f"# {TITLE}: {r.verdict}",
        "",
        f"Window: {_md(_window(r))}.",
        *_md_table(
            ["criterion", "value", "needed", "result", "runs", "evidence"],
            [
                [
                    c.title,
                    shown(c.value, c.unit),
                    _bound(c),
                    "pass" if c.passed else f"**{_result(c)}**",
                    str(c.measured),
                    _md(_evidence(c)),
                ]
                for c in r.criteria
            ],
        ),
    ]
    for c in r.criteria:
        if c.against or c.worst:
            out += ["", f"## {c.title}", ""]
            if c.worst:
                out.append(f"- worst: {_md(_worst(c))}")
            if c.against:
                out.append(f"- counted against it ({c.against}): {', '.join(c.against_ids)}")
    extra = _not_counted(r)
    if extra:
        out += ["", "## Not counted", "", *(f"- {_md(line)}" for line in extra)]
    return "\n".join(out).rstrip() + "\n"


def render_html(r: Readiness) -> str:
    """A self-contained page (`templates/readiness.html`): what `spyre-ci serve` answers at
    /readiness."""
    rows = [
        [
            c.title,
            Markup('<span class="{}">{}</span>').format("" if c.passed else "hot", _result(c)),
            _evidence(c),
            shown(c.value, c.unit),
            _bound(c),
            str(c.measured),
        ]
        for c in r.criteria
    ]
    criteria = [
        {
            "title": c.title,
            "passed": c.passed,
            "value": shown(c.value, c.unit),
            "bound": _bound(c),
            "worst": [
                (Markup("<code>{}</code>").format(w.run_id), w.note, duration(w.value))
                for w in c.worst
            ],
            "against": c.against,
            "against_ids": c.against_ids,
            "more": c.against - len(c.against_ids),
        }
        for c in r.criteria
    ]
    return render(
        "readiness.html",
        title=TITLE,
        r=r,
        window=_window(r),
        criteria=criteria,
        rows=rows,
        not_counted=_not_counted(r),
    )
