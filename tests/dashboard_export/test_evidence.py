"""Fail closed: a run is green only when its outcomes and its per-test evidence agree, in
every place its conclusion shows (callback, HUD row, commit status, check run, report)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dashboard_export.crcr import callback_body
from dashboard_export.evidence import callback_gaps, checked_conclusion, with_junit
from dashboard_export.github import description, publish_github
from dashboard_export.hud_row import row_for
from dashboard_export.layout import write_run
from dashboard_export.model import PlanSummary, RunRecord, VariantResult
from dashboard_export.report import render_markdown
from relay.github import GitHubAdapter
from suites.model import Outcome, Status
from tests.servers.github_api import GitHubAPIServer
from tests.servers.hud import HudServer
from workflows.cli.main import main

VID = "sample::binary_ufunc::add::float32"


@pytest.fixture()
def green(record: RunRecord) -> RunRecord:
    """A main-job run whose results cover its plan and all passed."""
    passed = tuple(
        replace(r, classification=None) for r in record.results if not r.status.is_failure
    )
    plan = PlanSummary(selected=len(passed) - 1, inventory=1200, holdout=1)
    return replace(record, upgrade=None, results=passed, plan=plan)


def _conclusions(record: RunRecord) -> dict[str, str]:
    return {
        "record": record.effective_conclusion,
        "callback": callback_body(record)["workflow"]["conclusion"],
        "hud_row": row_for(record)["conclusion"],
    }


def test_a_run_whose_evidence_agrees_is_green(green: RunRecord) -> None:
    assert green.gaps == ()
    assert set(_conclusions(green).values()) == {"success"}
    assert callback_gaps(callback_body(green)["workflow"]) == ()


def test_a_missing_shard_is_never_success(green: RunRecord, github_api: GitHubAPIServer) -> None:
    assert green.plan is not None
    missing = replace(green, plan=replace(green.plan, selected=green.plan.selected + 4))
    assert set(_conclusions(missing).values()) == {"neutral"}
    assert missing.gaps == (
        f"4 of {len(green.results) + 4} planned variants have no result "
        "(a shard's results are missing)",
    )
    # The reason is said where the conclusion shows.
    assert description(missing).startswith("results incomplete, not a pass: 4 of")
    assert "evidence_gap" in callback_body(missing)["workflow"]["environment"]
    assert "Results incomplete: not a pass" in render_markdown(missing)
    adapter = GitHubAdapter(
        base_url=github_api.url,
        token=github_api.token,
        app_id=int(github_api.app_id),
        installation_id=github_api.installation_id,
        private_key_pem=github_api.private_key_pem,
    )
    result = publish_github(missing, adapter, check_run=True)
    [status] = github_api.statuses[("pytorch/pytorch", "b" * 40)]
    assert status["state"] == "error" and status["description"].startswith("results incomplete")
    assert github_api.check_runs[result.check_run_id]["conclusion"] == "neutral"  # type: ignore[index]


def test_variants_the_specs_no_longer_have_are_not_missing(green: RunRecord) -> None:
    assert green.plan is not None
    plan = replace(
        green.plan,
        selected=green.plan.selected + 2,
        skipped={"removed: no longer in the specs (a, b)": 2},
    )
    assert replace(green, plan=plan).effective_conclusion == "success"


@pytest.mark.parametrize(
    ("change", "gap"),
    [
        (
            lambda r: {"plan": replace(r.plan, holdout_misses=(VID,))},
            "holdout misses without a failing result",
        ),
        (
            lambda r: {
                "results": (
                    *r.results,
                    VariantResult.of(
                        Outcome("sample::unary_ufunc::tan::float32", Status.FAILED, 1.0, "x"),
                        "flaky",
                    ),
                ),
                "plan": replace(r.plan, selected=r.plan.selected + 1),
            },
            "classified flaky (passed on rerun) yet failing",
        ),
        (lambda r: {"conclusion": "success", "evidence_gaps": ("junit",)}, "junit"),
    ],
    ids=["holdout-miss", "flaky-failing", "success-set-in-the-record"],
)
def test_counts_that_contradict_the_tests_listed(green: RunRecord, change: Any, gap: str) -> None:
    odd = replace(green, **change(green))
    assert any(g.startswith(gap) for g in odd.gaps)
    assert set(_conclusions(odd).values()) == {"neutral"}


def test_a_failing_run_stays_a_failure(record: RunRecord) -> None:
    assert record.new_failures
    broken = replace(record, upgrade=None)
    assert broken.gaps and broken.effective_conclusion == "failure"
    infra = replace(broken, infrastructure=("shard-0: died before its first test\ncause",))
    assert infra.gaps == () and infra.effective_conclusion == "failure"


def _junit(directory: Path, cases: list[tuple[str, str]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    body = "".join(
        f'<testcase classname="sample" name="{vid}" time="0.1">{inner}</testcase>'
        for vid, inner in cases
    )
    (directory / "shard-0.1.0.xml").write_text(
        f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'
    )


def test_junit_listing_a_test_without_a_result_is_not_green(
    green: RunRecord, tmp_path: Path
) -> None:
    junit = tmp_path / "out" / "junit"
    listed = [(r.id, "") for r in green.results] + [("sample::extra::op::float32", "")]
    _junit(junit, listed)
    out = tmp_path / "out"
    first = write_run(green, out)
    saved = RunRecord.load(out / "run.json")
    assert saved.evidence_gaps == (
        "1 JUnit testcase(s) without a result: sample::extra::op::float32",
    )
    callback = json.loads((out / "callback.json").read_text())
    row = json.loads((out / "hud/crcr_workflow_job.json").read_text())
    assert callback["workflow"]["conclusion"] == row["conclusion"] == "neutral"
    # A re-export from run.json judges the same and writes the same bytes.
    before = {name: path.read_bytes() for name, path in first.items()}
    again = write_run(saved, out)
    assert {name: path.read_bytes() for name, path in again.items()} == before
    # Fixed JUnit, fixed verdict.
    _junit(junit, [(r.id, "") for r in green.results])
    assert with_junit(saved, junit).effective_conclusion == "success"


def test_junit_whose_last_attempt_failed_disagrees_with_a_pass(
    green: RunRecord, tmp_path: Path
) -> None:
    junit = tmp_path / "junit"
    _junit(junit, [(r.id, "") for r in green.results[1:]])
    (junit / "shard-0.1.1.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        f'<testcase classname="sample" name="{green.results[0].id}" time="0.1">'
        '<failure message="boom">t</failure></testcase></testsuite></testsuites>'
    )
    checked = with_junit(green, junit)
    assert checked.evidence_gaps == (
        f"last JUnit attempt failed, the result says not: {green.results[0].id}",
    )
    assert checked.effective_conclusion == "neutral"
    assert with_junit(green, tmp_path / "nowhere") is green  # no evidence at hand: as it was


def test_export_publishes_what_the_files_say(
    green: RunRecord,
    tmp_path: Path,
    hud_server: HudServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    green.save(run_dir / "run.json")
    _junit(run_dir / "junit", [("sample::extra::op::float32", "")])
    monkeypatch.setenv("SPYRE_CI_HUD_URL", hud_server.url)
    monkeypatch.setenv("SPYRE_CI_HUD_BOT_KEY", hud_server.bot_key)
    assert main(["export", str(run_dir), "--hud", "--allow-http"]) == 0
    [row] = hud_server.rows
    assert row["conclusion"] == "neutral"
    assert "results incomplete" in json.loads(row["environment"])["evidence_gap"]


@pytest.mark.parametrize(
    ("workflow", "gap"),
    [
        (
            {
                "conclusion": "success",
                "test_results": {"passed": 3, "failed": 0, "skipped": 1, "total": 9},
            },
            "test_results.total 9 is not passed + failed + skipped (4)",
        ),
        (
            {
                "conclusion": "success",
                "test_results": {"passed": 3, "failed": 1, "skipped": 0},
                "failed_tests_detail": [{"name": "a"}, {"name": "b"}],
            },
            "2 failed tests listed, 1 counted",
        ),
        (
            {
                "conclusion": "success",
                "test_results": {"passed": 3, "failed": 1, "skipped": 0, "total": 4},
                "failed_tests": [{"id": "s::t::a::f32", "classification": "new"}],
            },
            "success with new failures listed: s::t::a::f32",
        ),
    ],
    ids=["total", "listed-more-than-counted", "new-failure-under-success"],
)
def test_a_callback_that_contradicts_itself(workflow: dict[str, Any], gap: str) -> None:
    assert callback_gaps(workflow) == (gap,)
    assert checked_conclusion(workflow) == "neutral"
    assert checked_conclusion({**workflow, "conclusion": "failure"}) == "failure"


def test_a_loose_callback_is_read_as_hud_reads_it() -> None:
    # Strings for numbers, no total, a truncation marker standing for the entries it dropped.
    workflow = {
        "conclusion": "success",
        "test_results": {"passed": "5", "failed": "2", "skipped": 0},
        "failed_tests": [
            {"id": "x", "classification": "pre-existing"},
            {"truncated": True, "omitted": 1, "total": 2},
        ],
    }
    assert callback_gaps(workflow) == () and checked_conclusion(workflow) == "success"
    assert callback_gaps({"conclusion": "success"}) == ()  # nothing to disagree with
