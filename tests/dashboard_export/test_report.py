from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

from dashboard_export.model import RunRecord
from dashboard_export.report import render_html, render_markdown
from tests.testing.paths import REPO_ROOT


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Collect:
    collected = _Collect()
    collected.feed(page)
    return collected


def test_html_report_shows_what_a_reader_needs(record: RunRecord) -> None:
    page = render_html(record)
    parsed = _parse(page)
    text = " ".join(" ".join(parsed.text).split())
    assert "torch-spyre/torch-spyre / spyre-ci / variants (shard 1/1)" in text
    assert "failure" in text
    assert "aten/src/ATen/native/BinaryOps.cpp" in text  # what changed
    assert "touches aten::mul (BinaryOps.cpp)" in text  # top reason
    assert "Selected 9 of 1200 variants" in text
    assert "unrelated to the change" in text  # skipped per reason
    assert "New failures (3)" in text
    assert "AssertionError: mul gave 4, expected 5 (tolerance 1e-05)" in text  # message
    assert "worker exited with signal 11 (SIGSEGV)" in text
    assert "Pre-existing failures (1)" in text and "spyre device 0 did not answer" in text
    assert "Flaky (1)" in text and "sample::binary_ufunc::add::float16" in text
    assert "Holdout misses (1)" in text and "upstream::TestLinalg::test_det::float32" in text
    assert "Queued 15.0 s" in text and "ran 7.5 min" in text  # timings
    assert "Upgrade 2.13.0 → 2.14.0" in text and "Regressed (1)" in text and "Fixed (1)" in text
    # Results by suite: one row per suite with its counts.
    assert re.search(r"sample 3 1 1 1 1 1 8", text), text
    # Self-contained: inline CSS, no scripts, no external assets; user text is escaped.
    assert "<style>" in page
    assert not [t for t, _ in parsed.tags if t in ("script", "link", "img", "iframe")]
    assert "<script>" not in page and "half &lt;script&gt;" in page
    assert [a.get("href") for t, a in parsed.tags if t == "a"] == [record.run_url]


def test_markdown_report(record: RunRecord) -> None:
    text = render_markdown(record)
    assert text.startswith("# torch-spyre/torch-spyre / spyre-ci / variants (shard 1/1): failure")
    assert "| sample | 3 | 1 | 1 | 1 | 1 | 0 | 0 | 1 | 8 |" in text
    assert "AssertionError: mul gave 4" in text
    assert "## Holdout misses (1)" in text and "## Flaky (1)" in text
    assert "| `sample::binary_ufunc::mul::float32` | passed | failed |" in text
    assert "half &lt;script&gt;" in text and "<script>" not in text


def test_markdown_fence_outlasts_backticks_in_a_message(record: RunRecord) -> None:
    first = record.results[2]
    assert first.status.is_failure
    tricky = dataclasses.replace(
        first,
        outcome=dataclasses.replace(first.outcome, message="expected:\n```\ntensor([1.])\n```"),
    )
    text = render_markdown(dataclasses.replace(record, results=(tricky, *record.results[3:])))
    assert "````\nexpected:\n```\ntensor([1.])\n```\n````" in text


def test_reports_without_plan_or_upgrade(record: RunRecord) -> None:
    bare = dataclasses.replace(record, plan=None, upgrade=None)
    assert "No plan recorded" in render_markdown(bare)
    page = render_html(bare)
    assert "No plan recorded" in page and "Upgrade" not in page


def test_upgrade_canaries_are_named_apart_from_the_holdout(record: RunRecord) -> None:
    assert record.plan is not None
    assert "holdout sample 3." in render_markdown(record)
    plan = dataclasses.replace(record.plan, holdout=10, canaries=7)
    upgrade = dataclasses.replace(record, plan=plan)
    text = render_markdown(upgrade)
    assert "canaries 7 (one per op) and holdout sample 3." in text
    assert "found only by the canaries or the random holdout sample" in text
    assert "## Canary and holdout misses (1)" in text
    html = " ".join(" ".join(_parse(render_html(upgrade)).text).split())
    assert "canaries 7 (one per op) and holdout sample 3" in html
    assert RunRecord.from_json(upgrade.to_json()).plan == plan


def test_the_holdout_line_bounds_recall_only_when_the_selection_found_new_failures() -> None:
    from dashboard_export.model import PlanSummary
    from dashboard_export.report import _holdout_text

    metrics = {"eligible": 1000, "selected": 100, "missed_upper": 26.2, "recall_lower": 0.0}
    none_found = _holdout_text(PlanSummary(100, holdout=30, metrics=metrics))
    assert none_found == (
        "holdout sample 30 (a random draw of the unselected): none of it failed new; with 95 % "
        "confidence no more than 27 of the 900 unselected variants (3.0 %) fail new, a limit "
        "set by the sample's size, not failures seen"
    )
    one = _holdout_text(PlanSummary(100, holdout=30, metrics=metrics, holdout_misses=("a",)))
    assert "it found 1 new failure the selection missed; with 95 % confidence" in one
    assert "recall" not in none_found
    found = {**metrics, "selected_new_failures": 4, "recall_lower": 0.1324}
    assert "test recall at least 13.2 %" in _holdout_text(
        PlanSummary(100, holdout=30, metrics=found)
    )


def test_the_headline_counts_as_the_results_table_does(record: RunRecord) -> None:
    from suites.model import Status

    exp = record.results[6]
    xpass = dataclasses.replace(
        exp, outcome=dataclasses.replace(exp.outcome, status=Status.XPASSED)
    )
    record = dataclasses.replace(record, results=(*record.results[:6], xpass, *record.results[7:]))
    text = render_markdown(record)
    headline = next(line for line in text.splitlines() if line.startswith("**"))
    assert headline == (
        "**9 variants**: 2 passed, 2 failed, 1 error, 1 skipped, 1 xfailed, 1 xpassed, "
        "1 crashed; 4 failing (3 new, 1 pre-existing); 1 flaky."
    )
    # the table's row: passed failed error skipped xfailed xpassed timeout crashed, total
    assert "| sample | 2 | 1 | 1 | 1 | 1 | 1 | 0 | 1 | 8 |" in text
    cards = " ".join(" ".join(_parse(render_html(record)).text).split())
    assert "9 variants 2 passed" in cards and "1 xfailed 1 xpassed 1 skipped" in cards


def test_family_only_picks_come_after_the_direct_evidence_and_are_named(
    record: RunRecord,
) -> None:
    from dashboard_export.model import PlanSummary
    from dashboard_export.report import reason_rows

    family = "op_match: same op family 'norm' as touched op nn.functional.normalize (f.py: def)"
    direct = "op_match: op nn.functional.normalize touched (f.py: def)"
    plan = PlanSummary(163, 8498, top_reasons=((family, 148), (direct, 13), ("impact_map: x", 2)))
    assert reason_rows(plan) == [
        (direct, 13),
        ("impact_map: x", 2),
        ("relatives only, no direct evidence: " + family, 148),
    ]
    text = " ".join(
        " ".join(_parse(render_html(dataclasses.replace(record, plan=plan))).text).split()
    )
    assert (
        "Selected 163 of 8498 variants (15 on direct evidence; 148 only as relatives in a "
        "touched op's family, ranked after them);" in text
    )


def test_every_page_escapes_what_it_is_given(record: RunRecord) -> None:
    # The templates autoescape: text from a commit, a message or a run id is never markup.
    hostile = "<script>alert(1)</script>"
    event = dataclasses.replace(record.event, commit_messages=(hostile,))
    page = render_html(dataclasses.replace(record, event=event, held_back=hostile))
    assert hostile not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script") == 0

    from dashboard_export.browser import RunRow, render_index

    row = RunRow(hostile, "completed", hostile, 0.0, selected=1, failed=0, new_failures=0)
    index = render_index([row], [hostile], 0.0)
    assert "<script" not in index and "&lt;script&gt;" in index


def test_the_changed_files_are_named_from_the_event_or_the_diff(record: RunRecord) -> None:
    from dataclasses import replace

    from contracts.change import ChangeNote, FileNote
    from contracts.event import ChangedFile
    from dashboard_export.report import _files_line

    docs = replace(record.event, files=(ChangedFile("docs/source/notes.rst", "modified"),))
    assert _files_line(replace(record, event=docs)) == "1 changed file: docs/source/notes.rst"
    none = replace(record.event, files=(), files_complete=False)
    applied = ChangeNote(applied=(FileNote("torch/nn/functional.py", "modified", "x"),))
    environment = replace(record.environment, change=applied)
    line = _files_line(replace(record, event=none, environment=environment))
    assert line == "1 changed file: torch/nn/functional.py"  # the diff named it


def test_every_template_compiles_ahead_and_is_then_served_compiled() -> None:
    from dashboard_export import pages

    templates = sorted(p.name for p in (REPO_ROOT / "dashboard_export" / "templates").glob("*"))
    assert pages.load_templates() == len(templates) > 0
    compiled = pages._ENV.get_template("report.html")
    assert pages._ENV.get_template("report.html") is compiled  # from the cache, not compiled
