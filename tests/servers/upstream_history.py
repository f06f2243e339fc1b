"""A simulated upstream PyTorch history, answered by the local GitHub (tests/servers/github_api.py).

`UpstreamHistory` is a linear chain of commits over a few tracked files: a root commit (its
texts given), then `commit(...)` after `commit(...)`, each with its message, date, changed
files and touched build files. Every commit's tree is kept, so the difference between ANY two
commits is known.

`UpstreamGitHubServer` is a `GitHubAPIServer` that answers from registered histories, computed
on request (nothing registered per pair):

- `GET /repos/{repo}/compare/{base}...{head}`: `status` "identical", "ahead" (base is an
  ancestor of head) or "behind" (head is an ancestor of base), `ahead_by`, `behind_by`,
  `total_commits`, the commits after the merge base up to head (oldest first, their real shas,
  messages, author and committer dates, parents), and `files`: the change from the merge base
  to head per path (added / removed / modified), each with GitHub's `patch` (hunks only, 3
  lines of context, no `---`/`+++` header). Like GitHub's three-dot compare, "behind" lists no
  commits and no files: the merge base is head itself.
- `GET /repos/{repo}/commits/{sha}`: the commit with its own `files` (the root: every file
  added) and dates.
- `GET /repos/{repo}/contents/{path}?ref=`: the tracked files at a commit of the history
  (`ref` a sha, a unique prefix of 7 or more, or `main`: the newest commit).

Refs the history does not know fall through to `GitHubAPIServer` (what `add_comparison`,
`add_commits`, `add_file` registered; else 404 for a compare, 422 for a commit).

Why a subclass: `GitHubAPIServer`'s registrations store fixed answers (every compare
`ahead`, `behind_by` 0, every date "2026-11-01T00:00:00Z"), so they cannot say "behind", give
dates, or avoid registering all O(N^2) pairs; overriding its `_compare`, `_commit` and
`_contents` handlers answers from the history instead, leaving github_api.py unchanged.

Build files (`build_files=`, e.g. `aten/src/ATen/native/SoftMax.cpp`) are C++ sources the
simulated upstream only rebuilds: each touch appends a made-up line. A build file not in the
root texts is taken to have existed since the root with a one-line made-up text, so every
patch applies to `snapshot(base)`.
"""

from __future__ import annotations

import difflib
import hashlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.servers.github_api import (
    COMPARE_FILE_CAP,
    GitHubAPIServer,
    RecordedRequest,
    _file_object,
    _pages,
    commit_object,
)

DEFAULT_BRANCH = "main"
DEFAULT_AUTHOR = "Upstream Dev"
_SHORT_SHA = 7


@dataclass(frozen=True)
class HistoryCommit:
    """One commit: `changes` maps each touched path to its text after it (None: removed)."""

    sha: str
    parent: str | None
    message: str
    date: str  # GitHub's form, UTC: 2026-11-01T00:00:00Z
    author: str
    changes: Mapping[str, str | None]
    build_files: tuple[str, ...]


class UpstreamHistory:
    """A linear upstream history; `root` is the sha of the root commit (`root_texts`)."""

    def __init__(
        self,
        root_texts: Mapping[str, str],
        *,
        root_message: str = "Simulated upstream root",
        root_date: str = "2026-10-01T00:00:00Z",
        author: str = DEFAULT_AUTHOR,
    ) -> None:
        seed = "\0".join(f"{p}\0{t}" for p, t in sorted(root_texts.items()))
        sha = hashlib.sha1(f"root\n{root_message}\n{seed}".encode()).hexdigest()
        root = HistoryCommit(
            sha, None, root_message, _github_date(root_date), author, dict(root_texts), ()
        )
        self._commits: list[HistoryCommit] = [root]
        self._index: dict[str, int] = {sha: 0}
        self._trees: list[dict[str, str | None]] = [dict(root_texts)]
        self._implicit: dict[str, str] = {}  # build files that exist since the root
        self._build_touches: dict[str, int] = {}
        self._entries: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self._lock = threading.RLock()

    # -- building the history -------------------------------------------------------------------

    def commit(
        self,
        message: str,
        date: str,
        files: Mapping[str, str | None],
        build_files: Sequence[str] = (),
        *,
        author: str = DEFAULT_AUTHOR,
    ) -> str:
        """Add a commit on top of `head`: each path of `files` gets its text (None removes
        it), each build file a made-up change; returns its sha (from parent and message)."""
        with self._lock:
            parent = self._commits[-1]
            tree = dict(self._trees[-1])
            when = _github_date(date)
            sha = hashlib.sha1(f"{parent.sha}\n{message}".encode()).hexdigest()
            if sha in self._index:
                raise ValueError(f"commit {sha} is already in the history")
            both = set(files) & set(build_files)
            if both:
                raise ValueError(f"in both files and build_files: {sorted(both)}")
            changes: dict[str, str | None] = {}
            title = message.split("\n", 1)[0][:50]
            for path, text in files.items():
                if text is None and self._text(tree, path) is None:
                    raise ValueError(f"{path}: removed, but not in the tree")
                changes[path] = text
            for path in build_files:
                if path not in tree and path not in self._implicit:
                    self._implicit[path] = f"// {path}: simulated upstream build source\n"
                touch = self._build_touches.get(path, 0) + 1
                self._build_touches[path] = touch
                old = self._text(tree, path) or ""
                changes[path] = f"{old}// simulated build change {touch}: {title}\n"
            tree.update(changes)
            self._commits.append(
                HistoryCommit(
                    sha,
                    parent.sha,
                    message,
                    when,
                    author,
                    changes,
                    tuple(build_files),
                )
            )
            self._index[sha] = len(self._commits) - 1
            self._trees.append(tree)
            return sha

    # -- reading it -------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return self._commits[0].sha

    @property
    def head(self) -> str:
        with self._lock:
            return self._commits[-1].sha

    @property
    def commits(self) -> tuple[HistoryCommit, ...]:
        """Every commit, the root first."""
        with self._lock:
            return tuple(self._commits)

    def resolve(self, ref: str) -> str | None:
        """The full sha of `ref` (a sha, a unique prefix of 7 or more, or `main`), or None."""
        with self._lock:
            if ref == DEFAULT_BRANCH:
                return self._commits[-1].sha
            if ref in self._index:
                return ref
            if len(ref) >= _SHORT_SHA:
                found = [sha for sha in self._index if sha.startswith(ref)]
                if len(found) == 1:
                    return found[0]
            return None

    def snapshot(self, ref: str) -> dict[str, str]:
        """Every tracked file's text at `ref` (build files included)."""
        i = self._position(ref)
        with self._lock:
            merged = {**self._implicit, **self._trees[i]}
        return {p: t for p, t in merged.items() if t is not None}

    def text_at(self, ref: str, path: str) -> str | None:
        """The text of `path` at `ref`, None when it is not there."""
        i = self._position(ref)
        with self._lock:
            return self._text(self._trees[i], path)

    def files_between(
        self, base: str, head: str, repo: str = "pytorch/pytorch"
    ) -> list[dict[str, Any]]:
        """GitHub file entries of the change from `base` to `head` (base an ancestor, or
        the same commit), sorted by path; each with its `patch`, unless the file is empty."""
        i, j = self._position(base), self._position(head)
        if i > j:
            raise ValueError(f"{base} is not an ancestor of {head}")
        return [dict(e) for e in self._between(i, j, repo)]

    def register(self, server: GitHubAPIServer, repo: str = "pytorch/pytorch") -> None:
        """Have `server` (an `UpstreamGitHubServer`) answer for `repo` from this history,
        including commits added later."""
        if not isinstance(server, UpstreamGitHubServer):
            raise TypeError(
                "a GitHubAPIServer answers fixed registrations only; start an "
                "UpstreamGitHubServer (or the `upstream_github` fixture) to serve a history"
            )
        server.histories[repo] = self

    # -- internals -----------------------------------------------------------------------------

    def _position(self, ref: str) -> int:
        sha = self.resolve(ref)
        if sha is None:
            raise KeyError(f"not a commit of the history: {ref}")
        return self._index[sha]

    def _text(self, tree: Mapping[str, str | None], path: str) -> str | None:
        return tree[path] if path in tree else self._implicit.get(path)

    def _between(self, i: int, j: int, repo: str) -> list[dict[str, Any]]:
        """File entries from commit `i` to commit `j` (i <= j; i == -1: from nothing)."""
        with self._lock:
            cached = self._entries.get((i, j))
            if cached is not None:
                return cached
            old_tree: Mapping[str, str | None] = self._trees[i] if i >= 0 else {}
            new_tree = self._trees[j]
            paths: set[str] = set()
            if i < 0:
                paths.update(new_tree, self._implicit)
            for k in range(max(i, 0) + 1, j + 1):
                paths.update(self._commits[k].changes)
            head = self._commits[j].sha
            entries = []
            for path in sorted(paths):
                old = self._text(old_tree, path) if i >= 0 else None
                new = self._text(new_tree, path)
                if old != new:
                    entries.append(_entry(repo, head, path, old, new))
            self._entries[(i, j)] = entries
            return entries

    def _commit_object(self, api: str, index: int) -> dict[str, Any]:
        commit = self._commits[index]
        body = commit_object(api, commit.sha, commit.message, commit.author)
        for role in ("author", "committer"):
            body["commit"][role] = {**body["commit"][role], "date": commit.date}
        if commit.parent is not None:
            web = api.replace("/api/v3/repos", "")
            body["parents"] = [
                {
                    "sha": commit.parent,
                    "url": f"{api}/commits/{commit.parent}",
                    "html_url": f"{web}/commit/{commit.parent}",
                }
            ]
        return body


class UpstreamGitHubServer(GitHubAPIServer):
    """A `GitHubAPIServer` that answers compare, commit and contents requests of the
    repositories registered in `histories` (by `UpstreamHistory.register`) from them."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.histories: dict[str, UpstreamHistory] = {}

    def __enter__(self) -> UpstreamGitHubServer:
        self.start()
        return self

    def _compare(
        self, req: RecordedRequest, owner: str, repo: str, base: str, head: str
    ) -> tuple[int, Any, dict[str, str]]:
        history = self.histories.get(f"{owner}/{repo}")
        if history is None:
            return super()._compare(req, owner, repo, base, head)
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        base_sha, head_sha = history.resolve(base), history.resolve(head)
        if base_sha is None or head_sha is None:
            return super()._compare(req, owner, repo, base, head)
        i, j = history._position(base_sha), history._position(head_sha)
        merge_base = min(i, j)
        status = "identical" if i == j else "ahead" if i < j else "behind"
        window = list(range(merge_base + 1, j + 1))
        per_page = min(int(req.query.get("per_page", ["250"])[0]), 250)
        page = int(req.query.get("page", ["1"])[0])
        api = f"{self.api_url}/repos/{owner}/{repo}"
        web = f"{self.url}/{owner}/{repo}"
        with history._lock:
            body: dict[str, Any] = {
                "url": f"{api}/compare/{base}...{head}",
                "html_url": f"{web}/compare/{base}...{head}",
                "permalink_url": f"{web}/compare/{base_sha[:7]}...{head_sha[:7]}",
                "diff_url": f"{web}/compare/{base}...{head}.diff",
                "patch_url": f"{web}/compare/{base}...{head}.patch",
                "base_commit": history._commit_object(api, i),
                "merge_base_commit": history._commit_object(api, merge_base),
                "status": status,
                "ahead_by": max(j - i, 0),
                "behind_by": max(i - j, 0),
                "total_commits": len(window),
                "commits": [
                    history._commit_object(api, k)
                    for k in window[(page - 1) * per_page : page * per_page]
                ],
            }
        if page == 1:  # GitHub lists files on the first page only, at most 300
            files = history._between(merge_base, j, f"{owner}/{repo}")
            body["files"] = [dict(f) for f in files[:COMPARE_FILE_CAP]]
        return 200, body, _pages(f"{api}/compare/{base}...{head}", page, per_page, len(window))

    def _commit(
        self, req: RecordedRequest, owner: str, repo: str, sha: str
    ) -> tuple[int, Any, dict[str, str]]:
        history = self.histories.get(f"{owner}/{repo}")
        full = history.resolve(sha) if history is not None else None
        if history is None or full is None:
            return super()._commit(req, owner, repo, sha)
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        index = history._position(full)
        api = f"{self.api_url}/repos/{owner}/{repo}"
        files = history._between(index - 1, index, f"{owner}/{repo}")
        per_page = min(int(req.query.get("per_page", ["300"])[0]), 300)
        page = int(req.query.get("page", ["1"])[0])
        with history._lock:
            body = history._commit_object(api, index)
        body["files"] = [dict(f) for f in files[(page - 1) * per_page : page * per_page]]
        body["stats"] = {
            "additions": sum(f["additions"] for f in files),
            "deletions": sum(f["deletions"] for f in files),
            "total": sum(f["changes"] for f in files),
        }
        return 200, body, _pages(f"{api}/commits/{sha}", page, per_page, len(files))

    def _contents(
        self, req: RecordedRequest, owner: str, repo: str, path: str
    ) -> tuple[int, Any, dict[str, str]]:
        history = self.histories.get(f"{owner}/{repo}")
        ref = req.query.get("ref", [DEFAULT_BRANCH])[0]
        full = history.resolve(ref) if history is not None else None
        if history is not None and full is not None:
            for name, text in history.snapshot(full).items():
                self.add_file(f"{owner}/{repo}", full, name, text)
            req.query["ref"] = [full]
        return super()._contents(req, owner, repo, path)


@pytest.fixture()
def upstream_github() -> Iterator[UpstreamGitHubServer]:
    """A running UpstreamGitHubServer, stopped after the test; `history.register(it)`."""
    with UpstreamGitHubServer() as server:
        yield server


# -- GitHub file entries ---------------------------------------------------------------------------


def hunks(old: str | None, new: str | None) -> str:
    """GitHub's `patch` of a file: unified hunks with 3 lines of context, no file header,
    and git's "\\ No newline at end of file" marker where a text ends without one."""
    lines = list(difflib.unified_diff(_lines(old or ""), _lines(new or ""), n=3))[2:]
    out = [
        line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines
    ]
    return "".join(out).removesuffix("\n")


def _entry(repo: str, head: str, path: str, old: str | None, new: str | None) -> dict[str, Any]:
    status = "added" if old is None else "removed" if new is None else "modified"
    patch = hunks(old, new)
    body = patch.splitlines()
    additions = sum(1 for line in body if line.startswith("+"))
    deletions = sum(1 for line in body if line.startswith("-"))
    entry = _file_object(
        repo,
        head,
        {
            "filename": path,
            "status": status,
            "additions": additions,
            "deletions": deletions,
            "changes": additions + deletions,
            "patch": patch or None,  # an empty file has no hunks: GitHub sends no patch
        },
    )
    data = (new if new is not None else old or "").encode()
    entry["sha"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return entry


def _lines(text: str) -> list[str]:
    """Lines with their "\\n" (only "\\n" ends a line, as for git); the last may lack it."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _github_date(value: str) -> str:
    """An ISO 8601 date in GitHub's form (UTC, seconds, `Z`); a date without zone is UTC."""
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
