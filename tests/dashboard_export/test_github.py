"""Commit status and check run through relay.github.GitHubAdapter and the local GitHub server."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dashboard_export import ExportError, PublishUnavailable
from dashboard_export.github import check_name, publish_github
from dashboard_export.model import RunRecord
from dashboard_export.retry import RetryPolicy
from relay.github import GitHubAdapter
from tests.servers.github_api import GitHubAPIServer

UPSTREAM = "pytorch/pytorch"


def _adapter(gh: GitHubAPIServer, app: bool = True) -> GitHubAdapter:
    return GitHubAdapter(
        base_url=gh.url,
        token=gh.token,
        app_id=int(gh.app_id) if app else None,
        installation_id=gh.installation_id if app else None,
        private_key_pem=gh.private_key_pem if app else None,
    )


def test_commit_status_pending_then_final(record: RunRecord, github_api: GitHubAPIServer) -> None:
    adapter = _adapter(github_api, app=False)
    publish_github(record, adapter, status="in_progress")
    result = publish_github(record, adapter)
    statuses = github_api.statuses[(UPSTREAM, "b" * 40)]
    assert [s["state"] for s in statuses] == ["pending", "failure"]
    final = statuses[-1]
    assert final["context"] == "crcr/torch-spyre/torch-spyre/spyre-ci/variants (shard 1/1)"
    assert final["context"] == result.context == check_name(record)
    assert final["description"] == "3 new failures, 1 known, 3 passed of 9"
    assert final["target_url"] == record.run_url


def test_check_run_is_created_once_and_updated_on_reexport(
    record: RunRecord, github_api: GitHubAPIServer, tmp_path: Path
) -> None:
    adapter = _adapter(github_api)
    state = tmp_path / "github.json"
    first = publish_github(
        record, adapter, status="in_progress", commit_status=False, check_run=True, state_path=state
    )
    assert first.check_run_created
    run = github_api.check_runs[first.check_run_id]  # type: ignore[index]
    assert run["name"] == "crcr/torch-spyre/torch-spyre/spyre-ci/variants (shard 1/1)"
    assert run["external_id"] == "9876543210:4242" and run["status"] == "in_progress"
    assert run["head_sha"] == "b" * 40

    again = publish_github(record, adapter, commit_status=False, check_run=True, state_path=state)
    publish_github(record, adapter, commit_status=False, check_run=True, state_path=state)
    assert not again.check_run_created and again.check_run_id == first.check_run_id
    assert len(github_api.check_runs) == 1
    run = github_api.check_runs[first.check_run_id]  # type: ignore[index]
    assert run["status"] == "completed" and run["conclusion"] == "failure"
    assert "New failures (3)" in run["output"]["summary"]
    assert run["output"]["title"] == "3 new failures, 1 known, 3 passed of 9"


def test_green_run_and_github_errors(record: RunRecord, github_api: GitHubAPIServer) -> None:
    green = dataclasses.replace(
        record, results=tuple(r for r in record.results if not r.status.is_failure)
    )
    publish_github(green, _adapter(github_api, app=False))
    assert github_api.statuses[(UPSTREAM, "b" * 40)][-1]["state"] == "success"
    with pytest.raises(ExportError, match="check runs need a GitHub App"):
        publish_github(record, _adapter(github_api, app=False), commit_status=False, check_run=True)
    github_api.fail_next("POST", r"/statuses/", status=422)
    with pytest.raises(ExportError, match=r"GitHub crcr/.* on pytorch/pytorch@bbbbbbbbbbbb"):
        publish_github(record, _adapter(github_api, app=False))
    github_api.fail_next("POST", r"/statuses/", status=502, times=2)
    with pytest.raises(PublishUnavailable, match=r"GitHub crcr/.* on pytorch/pytorch@bbbbbbbbbbbb"):
        # A cap that leaves room for one retry: both attempts answered 502.
        publish_github(
            record,
            _adapter(github_api, app=False),
            policy=RetryPolicy(cap_s=1.5),
            sleep=lambda _s: None,
        )
