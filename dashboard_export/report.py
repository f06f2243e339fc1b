"""The per-run report people read: a self-contained HTML page and a Markdown summary.

Both render one `Summary`, computed once from the RunRecord: what changed, what the
selector concluded, results by suite, new failures with their messages, flaky, holdout
misses, timings, and for upgrade runs the regression / fix table.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from contracts.classification import Classification
from dashboard_export.crcr import ci_metrics, result_counts
from dashboard_export.model import (
    DiffCategory,
    DiffRow,
    PlanSummary,
    RunRecord,
    VariantResult,
)
from suites.model import Status

FILES_SHOWN = 30  # changed files listed before "and N more"
SLOWEST_SHOWN = 10
MESSAGE_SHOWN = 1500  # characters of a failure message in the report
NEW_SHOWN = 200  # new failures shown with their messages; the rest are counted
# Removed ids are not results of the run (the pipeline keeps them out; the "not run
# because" table counts them): no column of zeros for them.
STATUS_COLUMNS = tuple(s for s in Status if s is not Status.REMOVED)


@dataclass(frozen=True)
class SuiteLine:
    suite: str
    counts: dict[str, int]
    total: int
    seconds: float


@dataclass(frozen=True)
class Summary:
    """Everything the report shows, computed from the record (pure)."""

    record: RunRecord
    counts: dict[str, int]  # as the CRCR callback counts (an xfail is "skipped" there)
    suites: tuple[SuiteLine, ...]
    new: tuple[VariantResult, ...]
    pre_existing: tuple[VariantResult, ...]
    flaky: tuple[VariantResult, ...]
    slowest: tuple[VariantResult, ...]
    test_seconds: float
    metrics: dict[str, float | None]

    @property
    def statuses(self) -> dict[str, int]:
        """Variants per status over all suites: the "Results by suite" table's totals."""
        return {str(st): sum(line.counts[str(st)] for line in self.suites) for st in STATUS_COLUMNS}

    def headline(self) -> str:
        """The counts of the report's first line, status by status as the table has them."""
        statuses = self.statuses
        shown = [
            f"{n} {status}"
            for status, n in statuses.items()
            if n or status in (Status.PASSED, Status.FAILED)
        ]
        failing = sum(n for status, n in statuses.items() if Status(status).is_failure)
        return (
            f"{sum(statuses.values())} variants: {', '.join(shown)}; "
            f"{failing} failing ({len(self.new)} new, {len(self.pre_existing)} pre-existing); "
            f"{len(self.flaky)} flaky"
        )


def summarize(record: RunRecord) -> Summary:
    """Group a run's results the way the report presents them."""
    by_suite: dict[str, list[VariantResult]] = defaultdict(list)
    for result in record.results:
        by_suite[result.suite].append(result)
    suites = []
    for suite in sorted(by_suite):
        counts = {str(s): 0 for s in Status}
        for result in by_suite[suite]:
            counts[str(result.status)] += 1
        seconds = sum(r.outcome.duration_s for r in by_suite[suite])
        suites.append(SuiteLine(suite, counts, len(by_suite[suite]), seconds))
    failures = record.failures
    return Summary(
        record=record,
        counts=result_counts(record),
        suites=tuple(suites),
        new=record.new_failures,
        pre_existing=tuple(r for r in failures if r.classification is Classification.PRE_EXISTING),
        # Flaky: failed then passed on rerun; Verify may record it on a passing outcome too.
        flaky=tuple(r for r in record.results if r.classification is Classification.FLAKY),
        slowest=tuple(sorted(record.results, key=lambda r: -r.outcome.duration_s)[:SLOWEST_SHOWN]),
        test_seconds=sum(r.outcome.duration_s for r in record.results),
        metrics=ci_metrics(record),
    )


def _short(message: str) -> str:
    if len(message) <= MESSAGE_SHOWN:
        return message
    return f"{message[:MESSAGE_SHOWN]}... [{len(message) - MESSAGE_SHOWN} more characters]"


def _title(record: RunRecord) -> str:
    return f"{record.downstream_repo} / {record.workflow} / {record.job}"


def _change_line(record: RunRecord) -> str:
    event = record.event
    parts = [f"{event.kind} on {event.repo}", f"head {event.head_sha[:12] or '?'}"]
    if event.base_sha:
        parts.append(f"base {event.base_sha[:12]}")
    if event.pr_number:
        parts.append(f"PR #{event.pr_number}")
    parts.append(f"delivery {event.delivery_id}")
    return ", ".join(parts)


def _files_line(record: RunRecord) -> str:
    event = record.event
    n = len(event.files)
    if not n:
        return "no changed-file list in the event" + (
            "" if event.files_complete else " (the selector had to fetch or assume it)"
        )
    note = "" if event.files_complete else " (incomplete list)"
    return f"{n} changed file{'s' if n != 1 else ''}{note}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def _env_line(record: RunRecord) -> str:
    env = record.environment
    source = f", {env.torch_source}" if env.torch_source else ""
    return (
        f"torch {env.torch_version} ({env.torch_git_version[:12]}{source}), "
        f"{env.backend} {env.backend_version} on {env.device}"
    )


def _tested_html(record: RunRecord) -> list[str]:
    lines = tested_lines(record)
    if not lines:
        return []
    kind = {"tested": "good", "partial": "warn", "not_tested": "bad"}[record.environment.tested]
    items = "".join(f"<li>{escape(line[2:].replace('`', ''))}</li>" for line in lines[1:])
    return [f'<div class="tested {kind}"><strong>{escape(lines[0])}</strong><ul>{items}</ul></div>']


def tested_lines(record: RunRecord) -> list[str]:
    """What the run tested of the change, for the top of every report: the verdict on it,
    then the applied and the not-applied files (empty for a record without it)."""
    env = record.environment
    if not env.tested:
        return []
    lead = {
        "tested": "Tested: the change ran on the torch under test.",
        "partial": "Tested IN PART: not all of the change was in the torch under test.",
        "not_tested": "NOT TESTED: the torch under test does not hold the change.",
    }[env.tested]
    lines = [lead]
    lines += [f"- {note}" for note in env.notes]
    for group, label in (("not_applied", "not applied"), ("applied", "applied")):
        for entry in list(env.change.get(group) or ())[:20]:
            lines.append(f"- {label}: `{entry.get('path', '')}` ({entry.get('why', '')})")
    return lines


def _diff_groups(record: RunRecord) -> list[tuple[DiffCategory, list[DiffRow]]]:
    if record.upgrade is None:
        return []
    return list(record.upgrade.by_category().items())


# ---------------------------------------------------------------- Markdown


def render_markdown(
    record: RunRecord, forensics: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """A GitHub-flavoured Markdown summary (fits a job summary or a PR comment).

    `forensics`: per new failure id, its window and triage (`workflows.run.forensics`,
    `dashboard_export.triage`), by default the record's (`RunRecord.forensics`): shown under
    the failure as "last good / first bad"."""
    s = summarize(record)
    plan = record.plan
    out: list[str] = []
    verdict = record.effective_conclusion
    out.append(f"# {_title(record)}: {verdict}")
    out.append("")
    out.append(
        f"Run {record.run_id} attempt {record.attempt}"
        + (f" ([log]({record.run_url}))" if record.run_url else "")
        + f". {_env_line(record)}."
    )
    out.append("")
    tested = tested_lines(record)
    if tested:
        out += [_md(line) for line in tested] + [""]
    if record.infrastructure:
        out += [
            "## Infrastructure error: the tests could not run",
            "",
            "These results say nothing about the change: the test processes failed before "
            "their first test, in a fresh process too. Nothing was learned from this run.",
            "",
        ]
        for cause in record.infrastructure:
            out += [_fence(cause), ""]
    if record.held_back:
        out += [
            f"**Held back from History**: {_md(record.held_back)}. Check the failures, "
            f"then `spyre-ci history confirm {record.run_id}` (or `spyre-ci history forget "
            f"{record.run_id}`).",
            "",
        ]
    total, _, counts = s.headline().partition(": ")
    out.append(f"**{total}**: {counts}.")
    out += ["", "## What changed", "", f"- {_change_line(record)}", f"- {_files_line(record)}"]
    for changed in record.event.files[:FILES_SHOWN]:
        out.append(f"  - `{changed.path}` ({changed.status})")
    if len(record.event.files) > FILES_SHOWN:
        out.append(f"  - and {len(record.event.files) - FILES_SHOWN} more")
    for message in record.event.commit_messages[:5]:
        first = message.strip().splitlines()[0] if message.strip() else ""
        if first:
            out.append(f"- commit: {_md(first)}")
    out += ["", "## What the selector concluded", ""]
    if plan is None:
        out.append("No plan recorded (every requested variant ran).")
    else:
        out.append(
            f"Selected {plan.selected} of {plan.inventory or '?'} variants"
            + _relatives_text(plan)
            + (
                f"; **fell back to a full run**: {_md(plan.fallback_reason)}"
                if plan.fallback_reason
                else ""
            )
            + f"; {_holdout_text(plan)}."
        )
        out += _md_table(
            ["top reason", "variants"], [[_md(r), str(n)] for r, n in reason_rows(plan)]
        )
        out += _md_table(
            ["not run because", "variants"], [[_md(r), str(n)] for r, n in plan.skipped.items()]
        )
        if plan.metrics:
            out += _md_table(
                ["metric", "value"], [[k, f"{v:.4g}"] for k, v in sorted(plan.metrics.items())]
            )
    out += ["", "## Results by suite", ""]
    out += _md_table(
        ["suite", *(str(st) for st in STATUS_COLUMNS), "total", "time"],
        [
            [
                line.suite,
                *(str(line.counts[str(st)]) for st in STATUS_COLUMNS),
                str(line.total),
                _seconds(line.seconds),
            ]
            for line in s.suites
        ],
    )
    out += ["", f"## New failures ({len(s.new)})", ""]
    if not s.new:
        out.append("None.")
    for result in s.new[:NEW_SHOWN]:
        message = _short(result.outcome.message) or "(no message)"
        fence = _fence(message)
        out += [
            f"### `{result.id}` ({result.status}, {_seconds(result.outcome.duration_s)}"
            + (f"; without the change: {result.base_status}" if result.base_status else "")
            + ")",
            "",
            *_md_forensics((record.forensics if forensics is None else forensics).get(result.id)),
            fence,
            message,
            fence,
            "",
        ]
    if len(s.new) > NEW_SHOWN:
        out.append(f"... and {len(s.new) - NEW_SHOWN} more (see hud/failed_test_runs).")
    out += ["", f"## Pre-existing failures ({len(s.pre_existing)})", ""]
    out += [
        f"- `{r.id}` ({r.status}): {_md(_first_line(r.outcome.message))}" for r in s.pre_existing
    ]
    out += ["", f"## Flaky ({len(s.flaky)})", ""]
    out += [
        f"- `{r.id}` (final: {r.status}) {_md(_first_line(r.outcome.message))}".rstrip()
        for r in s.flaky
    ]
    misses = plan.holdout_misses if plan else ()
    out += ["", f"## {_misses_title(plan)} ({len(misses)})", ""]
    if misses:
        out.append(f"Failures found only by {_sample_name(plan)}: the selector missed them.")
        out += [f"- `{vid}`" for vid in misses]
    else:
        out.append("None.")
    out += ["", "## Timings", ""]
    out.append(
        f"- queued {_seconds(s.metrics['queue_time'])}, ran {_seconds(s.metrics['execution_time'])}"
        f", test time {_seconds(s.test_seconds)}"
    )
    out += [f"- slowest: `{r.id}` {_seconds(r.outcome.duration_s)}" for r in s.slowest[:5]]
    if record.upgrade is not None:
        up = record.upgrade
        out += ["", f"## Upgrade {up.from_version} -> {up.to_version}", ""]
        out += _md_table(
            ["category", "variants"],
            [[str(cat), str(len(rows))] for cat, rows in _diff_groups(record)],
        )
        for category, rows in _diff_groups(record):
            if rows and category is not DiffCategory.UNCHANGED_FAILING:
                out += ["", f"### {category}", ""]
                out += _md_table(
                    ["variant", "before", "after", "message"],
                    [
                        [
                            f"`{r.id}`",
                            str(r.before or "-"),
                            str(r.after or "-"),
                            _md(_first_line(r.message)),
                        ]
                        for r in rows
                    ],
                )
    return "\n".join(out).rstrip() + "\n"


def forensics_line(entry: Mapping[str, Any] | None) -> str:
    """The line `last good X / first bad Y (compare: URL); triage: class (category)`, with
    `; bisect: <culprit or window> (<confidence> confidence)` once `spyre-ci bisect` answered
    it, or "" without an entry."""
    if not entry:
        return ""
    good = entry.get("last_good_sha") or "unknown (never seen passing)"
    line = f"last good {good} / first bad {entry.get('first_bad_sha') or 'unknown'}"
    if entry.get("compare_url"):
        line += f" (compare: {entry['compare_url']})"
    if entry.get("class"):
        line += f"; triage: {entry['class']} ({entry.get('category')})"
    bisect = entry.get("bisect")
    if isinstance(bisect, Mapping) and bisect.get("summary"):
        line += f"; bisect: {bisect['summary']} ({bisect.get('confidence')} confidence)"
    return line


def _md_forensics(entry: Mapping[str, Any] | None) -> list[str]:
    line = forensics_line(entry)
    return [_md(line), ""] if line else []


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    if not rows:
        return []
    cells = [[c.replace("|", "\\|").replace("\n", " ") for c in row] for row in rows]
    return [
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in cells),
        "",
    ]


def _md(text: str) -> str:
    """User text outside code: no raw HTML reaches the rendered Markdown."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside `text`."""
    longest = max((len(run) for run in text.split("\n") for run in _backtick_runs(run)), default=0)
    return "`" * max(3, longest + 1)


def _backtick_runs(line: str) -> list[str]:
    runs, current = [], ""
    for char in line:
        if char == "`":
            current += char
        elif current:
            runs.append(current)
            current = ""
    return [*runs, current] if current else runs


def _first_line(message: str) -> str:
    stripped = message.strip()
    return stripped.splitlines()[0][:200] if stripped else ""


# ---------------------------------------------------------------- HTML

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
  color:#1f2328;background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:24px}
header,section{background:#fff;border:1px solid #d0d7de;border-radius:8px;margin-bottom:16px}
header{padding:16px 20px}section{padding:14px 20px}
section.infra{border-color:#cf222e;border-width:2px}
h1{font-size:22px;margin:0 0 6px}
h2{font-size:17px;margin:0 0 10px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;font-weight:600;color:#fff;
  font-size:13px;vertical-align:middle}
.success{background:#1a7f37}.failure{background:#cf222e}.cancelled,.timed_out{background:#6e7781}
.neutral{background:#9a6700}
.tested{margin-top:10px;padding:6px 10px;border-left:4px solid #d0d7de}
.tested.good{border-color:#1a7f37}.tested.warn{border-color:#9a6700}.tested.bad{border-color:#cf222e}
.tested ul{margin:4px 0 0;padding-left:18px}
.muted{color:#57606a}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-top:12px}
.card{flex:1;min-width:110px;border:1px solid #d0d7de;border-radius:6px;padding:8px 12px}
.card b{display:block;font-size:22px}
.card.bad b{color:#cf222e}.card.good b{color:#1a7f37}.card.warn b{color:#9a6700}
table{border-collapse:collapse;width:100%;margin:6px 0 10px}
th,td{border-bottom:1px solid #d8dee4;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.zero{color:#afb8c1}
.hot{color:#cf222e;font-weight:600}
table.narrow{width:auto;min-width:50%}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f6f8fa;
  padding:1px 4px;border-radius:4px;word-break:break-all}
pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#fff8f8;
  border:1px solid #ffcecb;border-radius:6px;padding:8px 10px;white-space:pre-wrap;
  word-break:break-word;margin:4px 0 12px;max-height:320px;overflow:auto}
.failure-item h3{font-size:14px;margin:12px 0 2px}
.tag{font-size:12px;border-radius:10px;padding:1px 8px;background:#eaeef2;color:#424a53}
.tag.new{background:#ffebe9;color:#a40e26}.tag.flaky{background:#fff8c5;color:#7d4e00}
.tag.regressed{background:#ffebe9;color:#a40e26}.tag.fixed{background:#dafbe1;color:#116329}
ul{margin:4px 0;padding-left:22px}
.bar{display:flex;height:10px;border-radius:5px;overflow:hidden;margin-top:10px;background:#eaeef2}
.bar span{display:block}
"""

_BAR_COLOURS = {
    Status.PASSED: "#2da44e",
    Status.XPASSED: "#8fd19e",
    Status.FAILED: "#cf222e",
    Status.ERROR: "#a40e26",
    Status.TIMEOUT: "#bc4c00",
    Status.CRASHED: "#82071e",
    Status.XFAILED: "#d4a72c",
    Status.SKIPPED: "#afb8c1",
}


def render_html(record: RunRecord, forensics: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """A self-contained page (inline CSS, no scripts, no external assets); `forensics` as
    for `render_markdown`."""
    s = summarize(record)
    e = escape
    verdict = record.effective_conclusion
    c = s.statuses
    parts: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(_title(record))}: {e(verdict)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        "<header>",
        f'<h1>{e(_title(record))} <span class="badge {e(verdict)}">{e(verdict)}</span></h1>',
        f'<div class="muted">run {e(record.run_id)} attempt {record.attempt}'
        + (f' · <a href="{e(record.run_url)}">run log</a>' if record.run_url else "")
        + f" · {e(_env_line(record))}</div>",
        *_tested_html(record),
        '<div class="cards">',
        _card("variants", sum(c.values()), ""),
        _card("passed", c["passed"], "good"),
        _card("new failures", len(s.new), "bad" if s.new else "good"),
        _card("pre-existing", len(s.pre_existing), "warn" if s.pre_existing else ""),
        _card("flaky", len(s.flaky), "warn" if s.flaky else ""),
        *(_card(str(st), c[st], "") for st in (Status.XFAILED, Status.XPASSED) if c[st]),
        _card("skipped", c["skipped"], ""),
        "</div>",
        _bar(c),
        "</header>",
    ]
    if record.infrastructure:
        parts += [
            '<section class="infra"><h2>Infrastructure error: the tests could not run</h2>',
            "<p>These results say nothing about the change: the test processes failed "
            "before their first test, in a fresh process too. Nothing was learned from "
            "this run.</p>",
        ]
        parts += [f"<pre>{e(cause)}</pre>" for cause in record.infrastructure]
        parts.append("</section>")
    if record.held_back:
        parts.append(
            f'<section class="infra"><p><b>Held back from History</b>: '
            f"{e(record.held_back)}. Check the failures, then <code>spyre-ci history "
            f"confirm {e(record.run_id)}</code> (or <code>spyre-ci history forget "
            f"{e(record.run_id)}</code>).</p></section>"
        )
    parts += _html_change(record)
    parts += _html_plan(record)
    parts += _html_suites(s)
    parts += _html_failures(s, record.forensics if forensics is None else forensics)
    parts += _html_timings(s)
    parts += _html_upgrade(record)
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def _card(label: str, value: int, kind: str) -> str:
    label_html = f'<span class="muted">{escape(label)}</span>'
    return f'<div class="card {kind}"><b>{value}</b>{label_html}</div>'


def _bar(counts: dict[str, int]) -> str:
    total = sum(counts.values()) or 1
    spans = "".join(
        f'<span style="width:{100 * counts[k] / total:.2f}%;background:{colour}" '
        f'title="{k}: {counts[k]}"></span>'
        for k, colour in _BAR_COLOURS.items()
        if counts[k]
    )
    return f'<div class="bar">{spans}</div>'


def _html_table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric: int = 0) -> str:
    """Rows of already-escaped cells; the last `numeric` columns are right-aligned numbers."""
    if not rows:
        return '<p class="muted">None.</p>'
    first_num = len(header) - numeric
    head = "".join(
        f'<th class="n">{escape(h)}</th>' if i >= first_num else f"<th>{escape(h)}</th>"
        for i, h in enumerate(header)
    )
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            if i >= first_num:
                cls = "n zero" if str(cell) in ("0", "0 ms") else "n"
                cells.append(f'<td class="{cls}">{cell}</td>')
            else:
                cells.append(f"<td>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    narrow = ' class="narrow"' if len(header) <= 2 else ""
    return f"<table{narrow}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _html_change(record: RunRecord) -> list[str]:
    event = record.event
    out = [
        "<section><h2>What changed</h2>",
        f"<p>{escape(_change_line(record))}</p>",
        f"<p>{escape(_files_line(record))}</p>",
    ]
    if event.files:
        out.append("<ul>")
        for changed in event.files[:FILES_SHOWN]:
            out.append(
                f"<li><code>{escape(changed.path)}</code> "
                f'<span class="muted">{escape(changed.status)}</span></li>'
            )
        if len(event.files) > FILES_SHOWN:
            out.append(f"<li>and {len(event.files) - FILES_SHOWN} more</li>")
        out.append("</ul>")
    messages = [m.strip().splitlines()[0] for m in event.commit_messages[:5] if m.strip()]
    if messages:
        out.append("<p>Commits:</p><ul>")
        out += [f"<li>{escape(m)}</li>" for m in messages]
        out.append("</ul>")
    out.append("</section>")
    return out


# A first reason of this kind is no evidence about the variant itself: it only shares an op
# family with a touched op (`linalg.matrix_norm` for a change to `normalize`).
FAMILY_ONLY = "op_match: same op family "
RELATIVES = "relatives only, no direct evidence: "


def reason_rows(plan: PlanSummary) -> list[tuple[str, int]]:
    """The reasons table: direct evidence first, then the picks that are only relatives of a
    touched op by family, said to be so (a budget cuts them first: they score lower)."""
    direct = [(r, n) for r, n in plan.top_reasons if not r.startswith(FAMILY_ONLY)]
    family = [(RELATIVES + r, n) for r, n in plan.top_reasons if r.startswith(FAMILY_ONLY)]
    return direct + family


def _relatives_text(plan: PlanSummary) -> str:
    relatives = sum(n for r, n in plan.top_reasons if r.startswith(FAMILY_ONLY))
    if not relatives or plan.fallback_reason:
        return ""
    return (
        f" ({plan.selected - relatives} on direct evidence; {relatives} only as relatives in a "
        f"touched op's family, ranked after them)"
    )


def _holdout_text(plan: PlanSummary) -> str:
    if plan.canaries:
        return (
            f"canaries {plan.canaries} (one per op) and holdout sample "
            f"{plan.holdout - plan.canaries}"
        )
    m = plan.metrics
    if "missed_upper" not in m:
        return f"holdout sample {plan.holdout}"
    # A bound, not a point: upper bounds round up, lower bounds down. Said as what it is,
    # a limit a sample of this size can set, so that a green run's bound alarms nobody.
    unselected = int(m.get("eligible", 0) - m.get("selected", 0))
    upper = math.ceil(m["missed_upper"] - 1e-9)
    share = f"{100 * upper / unselected:.1f} %" if unselected else "0 %"
    misses = len(plan.holdout_misses)
    found = (
        f"it found {misses} new failure{'s' if misses != 1 else ''} the selection missed"
        if misses
        else "none of it failed new"
    )
    text = (
        f"holdout sample {plan.holdout} (a random draw of the unselected): {found}; with 95 % "
        f"confidence no more than {upper} of the {unselected} unselected variants ({share}) "
        f"fail new, a limit set by the sample's size" + ("" if misses else ", not failures seen")
    )
    if "recall_lower" in m and m.get("selected_new_failures"):
        # Without a new failure in the selection there is no recall to bound.
        text += f", test recall at least {math.floor(1000 * m['recall_lower']) / 10:.1f} %"
    if "unselected_time_share" in m:
        text += f"; the sample is {100 * m['unselected_time_share']:.1f} % of the unselected time"
    return text


def _misses_title(plan: PlanSummary | None) -> str:
    return "Canary and holdout misses" if plan is not None and plan.canaries else "Holdout misses"


def _sample_name(plan: PlanSummary | None) -> str:
    if plan is not None and plan.canaries:
        return "the canaries or the random holdout sample"
    return "the random holdout sample"


def _html_plan(record: RunRecord) -> list[str]:
    plan = record.plan
    out = ["<section><h2>What the selector concluded</h2>"]
    if plan is None:
        out.append('<p class="muted">No plan recorded (every requested variant ran).</p>')
        return [*out, "</section>"]
    fallback = (
        f" <b>Fell back to a full run:</b> {escape(plan.fallback_reason)}."
        if plan.fallback_reason
        else ""
    )
    out.append(
        f"<p>Selected <b>{plan.selected}</b> of {plan.inventory or '?'} variants"
        f"{escape(_relatives_text(plan))};"
        f" {escape(_holdout_text(plan))}.{fallback}</p>"
    )
    out.append(
        _html_table(
            ["top reason", "variants"], [[escape(r), n] for r, n in reason_rows(plan)], numeric=1
        )
    )
    if plan.skipped:
        out.append(
            _html_table(
                ["not run because", "variants"],
                [[escape(r), n] for r, n in plan.skipped.items()],
                numeric=1,
            )
        )
    if plan.metrics:
        out.append(
            _html_table(
                ["metric", "value"],
                [[escape(k), f"{v:.4g}"] for k, v in sorted(plan.metrics.items())],
                numeric=1,
            )
        )
    misses = plan.holdout_misses
    out.append(f"<h2>{_misses_title(plan)} ({len(misses)})</h2>")
    if misses:
        out.append(
            f"<p>Failures found only by {escape(_sample_name(plan))}: "
            "the selector missed them.</p><ul>"
        )
        out += [f"<li><code>{escape(v)}</code></li>" for v in misses]
        out.append("</ul>")
    else:
        out.append(
            f'<p class="muted">None: {escape(_sample_name(plan))} found nothing the '
            "plan missed.</p>"
        )
    out.append("</section>")
    return out


def _html_suites(s: Summary) -> list[str]:
    shown = [st for st in STATUS_COLUMNS if any(line.counts[str(st)] for line in s.suites)]
    rows = []
    for line in s.suites:
        cells: list[Any] = [escape(line.suite)]
        for st in shown:
            n = line.counts[str(st)]
            cells.append(f'<span class="hot">{n}</span>' if st.is_failure and n else n)
        rows.append([*cells, line.total, _seconds(line.seconds)])
    table = _html_table(
        ["suite", *(str(st) for st in shown), "total", "time"], rows, numeric=len(shown) + 2
    )
    return ["<section><h2>Results by suite</h2>", table, "</section>"]


def _html_failures(s: Summary, forensics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out = [f"<section><h2>New failures ({len(s.new)})</h2>"]
    if not s.new:
        out.append('<p class="muted">None.</p>')
    for result in s.new[:NEW_SHOWN]:
        tag = '<span class="tag new">new</span>'
        if result.holdout:
            tag += ' <span class="tag">holdout</span>'
        out += [
            '<div class="failure-item">',
            f"<h3><code>{escape(result.id)}</code> {tag} "
            f'<span class="muted">{escape(str(result.status))}, '
            f"{_seconds(result.outcome.duration_s)}"
            + (f"; without the change: {escape(result.base_status)}" if result.base_status else "")
            + "</span></h3>",
            *_html_forensics(forensics.get(result.id)),
            f"<pre>{escape(_short(result.outcome.message) or '(no message)')}</pre>",
            "</div>",
        ]
    if len(s.new) > NEW_SHOWN:
        out.append(
            f'<p class="muted">... and {len(s.new) - NEW_SHOWN} more '
            "(see hud/failed_test_runs).</p>"
        )
    out.append(f"<h2>Pre-existing failures ({len(s.pre_existing)})</h2>")
    out.append(
        _html_table(
            ["variant", "status", "message"],
            [
                [
                    f"<code>{escape(r.id)}</code>",
                    escape(str(r.status)),
                    escape(_first_line(r.outcome.message)),
                ]
                for r in s.pre_existing
            ],
        )
    )
    out.append(f"<h2>Flaky ({len(s.flaky)})</h2>")
    out.append(
        _html_table(
            ["variant", "final status", "message"],
            [
                [
                    f'<code>{escape(r.id)}</code> <span class="tag flaky">flaky</span>',
                    escape(str(r.status)),
                    escape(_first_line(r.outcome.message)),
                ]
                for r in s.flaky
            ],
        )
    )
    out.append("</section>")
    return out


def _html_forensics(entry: Mapping[str, Any] | None) -> list[str]:
    line = forensics_line(entry)
    if not line:
        return []
    url = entry.get("compare_url") if entry else None
    link = f' <a href="{escape(url)}">compare</a>' if url else ""
    return [f'<p class="muted forensics">{escape(line)}{link}</p>']


def _html_timings(s: Summary) -> list[str]:
    m = s.metrics
    return [
        "<section><h2>Timings</h2>",
        f"<p>Queued {_seconds(m['queue_time'])} · ran {_seconds(m['execution_time'])} · "
        f"test time {_seconds(s.test_seconds)}</p>",
        _html_table(
            ["slowest variants", "status", "time"],
            [
                [
                    f"<code>{escape(r.id)}</code>",
                    escape(str(r.status)),
                    _seconds(r.outcome.duration_s),
                ]
                for r in s.slowest
            ],
            numeric=1,
        ),
        "</section>",
    ]


def _html_upgrade(record: RunRecord) -> list[str]:
    if record.upgrade is None:
        return []
    up = record.upgrade
    groups = _diff_groups(record)
    out = [
        f"<section><h2>Upgrade {escape(up.from_version)} → {escape(up.to_version)}</h2>",
        _html_table(
            ["category", "variants"],
            [
                [f'<span class="tag {cat}">{escape(str(cat))}</span>', len(rows)]
                for cat, rows in groups
            ],
            numeric=1,
        ),
    ]
    for category, rows in groups:
        if not rows or category is DiffCategory.UNCHANGED_FAILING:
            continue
        out.append(f"<h2>{escape(str(category)).capitalize()} ({len(rows)})</h2>")
        out.append(
            _html_table(
                ["variant", "before", "after", "message"],
                [
                    [
                        f"<code>{escape(r.id)}</code>",
                        escape(str(r.before or "-")),
                        escape(str(r.after or "-")),
                        escape(_first_line(r.message)),
                    ]
                    for r in rows
                ],
            )
        )
    out.append("</section>")
    return out
