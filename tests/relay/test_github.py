"""The GitHub adapter over real HTTP against the local GitHub REST server."""

from __future__ import annotations

import pytest

from contracts.event import ChangedFile
from relay.events import RelayError
from relay.github import GitHubAdapter, GitHubUnavailable
from tests.servers.github_api import GitHubAPIServer

REPO = "pytorch/pytorch"
BASE = "a" * 40
HEAD = "b" * 40


def adapter_for(gh: GitHubAPIServer) -> GitHubAdapter:
    return GitHubAdapter(
        base_url=gh.url,
        token=gh.token,
        app_id=int(gh.app_id),
        installation_id=gh.installation_id,
        private_key_pem=gh.private_key_pem,
    )


def test_compare_lists_files_and_follows_commit_pages(github_api: GitHubAPIServer) -> None:
    github_api.add_comparison(
        REPO,
        BASE,
        HEAD,
        files=[
            "torch/a.py",
            {"filename": "new.py", "status": "added"},
            {"filename": "b.py", "status": "renamed", "previous_filename": "old_b.py"},
        ],
        commits=[f"commit {i}" for i in range(600)],
    )
    files, truncated, messages = adapter_for(github_api).compare_details(REPO, BASE, HEAD)
    assert files == (
        ChangedFile("torch/a.py", "modified"),
        ChangedFile("new.py", "added"),
        ChangedFile("b.py", "renamed", "old_b.py"),
    )
    assert not truncated
    assert len(messages) == 600 and messages[-1] == "commit 599"
    assert len(github_api.find("GET", r"/compare/")) == 3  # 250 + 250 + 100 commits


def test_compare_of_300_files_is_truncated(github_api: GitHubAPIServer) -> None:
    github_api.add_comparison(REPO, BASE, HEAD, files=[f"f{i}.py" for i in range(450)])
    files, truncated = adapter_for(github_api).compare(REPO, BASE, HEAD)
    assert len(files) == 300 and truncated


def test_compare_unknown_range_names_it(github_api: GitHubAPIServer) -> None:
    with pytest.raises(
        RelayError, match="compare pytorch/pytorch aaaaaaaaaaaa...bbbbbbbbbbbb.*404"
    ):
        adapter_for(github_api).compare(REPO, BASE, HEAD)


def test_commit_status_is_posted_with_the_token(github_api: GitHubAPIServer) -> None:
    adapter_for(github_api).set_commit_status(
        "torch-spyre/torch-spyre",
        HEAD,
        "success",
        "spyre-ci/main",
        "42 passed",
        "https://ci.example/run/1",
    )
    (status,) = github_api.statuses[("torch-spyre/torch-spyre", HEAD)]
    assert status["state"] == "success" and status["context"] == "spyre-ci/main"
    assert status["description"] == "42 passed"
    (req,) = github_api.find("POST", r"/statuses/")
    assert req.headers["authorization"] == f"token {github_api.token}"


def test_bad_token_is_a_clear_error(github_api: GitHubAPIServer) -> None:
    adapter = GitHubAdapter(base_url=github_api.url, token="wrong")
    with pytest.raises(RelayError, match="401"):
        adapter.set_commit_status(REPO, HEAD, "success", "ctx")


def test_server_errors_are_retryable(github_api: GitHubAPIServer) -> None:
    adapter = adapter_for(github_api)
    github_api.fail_next("POST", r"/statuses/", status=502)
    with pytest.raises(GitHubUnavailable):
        adapter.set_commit_status(REPO, HEAD, "pending", "ctx")
    adapter.set_commit_status(REPO, HEAD, "pending", "ctx")
    assert len(github_api.statuses[(REPO, HEAD)]) == 1


def test_check_runs_use_an_app_installation_token(github_api: GitHubAPIServer) -> None:
    adapter = adapter_for(github_api)
    run_id = adapter.create_check_run(
        REPO,
        HEAD,
        "crcr/torch-spyre/torch-spyre/ci/test",
        "123:45",
        "in_progress",
        output={"title": "running", "summary": "started"},
    )
    run = github_api.check_runs[run_id]
    assert run["status"] == "in_progress" and run["external_id"] == "123:45"
    adapter.update_check_run(
        REPO, run_id, conclusion="failure", output={"title": "2 failed", "summary": "see report"}
    )
    assert run["status"] == "completed" and run["conclusion"] == "failure"
    assert run["output"]["title"] == "2 failed"
    (token_req,) = github_api.find("POST", r"/app/installations/\d+/access_tokens")
    assert token_req.headers["authorization"].startswith("Bearer ")
    for req in github_api.find("POST", r"/check-runs") + github_api.find("PATCH", r"/check-runs"):
        assert req.headers["authorization"] == f"token {github_api.installation_tokens[0]}"


def test_check_runs_without_app_credentials_say_what_to_set(github_api: GitHubAPIServer) -> None:
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    with pytest.raises(RelayError, match="github.app_id"):
        adapter.create_check_run(REPO, HEAD, "x", "1:2", "queued")


def test_dispatch_sends_repository_dispatch(github_api: GitHubAPIServer) -> None:
    payload = {"event_type": "push", "delivery_id": "d-1", "payload": {"ref": "refs/heads/main"}}
    adapter_for(github_api).dispatch("torch-spyre/torch-spyre", "push", payload)
    assert github_api.dispatches == [
        {"repo": "torch-spyre/torch-spyre", "event_type": "push", "client_payload": payload}
    ]


def test_dispatch_respects_github_caps(github_api: GitHubAPIServer) -> None:
    adapter = adapter_for(github_api)
    with pytest.raises(RelayError, match="10"):
        adapter.dispatch("o/r", "push", {f"k{i}": i for i in range(11)})
    with pytest.raises(RelayError, match="100"):
        adapter.dispatch("o/r", "x" * 101, {})
    assert github_api.dispatches == []
