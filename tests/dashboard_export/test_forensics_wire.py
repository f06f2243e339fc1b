"""Regression forensics on the wire: each new failure's last good / first bad sha in the
callback's `failed_tests` (HUD's `failed_tests_json`), the run's `triage_verdict` for every
failed run, kept in run.json so a re-export carries them; checked against our schemas and
the relay's incoming validation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from contracts.forensics import FailureForensics
from dashboard_export import triage
from dashboard_export.crcr import callback_body, envelope_for
from dashboard_export.hud_row import row_for
from dashboard_export.layout import FORENSICS_FILE, write_run
from dashboard_export.model import RunRecord
from dashboard_export.validation import errors
from relay.callback import CALLBACK_SCHEMA
from tests.testing.records import make_record
from workflows.cli.main import main

GOOD, BAD = "1" * 40, "2" * 40
MUL = "sample::binary_ufunc::mul::float32"
DET = "upstream::TestLinalg::test_det::float32"
CRASHED = "sample::binary_ufunc::div::float32"
KNOWN = "sample::module::Linear::float32"  # pre-existing


def _entry(vid: str, good: str | None, bad: str, category: str = "upstream") -> dict[str, Any]:
    """A forensics.json entry as `workflows.run.exporting.failure_forensics` makes it."""
    compare = f"https://github.com/pytorch/pytorch/compare/{good}...{bad}" if good else None
    return {
        "id": vid,
        "last_good_sha": good,
        "first_bad_sha": bad,
        "last_good_run": "r-good" if good else None,
        "first_bad_run": "r-bad",
        "compare_url": compare,
        "class": "related" if category == "upstream" else "device-rule",
        "category": category,
        "related": category == "upstream",
    }


def _with_forensics(junit_dir: Path, verdict: bool = False) -> RunRecord:
    """The sample record, its new failures located: mul and det passed at GOOD and fail from
    BAD on; the crashed one was never seen passing."""
    found = {
        MUL: FailureForensics.from_json(_entry(MUL, GOOD, BAD)),
        DET: FailureForensics.from_json(_entry(DET, GOOD, BAD)),
        CRASHED: FailureForensics.from_json(_entry(CRASHED, None, BAD)),
    }
    made = None
    if verdict:
        record = make_record(junit_dir)
        by_id = {r.id: r for r in record.new_failures}
        failures = [e.triage for e in found.values() if e.triage is not None]
        made = triage.run_verdict(
            failures,
            {v: by_id[v].outcome.message for v in found},
            first_bad=BAD,
            job=record.job,
            version="1.2.3",
        )
    return make_record(junit_dir, forensics=found, triage_verdict=made)


def _failed(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in body["workflow"]["failed_tests"]}


def test_new_failures_carry_their_window_in_failed_tests(junit_dir: Path) -> None:
    record = _with_forensics(junit_dir)
    failed = _failed(callback_body(record))
    assert (failed[MUL]["last_good_sha"], failed[MUL]["first_bad_sha"]) == (GOOD, BAD)
    assert (failed[CRASHED]["last_good_sha"], failed[CRASHED]["first_bad_sha"]) == (None, BAD)
    # Only the two shas join the entry; a pre-existing failure has no window.
    assert set(failed[MUL]) == {
        "id",
        "suite",
        "status",
        "message",
        "duration_s",
        "classification",
        "holdout",
        "last_good_sha",
        "first_bad_sha",
    }
    assert "last_good_sha" not in failed[KNOWN] and "first_bad_sha" not in failed[KNOWN]
    # HUD keeps the action's per-test detail, not our window: the window rides in the
    # callback's failed_tests, which the relay forwards verbatim.
    hud = {e["name"] for e in json.loads(row_for(record)["failed_tests_json"])}
    assert DET in hud and KNOWN in hud
    assert errors("callback", callback_body(record)) == []
    assert errors("hud_envelope", envelope_for(record)) == []
    assert errors("crcr_workflow_job", row_for(record)) == []


def test_without_forensics_the_shas_are_null(record: RunRecord) -> None:
    failed = _failed(callback_body(record))
    assert (failed[MUL]["last_good_sha"], failed[MUL]["first_bad_sha"]) == (None, None)
    # A sha that is no sha (a CLI run's event may carry none) is unknown too.
    odd = dataclasses.replace(
        record, forensics={MUL: FailureForensics.from_json(_entry(MUL, "HEAD", ""))}
    )
    assert _failed(callback_body(odd))[MUL]["first_bad_sha"] is None
    assert errors("callback", callback_body(odd)) == []


def test_the_callback_schema_opens_the_entry_for_the_two_keys_only(junit_dir: Path) -> None:
    record = _with_forensics(junit_dir)
    for key, value in (
        ("compare_url", "https://github.com/pytorch/pytorch/compare/a...b"),
        ("last_good_sha", "not a sha"),
        ("first_bad_sha", 12),
    ):
        body = callback_body(record)
        body["workflow"]["failed_tests"][0][key] = value
        assert any("failed_tests" in e for e in errors("callback", body)), key
    row = row_for(record)
    entries = json.loads(row["failed_tests_json"])
    entries[0]["triage"] = "upstream"  # HUD stores four keys of a detail entry
    row["failed_tests_json"] = json.dumps(entries)
    assert any("failed_tests_json" in e for e in errors("crcr_workflow_job", row))


def test_a_failed_run_sends_an_upstream_verdict_naming_the_first_bad_sha(junit_dir: Path) -> None:
    record = _with_forensics(junit_dir, verdict=True)
    verdict = callback_body(record)["workflow"]["triage_verdict"]
    assert verdict["category"] == "upstream" and verdict["confidence"] == "high"
    assert verdict["suspected_upstream"]["commit"] == BAD
    assert {e["test"] for e in verdict["evidence"]} == {MUL, DET, CRASHED}
    assert verdict["analyzer"] == {"name": "spyre-ci", "version": "1.2.3"}  # the one made
    assert verdict["analyzed_at"] == record.completed_at
    # The pipeline's verdict goes out as made (forensics.json holds the same).
    assert record.triage_verdict is not None
    assert {k: v for k, v in verdict.items() if k != "analyzed_at"} == (
        record.triage_verdict.to_json()
    )


def test_a_failed_run_without_a_made_verdict_gets_one_from_its_record(
    junit_dir: Path, record: RunRecord
) -> None:
    # Forensics without a verdict (an older record): from each failure's triage entry.
    located = _with_forensics(junit_dir)
    verdict = callback_body(located)["workflow"]["triage_verdict"]
    assert verdict["category"] == "upstream"
    assert verdict["suspected_upstream"]["commit"] == BAD
    # No forensics at all (History was unreadable): from the messages alone.
    bare = callback_body(record)["workflow"]["triage_verdict"]
    assert bare["category"] == "unknown" and "suspected_upstream" not in bare
    assert len(bare["evidence"]) == len(record.new_failures)


def test_green_and_infra_runs_keep_their_verdicts(record: RunRecord) -> None:
    green = dataclasses.replace(
        record, results=tuple(r for r in record.results if r.classification != "new")
    )
    assert green.effective_conclusion == "success"
    assert "triage_verdict" not in callback_body(green)["workflow"]
    infra = dataclasses.replace(green, infrastructure=("shard 0: worker died\nImportError",))
    assert callback_body(infra)["workflow"]["triage_verdict"]["category"] == "infra"
    assert "triage_verdict" not in callback_body(record, "in_progress")["workflow"]


def test_the_relays_incoming_validation_accepts_what_we_send(junit_dir: Path) -> None:
    body = json.loads(json.dumps(callback_body(_with_forensics(junit_dir, verdict=True))))
    assert list(Draft202012Validator(CALLBACK_SCHEMA).iter_errors(body)) == []
    # The relay passes triage_verdict verbatim; the reference relay checks its shape and
    # caps (utils/triage_verdict.py): what we send is within them.
    verdict = body["workflow"]["triage_verdict"]
    assert verdict["schema_version"] == 1
    assert verdict["category"] in triage.CATEGORIES
    assert verdict["confidence"] in ("high", "medium", "low")
    assert len(verdict["summary"]) <= triage.SUMMARY_MAX
    assert 1 <= len(verdict["evidence"]) <= triage.EVIDENCE_MAX
    assert all(len(e["excerpt"]) <= triage.EXCERPT_MAX for e in verdict["evidence"])
    assert len(json.dumps(verdict).encode("utf-8")) <= triage.RAW_MAX
    # Checked as the reference checks it (relay/triage.py), it comes through whole.
    from relay.triage import normalized

    assert normalized(verdict) == verdict
    infra = dataclasses.replace(
        _with_forensics(junit_dir), infrastructure=("shard 1: worker died",), results=()
    )
    infra_verdict = json.loads(json.dumps(callback_body(infra)["workflow"]["triage_verdict"]))
    assert normalized(infra_verdict) == infra_verdict
    # And the per-test detail goes as the callback action sends it.
    detail = body["workflow"]["failed_tests_detail"]
    assert detail and all(set(d) == {"name", "classname", "message", "duration"} for d in detail)


def test_run_json_keeps_the_forensics_and_export_re_renders_them(
    junit_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _with_forensics(junit_dir, verdict=True)
    assert RunRecord.from_json(record.to_json()) == record
    out = tmp_path / "run"
    write_run(record, out, junit_dir)
    first = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    line = f"last good {GOOD} / first bad {BAD}"
    assert line in (out / "report.md").read_text() and line in (out / "report.html").read_text()
    found = json.loads((out / FORENSICS_FILE).read_text())
    assert found["failures"][MUL]["first_bad_sha"] == BAD
    assert record.triage_verdict is not None
    assert found["triage_verdict"] == record.triage_verdict.to_json()
    assert found["failures"][MUL] == _entry(MUL, GOOD, BAD)  # each entry as it was made
    assert RunRecord.load(out / "run.json") == record  # through run_record.schema.json

    for name in ("report.md", "report.html", FORENSICS_FILE, "callback.json"):
        (out / name).unlink()
    assert main(["export", str(out), "--junit", str(junit_dir)]) == 0
    capsys.readouterr()
    again = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert again == first
    sent = json.loads((out / "callback.json").read_text())["workflow"]
    assert sent["triage_verdict"]["suspected_upstream"]["commit"] == BAD


def test_a_record_without_forensics_is_written_as_before(record: RunRecord, tmp_path: Path) -> None:
    assert "forensics" not in record.to_json() and "triage_verdict" not in record.to_json()
    written = write_run(record, tmp_path / "run")
    assert "forensics" not in written and not (tmp_path / "run" / FORENSICS_FILE).exists()
    old = {k: v for k, v in record.to_json().items()}
    assert RunRecord.from_json(old) == record


def test_the_relay_takes_a_failed_nightly_and_hud_stores_the_shas(
    junit_dir: Path, tmp_path: Path
) -> None:
    # Over real HTTP: our relay (a private Redis), its HUD publisher, a local HUD server.
    from contracts.event import TriggerEvent
    from dashboard_export.publish import publish_hud
    from relay.app import Relay
    from relay.intake import connect
    from tests.servers.hud import HudServer
    from tests.testing.relay import RedisProcess, RelayHTTP, base_config

    record = _with_forensics(junit_dir, verdict=True)
    nightly = TriggerEvent(
        kind="nightly",
        delivery_id=BAD,
        repo="pytorch/pytorch",
        head_sha=BAD,
        payload={"head_sha": BAD, "repository": {"full_name": "pytorch/pytorch"}},
    )
    record = dataclasses.replace(record, event=nightly)
    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text("L2:\n  - torch-spyre/torch-spyre\n")
    redis_proc = RedisProcess(tmp_path)
    redis_proc.start()
    try:
        config = base_config(
            redis_proc.url,
            allowlist=str(allowlist),
            callback_tokens={"tok": "torch-spyre/torch-spyre"},
        )
        with HudServer("hud-key") as hud:
            relay = Relay(
                config,
                client=connect(redis_proc.url, socket_timeout=2.0),
                hud=lambda envelope: publish_hud(
                    envelope, hud.url, "hud-key", require_https=False, sleep=lambda _s: None
                ),
            )
            service = RelayHTTP(relay)
            try:
                answer = service.callback(callback_body(record), "tok")
            finally:
                service.stop()
            assert answer.status_code == 200, answer.text
            (row,) = hud.rows
    finally:
        redis_proc.stop()
    assert MUL in {e["name"] for e in json.loads(row["failed_tests_json"])}
    stored = json.loads(row["triage_verdict_json"])
    assert stored["suspected_upstream"]["commit"] == BAD
