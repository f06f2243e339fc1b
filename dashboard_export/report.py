"""The per-run report people read: a self-contained HTML page and a Markdown summary.

Long on purpose: both renderings (Markdown and the HTML page's values; the markup is in
`templates/report.html`) are views of the same `Summary`, and keeping them side by side keeps
their sections, wording and limits the same.

Both render one `Summary`, computed once from the RunRecord: what changed, what the
selector concluded, results by suite, new failures with their messages, flaky, holdout
misses, timings, and for upgrade runs the regression / fix table.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from contracts.change import ChangeNote
from contracts.classification import Classification
from contracts.forensics import FailureForensics
from contracts.tested import Tested
from dashboard_export.crcr import ci_metrics, result_counts
from dashboard_export.model import (
    DiffCategory,
    DiffRow,
    PlanSummary,
    RunRecord,
    VariantResult,
)
from dashboard_export.pages import render
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
        change = record.environment.change
        paths = [f.path for f in change.files if f.path] if change is not None else []
        if paths:  # the diff named them (a --diff, GitHub's compare)
            shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
            return f"{len(paths)} changed file{'s' if len(paths) != 1 else ''}: {shown}"
        return "no changed-file list in the event" + (
            "" if event.files_complete else " (the selector had to fetch or assume it)"
        )
    note = "" if event.files_complete else " (incomplete list)"
    names = [f.path for f in event.files[:5]]
    more = f" and {n - 5} more" if n > 5 else ""
    return f"{n} changed file{'s' if n != 1 else ''}{note}: {', '.join(names)}{more}"


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


_TESTED_LEADS = {
    Tested.TESTED: "Tested: the change ran on the torch under test.",
    Tested.PARTIAL: "Tested IN PART: not all of the change was in the torch under test.",
    Tested.NOT_TESTED: "NOT TESTED: the torch under test does not hold the change.",
}


def tested_lines(record: RunRecord) -> list[str]:
    """What the run tested of the change, for the top of every report: the verdict on it,
    then the applied and the not-applied files (empty for a record without it)."""
    env = record.environment
    if env.tested is None:
        return []
    lines = [_TESTED_LEADS[env.tested]]
    lines += [f"- {note}" for note in env.notes]
    change = env.change or ChangeNote()
    for files, label in ((change.not_applied, "not applied"), (change.applied, "applied")):
        lines += [f"- {label}: `{f.path}` ({f.why})" for f in files[:20]]
    return lines


def _diff_groups(record: RunRecord) -> list[tuple[DiffCategory, list[DiffRow]]]:
    if record.upgrade is None:
        return []
    return list(record.upgrade.by_category().items())


# ---------------------------------------------------------------- Markdown


def render_markdown(
    record: RunRecord, forensics: Mapping[str, FailureForensics] | None = None
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
    if record.gaps and not record.infrastructure:
        out += [
            "## Results incomplete: not a pass",
            "",
            "The outcomes and their per-test evidence disagree, so the run is not green:",
            "",
            *(f"- {_md(gap)}" for gap in record.gaps),
            "",
        ]
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
            + (f", read from run {result.base_read}" if result.base_read else "")
            + ")",
            "",
            *_md_forensics(
                (record.forensics if forensics is None else forensics).get(result.id),
                result.base_status,
            ),
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


def forensics_line(entry: FailureForensics | None, base_status: str | None = None) -> str:
    """The line `last good X / first bad Y (compare: URL); triage: class (category)`, with
    `; bisect: <culprit or window> (<confidence> confidence)` once `spyre-ci bisect` answered
    it, or "" without an entry. `base_status`: the failure's outcome without the change in
    this run (A/B): when it passed there, that is its last good, whatever History knows."""
    if entry is None:
        return ""
    good = entry.last_good_sha or (
        "the torch without the change (this run's A/B)"
        if base_status in ("passed", "xfailed", "skipped")
        else "unknown (History never saw it pass upstream)"
    )
    line = f"last good {good} / first bad {entry.first_bad_sha or 'unknown'}"
    if entry.compare_url:
        line += f" (compare: {entry.compare_url})"
    if entry.triage is not None and entry.triage.failure_class:
        line += f"; triage: {entry.triage.failure_class} ({entry.triage.category})"
    if entry.bisect is not None and entry.bisect.summary:
        line += f"; bisect: {entry.bisect.line}"
    return line


def _md_forensics(entry: FailureForensics | None, base_status: str | None = None) -> list[str]:
    line = forensics_line(entry, base_status)
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


def render_html(record: RunRecord, forensics: Mapping[str, FailureForensics] | None = None) -> str:
    """A self-contained page (inline CSS, no scripts, no external assets; the markup in
    `templates/report.html`); `forensics` as for `render_markdown`."""
    s = summarize(record)
    c = s.statuses
    plan = record.plan
    found = record.forensics if forensics is None else forensics
    event = record.event
    total = sum(c.values()) or 1
    return render(
        "report.html",
        record=record,
        title=_title(record),
        verdict=record.effective_conclusion,
        env_line=_env_line(record),
        tested=_tested_view(record),
        cards=[
            ("variants", sum(c.values()), ""),
            ("passed", c["passed"], "good"),
            ("new failures", len(s.new), "bad" if s.new else "good"),
            ("pre-existing", len(s.pre_existing), "warn" if s.pre_existing else ""),
            ("flaky", len(s.flaky), "warn" if s.flaky else ""),
            *((str(st), c[st], "") for st in (Status.XFAILED, Status.XPASSED) if c[st]),
            ("skipped", c["skipped"], ""),
        ],
        bar=[
            (str(k), f"{100 * c[k] / total:.2f}", colour, c[k])
            for k, colour in _BAR_COLOURS.items()
            if c[k]
        ],
        change_line=_change_line(record),
        files_line=_files_line(record),
        files=event.files[:FILES_SHOWN],
        more_files=max(0, len(event.files) - FILES_SHOWN),
        commits=[m.strip().splitlines()[0] for m in event.commit_messages[:5] if m.strip()],
        plan=plan,
        relatives_text=_relatives_text(plan) if plan else "",
        holdout_text=_holdout_text(plan) if plan else "",
        reasons=reason_rows(plan) if plan else [],
        metrics=[(k, f"{v:.4g}") for k, v in sorted(plan.metrics.items())] if plan else [],
        misses_title=_misses_title(plan),
        sample_name=_sample_name(plan),
        **_suites_view(s),
        new=s.new,
        new_shown=[_failure_view(r, found.get(r.id)) for r in s.new[:NEW_SHOWN]],
        more_new=max(0, len(s.new) - NEW_SHOWN),
        pre_existing=[
            (_code(r.id), str(r.status), _first_line(r.outcome.message)) for r in s.pre_existing
        ],
        flaky=[
            (
                Markup('<code>{}</code> <span class="tag flaky">flaky</span>').format(r.id),
                str(r.status),
                _first_line(r.outcome.message),
            )
            for r in s.flaky
        ],
        queued=_seconds(s.metrics["queue_time"]),
        ran=_seconds(s.metrics["execution_time"]),
        test_time=_seconds(s.test_seconds),
        slowest=[(_code(r.id), str(r.status), _seconds(r.outcome.duration_s)) for r in s.slowest],
        upgrade=_upgrade_view(record),
    )


def _code(text: str) -> Markup:
    return Markup("<code>{}</code>").format(text)


_TESTED_KINDS = {Tested.TESTED: "good", Tested.PARTIAL: "warn", Tested.NOT_TESTED: "bad"}


def _tested_view(record: RunRecord) -> dict[str, Any] | None:
    tested, lines = record.environment.tested, tested_lines(record)
    if tested is None or not lines:
        return None
    return {
        "kind": _TESTED_KINDS[tested],
        "lead": lines[0],
        "lines": [line[2:].replace("`", "") for line in lines[1:]],
    }


def _suites_view(s: Summary) -> dict[str, Any]:
    shown = [st for st in STATUS_COLUMNS if any(line.counts[str(st)] for line in s.suites)]
    rows = []
    for line in s.suites:
        cells: list[Any] = [line.suite]
        for st in shown:
            n = line.counts[str(st)]
            cells.append(
                Markup('<span class="hot">{}</span>').format(n) if st.is_failure and n else n
            )
        rows.append([*cells, line.total, _seconds(line.seconds)])
    return {
        "suite_header": ["suite", *(str(st) for st in shown), "total", "time"],
        "suite_rows": rows,
        "suite_numeric": len(shown) + 2,
    }


def _failure_view(result: VariantResult, entry: FailureForensics | None) -> dict[str, Any]:
    return {
        "id": result.id,
        "holdout": result.holdout,
        "status": str(result.status),
        "seconds": _seconds(result.outcome.duration_s),
        "base_status": result.base_status,
        "forensics": forensics_line(entry, result.base_status),
        "compare_url": (entry.compare_url if entry else None) or "",
        "message": _short(result.outcome.message) or "(no message)",
    }


def _upgrade_view(record: RunRecord) -> dict[str, Any] | None:
    if record.upgrade is None:
        return None
    groups = _diff_groups(record)
    return {
        "from_version": record.upgrade.from_version,
        "to_version": record.upgrade.to_version,
        "categories": [
            (Markup('<span class="tag {0}">{0}</span>').format(str(cat)), len(rows))
            for cat, rows in groups
        ],
        "groups": [
            (
                str(category).capitalize(),
                [
                    (_code(r.id), str(r.before or "-"), str(r.after or "-"), _first_line(r.message))
                    for r in rows
                ],
            )
            for category, rows in groups
            if rows and category is not DiffCategory.UNCHANGED_FAILING
        ],
    }


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
