from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from contracts.errors import Unavailable
from dashboard_export import ExportError, WriteUnavailable
from dashboard_export.layout import atomic_write, read_json_lines, write_run
from dashboard_export.model import RunRecord
from dashboard_export.validation import validate
from tests.testing.records import CRASHED

EXPECTED = {
    "run.json",
    "callback.json",
    "hud/envelope.json",
    "hud/crcr_workflow_job.json",
    "hud/test_run/9876543210/2",
    "hud/test_run_summary/9876543210/2",
    "hud/failed_test_runs/9876543210/2",
    "report.html",
    "report.md",
}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_write_run_leaves_every_format_valid(
    record: RunRecord, junit_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    written = write_run(record, out, junit_dir=junit_dir)
    assert {str(p.relative_to(out)) for p in written.values()} == EXPECTED
    validate("callback", json.loads((out / "callback.json").read_text()))
    validate("hud_envelope", json.loads((out / "hud/envelope.json").read_text()))
    validate("crcr_workflow_job", json.loads((out / "hud/crcr_workflow_job.json").read_text()))
    assert RunRecord.load(out / "run.json") == record
    for collection in ("test_run", "test_run_summary", "failed_test_runs"):
        rows = read_json_lines(out / "hud" / collection / "9876543210" / "2")
        assert rows, collection
        for row in rows:
            validate(collection, row)

    runs = read_json_lines(out / "hud/test_run/9876543210/2")
    # 8 testcases from the real JUnit plus the crashed variant that left none.
    assert len(runs) == 9
    by_variant = {
        next(p["value"] for p in r["properties"] if p["name"] == "variant_id"): r for r in runs
    }
    mul = by_variant["sample::binary_ufunc::mul::float32"]
    assert mul["name"] == "test_mul_float32" and mul["file"] == "test_variants.py"
    assert mul["invoking_file"] == "shard-0" and mul["workflow_id"] == 9876543210
    assert mul["job_id"] == 55501 and mul["workflow_run_attempt"] == 2
    assert mul["result"] == "failure" and mul["failure"][0]["message"].startswith("Assertion")
    assert by_variant["sample::unary_ufunc::cos::float32"]["status"] == "xfailed"
    assert by_variant[CRASHED]["status"] == "crashed"
    assert (
        "captured output from det"
        in (by_variant["upstream::TestLinalg::test_det::float32"]["system-out"][0]["text"])
    )

    summary = read_json_lines(out / "hud/test_run_summary/9876543210/2")
    from_junit = next(s for s in summary if s["classname"] == "test_variants")
    assert (
        from_junit["tests"],
        from_junit["failures"],
        from_junit["errors"],
        from_junit["skipped"],
        from_junit["successes"],
    ) == (8, 2, 1, 2, 3)
    failed = read_json_lines(out / "hud/failed_test_runs/9876543210/2")
    # mul, Linear (error), det, the crash; and add float16, flaky: its failing attempt is
    # kept under `rerun`, and upstream counts rows with reruns as failed runs.
    assert len(failed) == 5


def test_reexport_rewrites_the_same_files_and_nothing_else(
    record: RunRecord, junit_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    write_run(record, out, junit_dir=junit_dir)
    first = _tree(out)
    write_run(RunRecord.load(out / "run.json"), out, junit_dir=junit_dir)
    assert _tree(out) == first


def test_junit_under_out_dir_is_used_by_default(
    record: RunRecord, junit_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (out / "junit").mkdir(parents=True)
    (out / "junit" / "shard-0.xml").write_bytes((junit_dir / "shard-0.xml").read_bytes())
    write_run(record, out)
    names = {r["name"] for r in read_json_lines(out / "hud/test_run/9876543210/2")}
    assert "test_mul_float32" in names
    # Without JUnit the rows come from the results, named by variant id.
    write_run(record, tmp_path / "bare")
    names = {r["name"] for r in read_json_lines(tmp_path / "bare/hud/test_run/9876543210/2")}
    assert names == {r.id for r in record.results}


def _report(path: Path, vid: str, body: str = "", properties: str = "") -> None:
    path.write_text(
        f'<testsuites><testsuite name="pytest"><testcase classname="sample" name="{vid}" '
        f'time="0.25">{properties}{body}</testcase></testsuite></testsuites>'
    )


def test_reruns_become_one_row_keeping_every_attempt(record: RunRecord, tmp_path: Path) -> None:
    """As a run leaves them in junit/: the shard's first attempt, Verify's rerun (whose report
    name sorts first), and the A/B run on the base torch, which is no attempt of it."""
    junit = tmp_path / "junit"
    junit.mkdir()
    vid = "sample::binary_ufunc::add::float16"  # classified flaky in the record
    failing = '<failure message="mismatch at index 3">trace</failure>'
    _report(junit / "shard-0.4242.0.xml", vid, failing)
    _report(junit / "rerun.4242.0.xml", vid)
    _report(junit / "base.4242.0.xml", vid, '<failure message="on the base torch">b</failure>')
    out = tmp_path / "out"
    write_run(record, out, junit_dir=junit)
    rows = [r for r in read_json_lines(out / "hud/test_run/9876543210/2") if r["name"] == vid]
    assert len(rows) == 1
    [row] = rows
    # The last attempt (the rerun, which passed), counted under the shard that ran it first.
    assert row["result"] == "success" and row["failure"] == [] and row["status"] == "passed"
    assert row["rerun"] == [{"type": "", "message": "mismatch at index 3", "text": "trace"}]
    assert row["invoking_file"] == "shard-0.4242.0"
    assert {"name": "result.retried", "value": "rerun"} in row["properties"]
    failed = read_json_lines(out / "hud/failed_test_runs/9876543210/2")
    assert vid in {r["name"] for r in failed}  # as upstream: reruns count as failed runs
    assert RunRecord.load(out / "run.json").evidence_gaps == ()


def test_each_retry_says_what_kind_it_was(record: RunRecord, tmp_path: Path) -> None:
    """A runner's own mark on a retried attempt (torch-spyre's `result.retried`: a stall, a
    zygote that died under the test) is kept, one kind per retry, then Verify's rerun."""
    junit = tmp_path / "junit"
    junit.mkdir()
    vid = "sample::binary_ufunc::mul::float32"  # a new failure in the record
    failed = '<failure message="mul gave 4">t</failure>'
    _report(junit / "shard-0.7.0.xml", vid, '<failure message="Timeout">stalled</failure>')
    mark = '<properties><property name="result.retried" value="stall"/></properties>'
    _report(junit / "shard-0.7.1.xml", vid, failed, mark)
    _report(junit / "rerun.7.0.xml", vid, failed)
    write_run(record, tmp_path / "out", junit_dir=junit)
    [row] = [
        r for r in read_json_lines(tmp_path / "out/hud/test_run/9876543210/2") if r["name"] == vid
    ]
    assert [e["message"] for e in row["rerun"]] == ["Timeout", "mul gave 4"]
    assert {"name": "result.retried", "value": "stall,rerun"} in row["properties"]
    assert row["result"] == "failure"


def test_a_flaky_result_without_its_failing_testcase_keeps_the_attempt(
    record: RunRecord, tmp_path: Path
) -> None:
    """No JUnit of the failing try (only the passing one, or none): the record says it failed
    once, so the row says so."""
    write_run(record, tmp_path / "bare")
    [row] = [
        r
        for r in read_json_lines(tmp_path / "bare/hud/test_run/9876543210/2")
        if r["name"] == "sample::binary_ufunc::add::float16"
    ]
    assert row["result"] == "success" and len(row["rerun"]) == 1
    assert row["rerun"][0]["type"] == "flaky"
    assert {"name": "result.retried", "value": "rerun"} in row["properties"]


def test_a_removed_variant_is_a_skipped_hud_row(record: RunRecord, tmp_path: Path) -> None:
    """A variant an upgrade's new version no longer has reaches the export as `removed`;
    HUD's test_run statuses have no such value (an upgrade run failed to export on it)."""
    from dataclasses import replace

    from dashboard_export.model import Outcome, Status, VariantResult

    gone = Outcome("ops::compare_cpu::gone::float32", Status.REMOVED, 0.0, "no longer in the specs")
    record = replace(record, results=(*record.results, VariantResult.of(gone, None)))
    out = tmp_path / "out"
    write_run(record, out)  # validates every row before writing
    rows = read_json_lines(out / "hud/test_run/9876543210/2")
    (row,) = [r for r in rows if r["name"] == gone.id]
    assert row["status"] == "skipped" and row["result"] == "skipped"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (errno.ENOSPC, WriteUnavailable),  # the machine's: exit 3, never "bad input"
        (errno.EDQUOT, WriteUnavailable),
        (errno.EIO, WriteUnavailable),
        (errno.EACCES, ExportError),  # the path given cannot be written: exit 2
        (errno.EROFS, ExportError),
    ],
)
def test_a_write_that_fails_says_whose_fault_it_is_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, kind: type[Exception]
) -> None:
    target = tmp_path / "run.json"

    def failing(self: Path, data: bytes) -> int:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(Path, "write_bytes", failing)
    with pytest.raises(kind, match=f"{target}: cannot write: {os.strerror(error)}") as caught:
        atomic_write(target, b"{}")
    assert isinstance(caught.value, Unavailable) is (kind is WriteUnavailable)
    assert list(tmp_path.iterdir()) == []
