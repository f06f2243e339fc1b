from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dashboard_export import ExportError
from dashboard_export.model import RunRecord
from dashboard_export.validation import validate
from tests.testing.records import make_record


def test_record_json_round_trip(record: RunRecord, tmp_path: Path) -> None:
    validate("run_record", record.to_json())
    assert RunRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    record.save(tmp_path / "run.json")
    assert RunRecord.load(tmp_path / "run.json") == record


def test_derived_fields(record: RunRecord) -> None:
    assert record.effective_check_run_id == "55501"
    assert dataclasses.replace(record, check_run_id="").effective_check_run_id == "9876543210-2"
    # New failures make the run red; pre-existing and flaky alone do not.
    assert record.effective_conclusion == "failure"
    only_old = dataclasses.replace(
        record, results=tuple(r for r in record.results if r not in record.new_failures)
    )
    assert only_old.failures and only_old.effective_conclusion == "success"


def test_bad_records_say_what_is_wrong(junit_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="started_at 'yesterday' is not an ISO 8601 time"):
        make_record(junit_dir, started_at="yesterday")
    with pytest.raises(ExportError, match="level must be one of"):
        make_record(junit_dir, level="L9")
    record = make_record(junit_dir)
    with pytest.raises(ExportError, match="appears twice"):
        dataclasses.replace(record, results=record.results + record.results[:1])
    data = record.to_json()
    del data["environment"]["device"]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ExportError, match=r"run\.json: not a run record: .*'device' is a requ"):
        RunRecord.load(path)
    path.write_text("{\n  oops")
    with pytest.raises(ExportError, match=r"run\.json:2:\d+: invalid JSON"):
        RunRecord.load(path)
