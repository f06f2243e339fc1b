"""A run exported by the version before the run's shared records moved to `contracts/`
(0f9f032: `data/recorded_run/`, the wire files `write_run` wrote for a record with a partly
applied change, forensics with a bisect's answer and a triage verdict naming the culprit:
run.json, forensics.json, the callback, the HUD envelope, row and per-test rows). Read back,
it holds typed records, and every wire file exported from it again is the same bytes."""

from __future__ import annotations

from pathlib import Path

from contracts.tested import Tested as Verdict
from dashboard_export.layout import write_run
from dashboard_export.model import RunRecord

RECORDED = Path(__file__).parent / "data" / "recorded_run"


def _wire_files(root: Path) -> dict[str, bytes]:
    """Every file but the reports (pages for people, not a wire format)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith("report.")
    }


def test_a_recorded_run_reads_as_typed_records() -> None:
    record = RunRecord.load(RECORDED / "run.json")
    environment = record.environment
    assert environment.tested is Verdict.PARTIAL
    assert environment.change is not None and environment.change.state == "partial"
    assert [f.module for f in environment.change.applied] == ["torch.nn.functional"]


def test_every_file_exported_again_is_the_file_it_was(tmp_path: Path) -> None:
    write_run(RunRecord.load(RECORDED / "run.json"), tmp_path)
    assert _wire_files(tmp_path) == _wire_files(RECORDED)
