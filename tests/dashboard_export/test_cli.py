"""`spyre-ci export` end to end: files, HUD, GitHub, re-export."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard_export.model import RunRecord
from tests.servers.github_api import GitHubAPIServer
from tests.servers.hud import HudServer
from workflows.cli.main import main


def test_export_writes_and_publishes_idempotently(
    record: RunRecord,
    junit_dir: Path,
    tmp_path: Path,
    hud_server: HudServer,
    github_api: GitHubAPIServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record.save(run_dir / "run.json")
    monkeypatch.setenv("SPYRE_CI_HUD_URL", hud_server.url)
    monkeypatch.setenv("SPYRE_CI_HUD_BOT_KEY", hud_server.bot_key)
    monkeypatch.setenv("SPYRE_CI_GITHUB_URL", github_api.url)
    monkeypatch.setenv("SPYRE_CI_GITHUB_TOKEN", github_api.token)
    monkeypatch.setenv("SPYRE_CI_GITHUB_APP_ID", github_api.app_id)
    monkeypatch.setenv("SPYRE_CI_GITHUB_INSTALLATION_ID", str(github_api.installation_id))
    key = tmp_path / "app.pem"
    key.write_bytes(github_api.private_key_pem)
    monkeypatch.setenv("SPYRE_CI_GITHUB_PRIVATE_KEY", str(key))
    argv = [
        "export",
        str(run_dir),
        "--junit",
        str(junit_dir),
        "--hud",
        "--allow-http",
        "--github-status",
        "--github-check-run",
    ]
    for _ in range(2):
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrote 9 files" in out and "HUD: 200 after 1 attempt(s)" in out
    assert "check run" in out and "updated" in out
    assert (run_dir / "report.html").is_file() and (run_dir / "github.json").is_file()
    assert len(hud_server.rows) == 1 and len(github_api.check_runs) == 1


def test_export_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path)]) == 2
    assert f"{tmp_path / 'run.json'}: no such run record" in capsys.readouterr().err
    assert main(["export"]) == 2
    assert "needs RUN_DIR or --record" in capsys.readouterr().err
