"""The run folder's layout, from one object: pure paths, no folder needed."""

from __future__ import annotations

from pathlib import Path

from contracts.event import TriggerEvent
from workflows.run.layout import BASE_SHARD, RunLayout, junit_dir, shard_name, work_root
from workflows.run.run_model import RunRequest


def test_a_runs_files_are_named_by_its_layout() -> None:
    layout = RunLayout(Path("/runs/out"), "push-abc-1")
    assert layout.plan_file == Path("/runs/out/plan.json")
    assert layout.planned_file == Path("/runs/out/planned.json")
    assert layout.junit == junit_dir("/runs/out") == Path("/runs/out/junit")
    assert layout.work == Path("/runs/out/work/push-abc-1")
    assert layout.trace_ids == Path("/runs/out/work/push-abc-1/trace-ids.txt")
    assert layout.shard(shard_name(2)) == Path("/runs/out/work/push-abc-1/shard-2")
    assert layout.shard(BASE_SHARD) == Path("/runs/out/work/push-abc-1/base")


def test_shard_names_are_the_plans_indexes_and_base_is_not_one_of_them() -> None:
    names = RunLayout(Path("o"), "r").shard_names(3)
    assert names == ["shard-0", "shard-1", "shard-2"]
    assert BASE_SHARD not in names
    assert RunLayout(Path("o"), "r").shard_names(0) == []


def test_two_runs_in_one_out_directory_share_no_work_folder() -> None:
    one, two = RunLayout(Path("out"), "one"), RunLayout(Path("out"), "two")
    assert one.work != two.work and one.work.parent == two.work.parent == work_root("out")
    assert one.plan_file == two.plan_file  # the out directory holds one run's plan at a time
    # What a new run clears: every run's work and the JUnit files, nothing else.
    assert one.stale == (Path("out/work"), Path("out/junit"))


def test_a_requests_layout_is_its_out_dir_and_run_id(tmp_path: Path) -> None:
    event = TriggerEvent(kind="push", delivery_id="d", repo="pytorch/pytorch", head_sha="a" * 40)
    request = RunRequest(
        run_id="push-aaaaaaaa-1",
        event=event,
        out_dir=str(tmp_path / "out"),
        inventory=str(tmp_path / "inv.json.gz"),
    )
    assert RunLayout.of(request) == RunLayout(tmp_path / "out", "push-aaaaaaaa-1")


def test_the_runs_files_are_found_in_its_shard_folders(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "r")
    for shard, name in (("shard-0", "trace.ndjson"), ("shard-1", "shard-1.steal1.trace.ndjson")):
        (layout.shard(shard)).mkdir(parents=True)
        (layout.shard(shard) / name).write_text("", encoding="utf-8")
        (layout.shard(shard) / "started_at").write_text("1\n", encoding="utf-8")
    (layout.work / "trace.ndjson").write_text("", encoding="utf-8")  # not in a shard's folder
    assert [p.relative_to(layout.work).as_posix() for p in layout.trace_files()] == [
        "shard-0/trace.ndjson",
        "shard-1/shard-1.steal1.trace.ndjson",
    ]
    assert len(layout.started_files("started_at")) == 2
