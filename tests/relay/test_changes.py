"""GitHub compare patches as a change's diff (`relay.changes`) and the contents API
(`GitHubAdapter.file_at`), over real HTTP against the local GitHub REST server."""

from __future__ import annotations

import base64

import pytest
import requests

import selector
from contracts.event import ChangedFile, TriggerEvent
from relay.changes import complete_files, diff_of
from relay.github import GitHubAdapter, GitHubUnavailable
from tests.servers.github_api import GitHubAPIServer

REPO = "pytorch/pytorch"
BASE = "a" * 40
HEAD = "b" * 40
PATCH = "@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2"


def event(complete: bool, files: tuple[ChangedFile, ...] = ()) -> TriggerEvent:
    return TriggerEvent(
        kind="push" if complete else "pull_request",
        delivery_id="d-1",
        repo=REPO,
        head_sha=HEAD,
        base_sha=BASE,
        files=files,
        files_complete=complete,
    )


def test_a_push_gets_the_compare_patches_as_its_diff(github_api: GitHubAPIServer) -> None:
    github_api.add_comparison(
        REPO,
        BASE,
        HEAD,
        files=[
            {"filename": "torch/a.py", "patch": PATCH},
            {"filename": "torch/lib/big.so", "patch": None},  # binary: GitHub sends no patch
            {
                "filename": "torch/b.py",
                "status": "renamed",
                "previous_filename": "torch/c.py",
                "changes": 0,
                "patch": None,
            },
        ],
    )
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    pushed = event(
        True,
        (
            ChangedFile("torch/a.py", "modified"),
            ChangedFile("torch/lib/big.so", "modified"),
            ChangedFile("torch/b.py", "renamed", "torch/c.py"),
        ),
    )
    done = complete_files(pushed, adapter)
    assert done.files == pushed.files and done.files_complete and not done.truncated
    assert done.diff_text is not None
    changes = selector.ChangeSet.from_event(done, done.diff_text)
    # The file without a patch is a path without one, never a change seen whole.
    assert set(changes.patches) == {"torch/a.py", "torch/b.py"}
    assert {p.path for p in changes.paths} == {"torch/a.py", "torch/lib/big.so", "torch/b.py"}
    assert changes.patches["torch/a.py"].hunks and not changes.truncated
    # A diff known already is not asked for again; the JSON form carries it only when set.
    assert complete_files(done, adapter) is done
    assert len(github_api.find("GET", "/compare/")) == 1
    assert TriggerEvent.from_json(done.to_json()).diff_text == done.diff_text
    assert "diff_text" not in pushed.to_json()


def test_a_push_goes_on_without_patches_when_github_fails(
    github_api: GitHubAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    pushed = event(True, (ChangedFile("torch/a.py", "modified"),))
    github_api.fail_next("GET", "/compare/", status=502)
    assert complete_files(pushed, adapter) is pushed
    assert complete_files(pushed, adapter) is pushed  # unknown range: 404
    assert "no patches from GitHub" in caplog.text
    # Without its file list a pull request cannot go on: the delivery is retried.
    github_api.fail_next("GET", "/compare/", status=502)
    with pytest.raises(GitHubUnavailable):
        complete_files(event(False), adapter)


def test_a_truncated_compare_stays_truncated_with_its_patches(
    github_api: GitHubAPIServer,
) -> None:
    github_api.add_comparison(REPO, BASE, HEAD, files=[f"torch/f{i}.py" for i in range(450)])
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    done = complete_files(event(False), adapter)
    assert len(done.files) == 300 and done.truncated and not done.files_complete
    changes = selector.ChangeSet.from_event(done, done.diff_text)
    assert changes.truncated and len(changes.patches) == 300


def test_the_diff_is_bounded_and_files_past_the_bound_keep_their_path() -> None:
    entries = [{"filename": f"f{i}.py", "status": "modified", "patch": PATCH} for i in range(4)]
    text = diff_of(entries, limit=2 * len(PATCH))
    assert text is not None
    assert [f.path for f in selector.ChangeSet.from_diff(text).paths] == ["f0.py", "f1.py"]
    assert diff_of([{"filename": "x.bin", "status": "modified"}]) is None


def test_file_at_reads_a_file_at_a_sha(github_api: GitHubAPIServer) -> None:
    text = "TORCH_IMPL_FUNC(softmax_cpu_out)\n(const Tensor& input) {\n}\n"
    path = "aten/src/ATen/native/SoftMax.cpp"
    github_api.add_file(REPO, BASE, path, text)
    github_api.add_file(REPO, BASE, "aten/src/ATen/native/blob.bin", b"\xff\xfe\x00")
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    assert adapter.file_at(REPO, path, BASE) == text
    (asked,) = github_api.find("GET", "/contents/")
    assert asked.query["ref"] == [BASE] and "raw" in asked.headers["accept"]
    assert adapter.file_at(REPO, path, HEAD) is None  # not at that sha: 404
    assert adapter.file_at(REPO, "aten/src", BASE) is None  # a directory
    assert adapter.file_at(REPO, path, BASE, max_bytes=10) is None
    assert adapter.file_at(REPO, "aten/src/ATen/native/blob.bin", BASE) is None
    github_api.fail_next("GET", "/contents/", status=503)
    with pytest.raises(GitHubUnavailable):
        adapter.file_at(REPO, path, BASE)


def test_the_contents_api_object_form_is_githubs(github_api: GitHubAPIServer) -> None:
    small, large = "x = 1\n" * 10, "y" * (1024 * 1024 + 1)
    github_api.add_file(REPO, BASE, "torch/small.py", small)
    github_api.add_file(REPO, BASE, "torch/large.py", large)
    headers = {"Authorization": f"token {github_api.token}"}
    url = f"{github_api.api_url}/repos/{REPO}/contents"
    obj = requests.get(f"{url}/torch/small.py", params={"ref": BASE}, headers=headers, timeout=5)
    body = obj.json()
    assert body["type"] == "file" and body["encoding"] == "base64" and body["size"] == len(small)
    assert base64.b64decode(body["content"]).decode() == small
    big = requests.get(f"{url}/torch/large.py", params={"ref": BASE}, headers=headers, timeout=5)
    assert big.json()["encoding"] == "none" and big.json()["content"] == ""
    listing = requests.get(f"{url}/torch", params={"ref": BASE}, headers=headers, timeout=5)
    assert sorted(e["name"] for e in listing.json()) == ["large.py", "small.py"]
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    assert adapter.file_at(REPO, "torch/large.py", BASE) == large  # raw media type: any size
