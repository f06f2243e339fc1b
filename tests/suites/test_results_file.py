"""The plugin's results file: the codec round-trips, torn and foreign lines carry nothing."""

from __future__ import annotations

from pathlib import Path

from suites.model import Outcome, Status
from suites.results_file import (
    ResultsReader,
    Started,
    end_line,
    parse_line,
    read_outcomes,
    start_line,
)


def test_lines_round_trip() -> None:
    outcome = Outcome("s::t::x::float32", Status.FAILED, 0.25, "E   boom")
    assert parse_line(start_line(outcome.id)) == Started(outcome.id)
    assert parse_line(end_line(outcome)) == outcome


def test_torn_and_foreign_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    ok = Outcome("a", Status.PASSED, 0.1)
    path.write_text(
        start_line("a")
        + end_line(ok)
        + '{"event": "end", "id": "b", "stat'
        + "\n"
        + '{"event": "end", "id": "c", "status": "nope"}\n[1]\n'
        + start_line("d"),
        encoding="utf-8",
    )
    assert read_outcomes([path]) == {"a": ok}


def test_the_incremental_reader_waits_for_a_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("", encoding="utf-8")
    reader = ResultsReader(path)
    try:
        line = end_line(Outcome("a", Status.PASSED))
        with path.open("a", encoding="utf-8") as fh:
            fh.write(start_line("a") + line[:10])
        assert reader.read() == [Started("a")]
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line[10:])
        assert reader.read() == [Outcome("a", Status.PASSED)]
    finally:
        reader.close()
