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


def test_a_scheduled_run_checks_the_waiting_changes_and_a_push_does_not(
    tmp_path: Path, monkeypatch
) -> None:
    """What a worker does after it finishes a run (`spyre-ci pending check` when the run
    was a nightly and changes wait); a check that cannot reach the source is said and
    leaves every change pending, for the next nightly."""
    from contracts.event import TriggerEvent
    from workflows.drivers.pending_check import after_scheduled, waiting_after
    from workflows.run.run_model import RunRequest
    from workflows.settings import Settings

    pending.record(tmp_path, entry("1" * 40, "2026-12-02T12:00:00Z"))
    variables = {
        "SPYRE_CI_STATE_DIR": str(tmp_path),
        "SPYRE_CI_BUILD_INDEX": "http://127.0.0.1:9/simple",  # nothing answers there
        "SPYRE_CI_ENV_CACHE": str(tmp_path / "envs"),
        "SPYRE_CI_GITHUB_URL": "http://127.0.0.1:9",
        "SPYRE_CI_GITHUB_TOKEN": "t",
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env(variables)

    def request(kind: str) -> RunRequest:
        event = TriggerEvent(kind=kind, delivery_id="d", repo="pytorch/pytorch", head_sha="9" * 40)
        return RunRequest(
            run_id=f"{kind}-1", event=event, out_dir=str(tmp_path / "out"), inventory="x"
        )

    said: list[str] = []
    assert waiting_after(request("push"), settings) == 0
    assert after_scheduled(request("push"), settings, said.append) is None and said == []
    assert waiting_after(request("nightly"), Settings.from_env({"SPYRE_CI_STATE_DIR": "/x"})) == 0
    code = after_scheduled(request("nightly"), settings, said.append)
    assert code == 3, said  # the source cannot be read: an outage, tried again next time
    assert said[0].startswith("1 deferred change(s) wait for a build")
    assert [e.head for e in pending.open_entries(tmp_path)] == ["1" * 40]
