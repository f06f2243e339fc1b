"""The store of changes deferred to a build (`workflows.stores.pending`): one file per head,
the first record kept, judged entries marked, unreadable files named and skipped; and
`spyre-ci pending` on it."""

from __future__ import annotations

from pathlib import Path

from tests.testing.cli import cli
from workflows.stores import pending


def entry(head: str, at: str) -> pending.PendingChange:
    return pending.PendingChange(
        repo="pytorch/pytorch",
        base="b" * 40,
        head=head,
        delivery_id=f"d-{head[:4]}",
        message="[ATen] softmax kernel",
        files=("aten/src/ATen/native/SoftMax.cpp",),
        selected=("ops::compare_cpu::softmax::float16",),
        base_build="c" * 40,
        base_build_version="2.16.0.dev20261201",
        diff_text="diff --git a/x b/x\n",
        run_id=f"push-{head[:8]}",
        recorded_at=at,
        payload={"after": head},
    )


def test_deferred_changes_are_kept_until_judged(tmp_path: Path) -> None:
    first, second = entry("1" * 40, "2026-12-02T12:00:00Z"), entry("2" * 40, "2026-12-02T11:00:00Z")
    pending.record(tmp_path, first)
    pending.record(tmp_path, second)
    pending.record(tmp_path, entry("1" * 40, "2026-12-03T00:00:00Z"))  # a second run: kept first
    assert [e.head for e in pending.open_entries(tmp_path)] == ["2" * 40, "1" * 40]
    assert pending.entries(tmp_path)[1].recorded_at == "2026-12-02T12:00:00Z"
    assert pending.entries(tmp_path)[1] == first  # every field reads back as written

    done = pending.mark(tmp_path, second, {"run_id": "r-9", "exit_code": 1, "build": "e" * 40})
    assert done.state == "ran" and done.ran["exit_code"] == 1
    assert [e.head for e in pending.open_entries(tmp_path)] == ["1" * 40]

    listed = cli("pending", "list", env={"SPYRE_CI_STATE_DIR": str(tmp_path)})
    assert listed.returncode == 0, listed.stderr
    assert "judged by run r-9 on eeeeeeeeeeee (exit 1)" in listed.stdout
    assert "waiting for a build that holds it (first run on cccccccccccc)" in listed.stdout


def test_an_unreadable_record_is_named_and_the_rest_still_read(tmp_path: Path, capsys) -> None:
    pending.record(tmp_path, entry("1" * 40, "2026-12-02T12:00:00Z"))
    (pending.folder(tmp_path) / f"{'3' * 40}.json").write_text("{cut")
    assert [e.head for e in pending.entries(tmp_path)] == ["1" * 40]
    assert f"{'3' * 40}.json: not a readable pending change" in capsys.readouterr().err


def test_check_without_a_source_of_builds_is_bad_input(tmp_path: Path) -> None:
    done = cli("pending", "check", env={"SPYRE_CI_STATE_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert "SPYRE_CI_BUILD_INDEX is not set" in done.stderr
