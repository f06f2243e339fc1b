"""Every answer from GitHub is checked before it is used: an answer of a shape GitHub's API
does not document (a JSON array for an object, a file entry without its name, an HTML page)
is an outage named in one line (`GitHubUnavailable`, exit 3), never a traceback and never an
answer read in part. Over real HTTP, against the local GitHub answering oddly."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts.errors import Unavailable
from relay.github import GitHubAdapter, GitHubRefused, GitHubUnavailable
from tests.servers.odd_github import OddGitHub
from tests.testing.paths import GLU_SPEC, REPO_ROOT

REPO = "pytorch/pytorch"
BASE = "a" * 40
HEAD = "b" * 40
GLU = "glu::compare_cpu::glu::float32"


@pytest.fixture()
def odd() -> Iterator[OddGitHub]:
    with OddGitHub() as server:
        server.add_comparison(REPO, BASE, HEAD, files=["torch/a.py"], commits=["one"])
        server.add_commits(
            REPO,
            "c" * 40,
            "d" * 40,
            [{"sha": "d" * 40, "message": "m", "files": [{"filename": "torch/a.py"}]}],
        )
        yield server


def _adapter(gh: OddGitHub) -> GitHubAdapter:
    return GitHubAdapter(
        base_url=gh.url,
        token=gh.token,
        app_id=int(gh.app_id),
        installation_id=gh.installation_id,
        private_key_pem=gh.private_key_pem,
    )


def _commit(files: Any) -> dict[str, Any]:
    return {"sha": "d" * 40, "commit": {"message": "m"}, "files": files}


Call = Callable[[GitHubAdapter], object]
COMPARE: Call = lambda a: a.comparison(REPO, BASE, HEAD)  # noqa: E731
WINDOW: Call = lambda a: a.window_commits(REPO, BASE, HEAD)  # noqa: E731
ENTRIES: Call = lambda a: a.commit_entries(REPO, "d" * 40)  # noqa: E731
DATE: Call = lambda a: a.commit_date(REPO, "d" * 40)  # noqa: E731
CONTENTS: Call = lambda a: a.file_at(REPO, "torch/a.py", HEAD)  # noqa: E731
PULLS: Call = lambda a: a.has_open_pull(REPO, "me:branch")  # noqa: E731
SUITE: Call = lambda a: a.suite_check_runs(REPO, 7)  # noqa: E731
STATUS: Call = lambda a: a.set_commit_status(REPO, HEAD, "success", "ctx")  # noqa: E731

CASES = [
    # (call, path answered oddly, body, what the message says)
    (COMPARE, r"/compare/", ["torch/a.py"], "the answer is a JSON array, not an object"),
    (COMPARE, r"/compare/", {"files": {"torch/a.py": 1}}, "files is a JSON object, not an array"),
    (COMPARE, r"/compare/", {"files": [{"status": "added"}]}, "files[0].filename is a JSON null"),
    (COMPARE, r"/compare/", {"files": [{"filename": 7}]}, "files[0].filename is a JSON number"),
    (
        COMPARE,
        r"/compare/",
        {"files": [{"filename": "a.py", "patch": ["@@"]}]},
        "files[0].patch is a JSON array, not a string",
    ),
    (COMPARE, r"/compare/", {"commits": ["c0ffee"]}, "commits[0] is a JSON string, not an object"),
    (COMPARE, r"/compare/", {"commits": [{"sha": None}]}, "commits[0].sha is a JSON null"),
    (COMPARE, r"/compare/", {"status": 3}, "status is a JSON number, not a string"),
    (COMPARE, r"/compare/", {"ahead_by": "many"}, "ahead_by is a JSON string, not a count"),
    (COMPARE, r"/compare/", b"<html>Bad gateway</html>", "not JSON"),
    (WINDOW, r"/compare/", [], "the answer is a JSON array, not an object"),
    (WINDOW, r"/compare/", {"commits": [{"sha": "d" * 40, "commit": "m"}]}, "commits[0].commit"),
    (ENTRIES, r"/commits/d+$", _commit([{"patch": "@@"}]), "files[0].filename is a JSON null"),
    (ENTRIES, r"/commits/d+$", _commit("torch/a.py"), "files is a JSON string, not an array"),
    (DATE, r"/commits/d+$", ["d" * 40], "the answer is a JSON array, not an object"),
    (DATE, r"/commits/d+$", {"commit": {"committer": "today"}}, "commit.committer is a JSON"),
    (CONTENTS, r"/contents/", {"name": "a.py"}, "the answer.type is a JSON null"),
    (CONTENTS, r"/contents/", {"type": "file", "encoding": "base64", "content": "x"}, "base64"),
    (PULLS, r"/pulls$", {"total_count": 1}, "a JSON object where a list of pull requests"),
    (SUITE, r"/check-runs$", [{"name": "x"}], "the answer is a JSON array, not an object"),
    (STATUS, r"/statuses/", ["created"], "github3 could not read it"),
]


@pytest.mark.parametrize(
    ("call", "path", "body", "says"),
    CASES,
    ids=[
        "compare-array",
        "compare-files-object",
        "compare-file-without-name",
        "compare-file-name-number",
        "compare-patch-array",
        "compare-commit-string",
        "compare-commit-without-sha",
        "compare-status-number",
        "compare-count-text",
        "compare-html",
        "window-array",
        "window-commit-detail-string",
        "commit-file-without-name",
        "commit-files-string",
        "commit-date-array",
        "commit-date-person-string",
        "contents-without-type",
        "contents-bad-base64",
        "pulls-object",
        "check-runs-array",
        "status-array",
    ],
)
def test_an_answer_of_another_shape_is_an_outage_named_in_one_line(
    odd: OddGitHub, call: Call, path: str, body: Any, says: str
) -> None:
    headers = {"Content-Type": "text/html"} if isinstance(body, bytes) else {}
    if call is STATUS:  # GitHub creates a status: 201
        odd.answer("POST", path, body, status=201)
    else:
        odd.answer("GET", path, body, headers=headers)
    with pytest.raises(GitHubUnavailable) as caught:
        call(_adapter(odd))
    message = str(caught.value)
    assert isinstance(caught.value, Unavailable)  # exit 3 at the command line
    assert says in message, message
    assert "GitHub's answer is not what its API documents" in message
    assert "\n" not in message


def test_the_answers_github_documents_still_read(odd: OddGitHub) -> None:
    """The checks refuse nothing GitHub sends: the local GitHub's documented answers."""
    adapter = _adapter(odd)
    found = adapter.comparison(REPO, BASE, HEAD)
    assert [f.path for f in found.files] == ["torch/a.py"] and found.status == "ahead"
    assert found.commit_messages == ("one",) and len(found.commit_shas) == 1
    (commit,) = adapter.window_commits(REPO, "c" * 40, "d" * 40)
    assert commit.sha == "d" * 40 and commit.message == "m"
    assert [e["filename"] for e in adapter.commit_entries(REPO, "d" * 40)] == ["torch/a.py"]
    assert adapter.commit_date(REPO, "d" * 40) == "2026-11-01T00:00:00Z"
    odd.add_file(REPO, HEAD, "torch/a.py", "x = 1\n")
    assert adapter.file_at(REPO, "torch/a.py", HEAD) == "x = 1\n"
    assert adapter.file_at(REPO, "torch/missing.py", HEAD) is None
    assert adapter.has_open_pull(REPO, "me:branch") is False


def test_a_refusal_with_a_body_of_another_shape_is_still_a_refusal(odd: OddGitHub) -> None:
    odd.answer("GET", r"/compare/", ["no", "such", "range"], status=404)
    with pytest.raises(GitHubRefused, match=r"GitHub answered 404: \[\"no\""):
        _adapter(odd).comparison(REPO, BASE, HEAD)


def test_bisect_over_a_compare_that_answers_a_list_is_exit_3_in_one_line(
    odd: OddGitHub, tmp_path: Path
) -> None:
    """The command line: what used to be a traceback (`'list' object has no attribute 'get'`)
    is an infrastructure error naming the call and what was wrong, and nothing is kept."""
    odd.answer("GET", r"/compare/", [{"sha": BASE}, {"sha": HEAD}])
    state = tmp_path / "state"
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(state),
        "SPYRE_CI_GITHUB_URL": odd.url,
        "SPYRE_CI_GITHUB_TOKEN": odd.token,
    }
    done = subprocess.run(
        [sys.executable, "-m", "workflows", "bisect", "--specs", str(GLU_SPEC)]
        + ["--last-good", BASE, "--first-bad", HEAD, "--variant", GLU],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("spyre-ci: ")]
    assert "Traceback" not in done.stderr
    (line,) = [ln for ln in lines if "infrastructure error" in ln]
    assert "compare pytorch/pytorch aaaaaaaaaaaa...bbbbbbbbbbbb" in line
    assert "the answer is a JSON array, not an object" in line
    assert not (state / "bisect" / f"{BASE[:12]}-{HEAD[:12]}.json").exists()
