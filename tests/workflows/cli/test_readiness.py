"""Promotion readiness: each L2 -> L3 criterion passes on a healthy window and fails on a
window made to break it, over a History holding a real run of the pipeline and recorded
synthetic days; below the evidence a criterion needs (the 14-day window covered, enough
jobs, 30 days at L2) it says NOT ENOUGH DATA and what is missing, and one real run is never
ready; the window leaves older runs out; the CLI's exit codes, its files, and the relay's
/readiness page."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts.run_summary import RunSummary
from dashboard_export.readiness import assess, job_facts
from dashboard_export.readiness_report import render_html, render_markdown, render_text
from tests.testing.cli import cli
from tests.workflows.run.test_infra_faults import _request
from tests.workflows.run_context import run_context
from workflows.cli.main import main
from workflows.drivers import embedded
from workflows.run import run_folder
from workflows.stores.history import HistoryStore, RedisHistory, RunRecord, RunState, SQLiteHistory

H = 3600.0
DAY = 86400.0
NOW = float(int(time.time()))  # the real run is created now: synthetic days end here too
CRITERIA = ("time_at_l2", "pass_rate", "queue_time", "long_jobs", "end_to_end", "timeouts")
L2_SINCE = NOW - 40 * DAY  # the allowlist's L2 date the healthy windows are assessed with


def _record(
    run_id: str,
    age_days: float,
    *,
    state: RunState = RunState.COMPLETED,
    queue_s: float | None = 300.0,
    run_s: float = 40 * 60.0,
    **summary: Any,
) -> RunRecord:
    """A finished run created `age_days` before NOW, as the pipeline records one."""
    created = NOW - age_days * DAY
    started = None if queue_s is None else created + queue_s
    finished = (started or created) + run_s
    body = {"new_failures": 0, "new_timeouts": 0, "started_at": started, "finished_at": finished}
    return RunRecord(run_id, state, created, finished, RunSummary.from_json({**body, **summary}))


def _healthy(n: int = 100, prefix: str = "ok") -> list[RunRecord]:
    """`n` green runs spread over the last 13.9 days, and History's first run 20 days ago
    (so History covers the 14-day window): every criterion passes."""
    window = [_record(f"{prefix}-{i}", 13.9 * (i + 0.5) / n) for i in range(n)]
    return [*window, _record(f"{prefix}-first", 20)]


def _older_bad() -> list[RunRecord]:
    """Runs 15-20 days old breaking every criterion: the 14-day window leaves them out."""
    return [
        _record(
            f"old-{i}",
            15 + i / 4,
            state=RunState.INFRA_ERROR if i % 2 else RunState.COMPLETED,
            queue_s=5 * H,
            run_s=4 * H,
            new_failures=1,
            new_timeouts=1,
        )
        for i in range(20)
    ]


def _save(history: HistoryStore, records: list[RunRecord]) -> None:
    for record in records:
        history.save_run(record)  # updated_at becomes now; finished_at keeps the finish


# One window per criterion, each breaking only that criterion.
BROKEN: dict[str, Callable[[], list[RunRecord]]] = {
    # 15 infrastructure errors in 115 jobs: 87 % passed.
    "pass_rate": lambda: (
        _healthy()
        + [_record(f"infra-{i}", 1 + i / 10, state=RunState.INFRA_ERROR) for i in range(15)]
    ),
    # 10 jobs queued 6 h each: a mean of about 37 min (their run time stays short).
    "queue_time": lambda: (
        _healthy()
        + [_record(f"queued-{i}", 2 + i / 10, queue_s=6 * H, run_s=0.2 * H) for i in range(10)]
    ),
    # 2 of 102 jobs ran 4 h: 2 %.
    "long_jobs": lambda: _healthy() + [_record(f"long-{i}", 3 + i, run_s=4 * H) for i in range(2)],
    # Every job 2 min queued + 2 h 59 min running: none over 3 h, median 3 h 01 min.
    "end_to_end": lambda: [
        _record(f"slow-{i}", 14 * (i + 0.5) / 100 + 0.01, queue_s=120.0, run_s=2 * H + 59 * 60)
        for i in range(100)
    ],
    # 2 of 102 jobs failed on a test out of time: 2 % (98 % still passed).
    "timeouts": lambda: (
        _healthy()
        + [
            _record(f"timeout-{i}", 4 + i, new_failures=1, new_timeouts=1, counts={"timeout": 1})
            for i in range(2)
        ]
    ),
}


@pytest.fixture(scope="module")
def real_history(tiny_inventory: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir whose History holds one real run of the tiny suite through the pipeline."""
    state = tmp_path_factory.mktemp("readiness-state")
    history = SQLiteHistory(state / "history.sqlite3")
    request = _request(tiny_inventory, state / "out", "real-1")
    embedded.run(request, run_context(history), jobs=1, show_progress=False)
    return state


def test_a_real_run_records_when_it_started_and_finished(real_history: Path) -> None:
    history = SQLiteHistory(real_history / "history.sqlite3")
    run = history.get_run("real-1")
    assert run is not None and run.state.final
    results, finished = run.summary.results, run.summary.finished_at
    assert results is not None and results.started_at is not None and finished is not None
    assert run.created_at <= results.started_at <= finished <= run.updated_at
    assert results.new_timeouts == 0
    shard = real_history / "out" / "work" / "real-1" / "shard-0"
    assert (shard / run_folder.STARTED_FILE).is_file()
    job = job_facts(run)
    assert job.verdict == ("fail" if results.new_failures else "pass")
    assert job.queue_s is not None and 0 <= job.queue_s < 600
    assert job.end_to_end_s == pytest.approx(finished - run.created_at)


def test_records_written_before_start_times_are_still_assessed() -> None:
    old_form = RunSummary.from_json({"new_failures": 0})
    old = RunRecord("old-form", RunState.COMPLETED, NOW - 2 * H, NOW - H, old_form)
    job = job_facts(old)
    assert job.verdict == "pass" and job.queue_s is None
    assert job.end_to_end_s == H and job.run_s == H  # finish = updated_at, from creation
    failed = RunRecord(
        "old-timeout",
        RunState.COMPLETED,
        NOW,
        NOW,
        RunSummary.from_json({"new_failures": 2, "counts": {"timeout": 1}}),
    )
    assert job_facts(failed).timed_out


@pytest.mark.parametrize(
    ("name", "verdict", "started", "finished"),
    [
        ("completed", "fail", 1796305613.515, 1796305627.7568653),
        ("planned", "running", None, None),
        ("stopped", "cancelled", None, None),  # interrupted
        ("before_head_sha", "pass", None, 1790000100.0),
    ],
)
def test_history_rows_of_the_previous_version_are_jobs_as_they_were(
    name: str, verdict: str, started: float | None, finished: float | None
) -> None:
    rows = json.loads(
        (Path(__file__).resolve().parents[1] / "data" / "records" / "history_rows.json").read_text()
    )
    job = job_facts(RunRecord.from_json(rows[name]))
    assert (job.verdict, job.started_at, job.finished_at, job.timed_out) == (
        verdict,
        started,
        finished,
        False,
    )
    assert job.event == rows[name]["summary"]["event"]


def _assessed(
    records: list[RunRecord], days: float = 14.0, l2_since: float | None = L2_SINCE
) -> dict[str, Any]:
    return assess(records, NOW + 60, days, l2_since).to_json()


def test_a_healthy_window_passes_every_criterion_and_leaves_older_runs_out() -> None:
    result = _assessed(_healthy() + _older_bad())
    assert result["ready"] is True
    assert result["runs"] == 100 and result["older_runs_left_out"] == 21
    by_key = {c["key"]: c for c in result["criteria"]}
    assert [c["key"] for c in result["criteria"]] == list(CRITERIA)
    assert all(c["passed"] for c in by_key.values())
    assert by_key["pass_rate"]["value"] == 1.0 and by_key["pass_rate"]["measured"] == 100
    assert by_key["queue_time"]["value"] == pytest.approx(300.0)
    assert by_key["end_to_end"]["value"] == pytest.approx(300.0 + 2400.0)
    assert by_key["long_jobs"]["value"] == 0.0 and by_key["timeouts"]["value"] == 0.0

    # A 30-day window takes the older runs in: they fail every criterion but the median.
    wide = {c["key"]: c["passed"] for c in _assessed(_healthy() + _older_bad(), 30)["criteria"]}
    assert wide == {
        "time_at_l2": True,
        "pass_rate": False,
        "queue_time": False,
        "long_jobs": False,
        "end_to_end": True,
        "timeouts": False,
    }


@pytest.mark.parametrize("broken", list(BROKEN))
def test_each_criterion_fails_on_a_window_that_breaks_it(broken: str) -> None:
    result = _assessed(BROKEN[broken]() + _older_bad())
    assert result["ready"] is False and result["verdict"] == "NOT READY"
    passed = {c["key"]: c["status"] for c in result["criteria"]}
    assert passed == {key: "fail" if key == broken else "pass" for key in CRITERIA}
    criterion = next(c for c in result["criteria"] if c["key"] == broken)
    assert criterion["against"] > 0 and criterion["worst"]
    prefix = {"end_to_end": "slow"}.get(broken) or BROKEN[broken]()[-1].run_id.split("-")[0]
    assert all(w["run_id"].startswith(prefix) for w in criterion["worst"][:2]), criterion
    assert not any(i.startswith("old-") for i in criterion["against_ids"])


def test_infrastructure_errors_fail_the_job_and_are_shown_apart() -> None:
    result = _assessed(BROKEN["pass_rate"]())
    assert result["verdicts"]["infra"] == 15 and result["verdicts"]["pass"] == 100
    pass_rate = result["criteria"][1]
    assert pass_rate["value"] == pytest.approx(100 / 115)
    assert "15 infrastructure errors" in pass_rate["detail"]
    assert {w["note"] for w in pass_rate["worst"]} == {"infra"}


def test_stopped_and_unfinished_runs() -> None:
    extra = [
        # interrupted: a cancelled job, not counted
        _record("cancelled-1", 1, state=RunState.STOPPED, stopped_because="interrupted"),
        # stopped by an error: a failed job; by a time limit: a timed-out one
        _record("error-1", 1, state=RunState.STOPPED, stopped_because="PipelineError: boom"),
        _record(
            "limit-1",
            1,
            state=RunState.STOPPED,
            stopped_because="TimeLimitExceeded: time limit (10800 s) exceeded",
        ),
        # still planned after a day: a job running over 3 hours; one started now: unknown yet
        RunRecord("hung-1", RunState.PLANNED, NOW - DAY, NOW - DAY),
        RunRecord("fresh-1", RunState.PLANNED, NOW - 60, NOW - 60),
    ]
    result = _assessed(_healthy() + extra)
    assert result["verdicts"] == {
        "pass": 100,
        "fail": 0,
        "infra": 0,
        "error": 2,
        "cancelled": 1,
        "running": 2,
    }
    assert result["not_counted"] == {"cancelled": ["cancelled-1"], "running": ["fresh-1", "hung-1"]}
    by_key = {c["key"]: c for c in result["criteria"]}
    assert by_key["pass_rate"]["measured"] == 102 and by_key["pass_rate"]["against"] == 2
    assert by_key["timeouts"]["against_ids"] == ["limit-1"]
    assert by_key["long_jobs"]["against_ids"] == ["hung-1"]
    assert by_key["long_jobs"]["measured"] == 103


def test_a_patch_tried_with_diff_is_no_ci_job() -> None:
    """Runs of a patch someone tried (`spyre-ci run --diff`) are neither jobs nor failures:
    ten red tries leave a healthy window ready, and are named as not counted."""
    tried = [_record(f"tried-{i}", 1, new_failures=3, tried=True) for i in range(10)]
    result = _assessed(_healthy() + tried)
    assert result["ready"] is True and result["verdicts"]["fail"] == 0
    assert result["not_counted"]["tried"] == [f"tried-{i}" for i in range(10)]
    assert RunSummary.from_json({"tried": True}).plan is not None


def test_no_runs_is_not_ready() -> None:
    result = _assessed([], l2_since=None)
    assert result["ready"] is False and all(c["value"] is None for c in result["criteria"])
    assert result["verdict"] == "NOT ENOUGH DATA"
    assert all(c["status"] == "no data" for c in result["criteria"])


def test_one_green_run_is_not_enough_data_and_says_what_is_missing() -> None:
    one = [_record("only-1", 0, queue_s=2.0, run_s=19.0)]
    result = _assessed(one, l2_since=None)
    assert result["ready"] is False and result["verdict"] == "NOT ENOUGH DATA"
    by_key = {c["key"]: c for c in result["criteria"]}
    # Its values are within every bound, but none of them is evidence yet.
    assert all(c["status"] == "no data" for c in by_key.values())
    assert by_key["pass_rate"]["value"] == 1.0
    assert by_key["pass_rate"]["missing"] == "0.0 days of 14 covered; 1 job of 10 needed"
    assert by_key["timeouts"]["missing"].endswith("1 job of 100 needed")
    assert by_key["end_to_end"]["missing"].endswith("1 job of 10 needed")
    assert by_key["time_at_l2"]["missing"] == "0.0 days of 30 at L2 (since History's first run)"
    text = render_text(assess(one, NOW + 60))
    assert text.startswith("Promotion readiness (L2 -> L3): NOT ENOUGH DATA")
    assert "not enough data: 0.0 days of 14 covered; 1 job of 10 needed" in text


def test_a_failing_criterion_outweighs_missing_evidence() -> None:
    runs = [_record(f"red-{i}", i / 10, state=RunState.INFRA_ERROR) for i in range(12)]
    runs.append(_record("first", 20))  # History covers the window
    result = _assessed(runs)
    assert result["verdict"] == "NOT READY"
    statuses = {c["key"]: c["status"] for c in result["criteria"]}
    assert statuses["pass_rate"] == "fail"  # 0 of 12 jobs passed: evidence enough
    assert statuses["timeouts"] == "no data"  # 12 jobs of 100
    assert result["ready"] is False


def test_evidence_boundaries() -> None:
    healthy = _healthy()
    assert _assessed(healthy)["verdict"] == "READY"
    # The window: History's first run 14 days old covers it, a minute younger does not.
    window = healthy[:-1]
    exactly = _assessed([*window, _record("first", 14 + 60 / DAY)])  # 14 days before the end
    assert exactly["window"]["covered_days"] == pytest.approx(14.0)
    assert exactly["verdict"] == "READY"
    short = _assessed([*window, _record("first", 14 - 2 / 24)])
    assert short["verdict"] == "NOT ENOUGH DATA"
    assert {c["missing"] for c in short["criteria"][1:]} == {"13.9 days of 14 covered"}
    # A shorter window never covers the relay's 14 days.
    assert "(the window is 7 days)" in _assessed(healthy, 7)["criteria"][1]["missing"]
    # Jobs: the 1 % bounds need 100 finished jobs, the pass rate and the times 10.
    fewer = _assessed(healthy[1:])
    by_key = {c["key"]: c for c in fewer["criteria"]}
    assert by_key["timeouts"]["missing"] == "99 jobs of 100 needed"
    assert by_key["long_jobs"]["status"] == "no data"
    assert by_key["pass_rate"]["status"] == "pass" and by_key["end_to_end"]["status"] == "pass"
    # The pass rate's bound is "at least 90 %": 90 of 100 passes, 89 of 99 does not.
    ninety = [*healthy[10:], *(_record(f"f-{i}", 1 + i / 10, new_failures=1) for i in range(10))]
    assert {c["key"]: c["status"] for c in _assessed(ninety)["criteria"]}["pass_rate"] == "pass"
    under = [*healthy[11:], *(_record(f"f-{i}", 1 + i / 10, new_failures=1) for i in range(11))]
    assert _assessed(under)["criteria"][1]["status"] == "fail"
    # 30 days at L2: from the allowlist's date when given, else History's first run.
    at = {c["key"]: c for c in _assessed(healthy, l2_since=NOW + 60 - 30 * DAY)["criteria"]}
    assert at["time_at_l2"]["status"] == "pass"
    early = _assessed(healthy, l2_since=NOW + 60 - 29.5 * DAY)
    assert early["verdict"] == "NOT ENOUGH DATA"
    assert (
        early["criteria"][0]["missing"] == "29.5 days of 30 at L2 (since the allowlist's L2 date)"
    )
    from_history = _assessed([*healthy, _record("first", 31)], l2_since=None)
    assert from_history["verdict"] == "READY"
    assert "since History's first run" in from_history["criteria"][0]["detail"]


def test_renderings_name_the_verdict_and_the_evidence() -> None:
    result = assess(BROKEN["long_jobs"](), NOW + 60)
    markdown = render_markdown(result)
    assert "NOT READY" in markdown and "long-0" in markdown and "**FAIL**" in markdown
    html = render_html(result)
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    assert "long-1" in html and "share of jobs running over 3 h" in html


@pytest.fixture()
def state_with(real_history: Path, tmp_path: Path) -> Iterator[Callable[[list[RunRecord]], Path]]:
    """A copy of the real run's state dir, plus the given synthetic runs."""
    import shutil

    def make(records: list[RunRecord]) -> Path:
        state = tmp_path / f"state-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(real_history, state, ignore=shutil.ignore_patterns("out"))
        _save(SQLiteHistory(state / "history.sqlite3"), records)
        return state

    yield make


def _cli(state: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setenv("SPYRE_CI_STATE_DIR", str(state))
    monkeypatch.delenv("SPYRE_CI_REDIS_URL", raising=False)
    return main(["readiness", "--now", _now(), "--l2-since", _l2_since(), *args])


def _l2_since() -> str:
    return dt.datetime.fromtimestamp(L2_SINCE, dt.UTC).isoformat()


def _now() -> str:
    """A minute from now: the real run, planned after NOW, is in the window too."""
    return dt.datetime.fromtimestamp(time.time() + 60, dt.UTC).isoformat()


def test_cli_exit_codes_files_and_json(
    state_with: Callable[[list[RunRecord]], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    good = state_with(_healthy() + _older_bad())
    html, markdown = tmp_path / "runs" / "readiness.html", tmp_path / "readiness.md"
    code = _cli(good, monkeypatch, "--html", str(html), "--markdown", str(markdown))
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "READY" in printed and "CI job pass rate" in printed and "21 older runs" in printed
    assert "<!DOCTYPE html>" in html.read_text() and "READY" in markdown.read_text()

    assert _cli(good, monkeypatch, "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["runs"] == 101  # the real run is in the window too
    assert result["ready"] is True

    bad = state_with(BROKEN["timeouts"]())
    assert _cli(bad, monkeypatch) == 5  # NOT READY: a check's "no", never 1
    assert "FAIL" in capsys.readouterr().out

    assert _cli(good, monkeypatch, "--days", "0") == 2
    assert "--days 0: must be" in capsys.readouterr().err
    assert _cli(good, monkeypatch, "--days", "nan") == 2
    assert _cli(good, monkeypatch, "--now", "yesterday-ish") == 2
    assert "--now 'yesterday-ish': not an ISO 8601" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        _cli(good, monkeypatch, "--days", "two")
    assert exc.value.code == 2


def test_cli_one_real_run_is_not_enough_data(
    real_history: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPYRE_CI_STATE_DIR", str(real_history))
    monkeypatch.delenv("SPYRE_CI_REDIS_URL", raising=False)
    assert main(["readiness", "--now", _now()]) == 5
    printed = capsys.readouterr().out
    assert printed.startswith("Promotion readiness (L2 -> L3): NOT ENOUGH DATA")
    assert "0.0 days of 14 covered; 1 job of 10 needed" in printed
    assert "0.0 days of 30 at L2 (since History's first run)" in printed
    assert main(["readiness", "--now", _now(), "--l2-since", "2999-01-01"]) == 2
    assert "--l2-since 2999-01-01: after the window's end" in capsys.readouterr().err


def test_cli_from_redis_history_and_a_store_that_is_down(tmp_path: Path) -> None:
    from tests.testing.relay import RedisProcess

    server = RedisProcess(tmp_path)
    server.start()
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "s")}
    try:
        _save(RedisHistory(server.url), BROKEN["queue_time"]())
        redis_env = {**env, "SPYRE_CI_REDIS_URL": server.url}
        result = cli(
            "readiness", "--now", _now(), "--l2-since", _l2_since(), "--json", env=redis_env
        )
        assert result.returncode == 5, result.stderr
        by_key = {c["key"]: c["passed"] for c in json.loads(result.stdout)["criteria"]}
        assert by_key == {key: key != "queue_time" for key in CRITERIA}
    finally:
        server.stop()
    down = cli("readiness", env={**env, "SPYRE_CI_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert down.returncode == 3, down.stderr
    assert "Redis History at" in down.stderr and "Traceback" not in down.stderr


def test_the_relay_serves_the_readiness_page_from_runs_dir(tmp_path: Path) -> None:
    from relay.app import Relay
    from relay.intake import connect
    from tests.testing.relay import RedisProcess, RelayHTTP, base_config

    server = RedisProcess(tmp_path)
    server.start()
    runs = tmp_path / "runs"
    config = base_config(server.url, runs_dir=str(runs))
    service = RelayHTTP(Relay(config, client=connect(server.url)))
    try:
        missing = service.get("/readiness")
        assert missing.status_code == 404 and "spyre-ci readiness --html" in missing.text
        runs.mkdir()
        page = render_html(assess(_healthy(), NOW + 60, 14, L2_SINCE))
        (runs / "readiness.html").write_text(page, encoding="utf-8")
        served = service.get("/readiness")
        assert served.status_code == 200 and served.headers["Content-Type"].startswith("text/html")
        assert "Promotion readiness" in served.text and "READY" in served.text
    finally:
        service.stop()
        server.stop()
