"""A local GitHub REST API (the `/api/v3` of GitHub Enterprise) for tests.

Implements what spyre-ci's GitHub adapter uses, with payloads shaped like GitHub's documented
examples so `github3.GitHubEnterprise(server.url)` parses them:

- `GET  /repos/{owner}/{repo}`                              repository
- `GET  /repos/{owner}/{repo}/compare/{base}...{head}`       files on page 1 only, at most 300
  for the whole comparison, each with its `patch` (hunks only, no file header; left out for
  an entry registered with `"patch": None`, as GitHub leaves it out of binary and very
  large files); commits paginated by `per_page`/`page` with a `Link` header
- `GET  /repos/{owner}/{repo}/commits/{sha}`                  a commit registered with
  `add_commits`: the commit object with its `files` (each with its `patch`), paginated by
  `per_page`/`page` with a `Link` header; unknown sha: 422 "No commit found", as GitHub
- `GET  /repos/{owner}/{repo}/contents/{path}?ref={ref}`     a file registered with
  `add_file`: the JSON object (`type: file`, base64 `content` in 60-column lines; over 1 MB
  `encoding: none` and empty content, as GitHub does), or its bytes with
  `Accept: application/vnd.github.raw[+json]`; a directory lists its entries; unknown
  path or ref: 404. Without `ref`, the default branch `main`
- `POST /repos/{owner}/{repo}/statuses/{sha}`                commit status (token auth)
- `POST /repos/{owner}/{repo}/check-runs`                    check run (installation token)
- `GET|PATCH /repos/{owner}/{repo}/check-runs/{id}`          (installation token)
- `POST /app/installations/{id}/access_tokens`               RS256 app JWT -> installation token
- `GET  /repos/{owner}/{repo}/check-suites/{id}/check-runs` (installation token); a check
  run's suite is the one of its head sha
- `POST /repos/{owner}/{repo}/actions/runs/{id}/rerun[-failed-jobs]`   recorded in `reruns`
- `GET  /repos/{owner}/{repo}/pulls?state=&head=owner:branch`   pull requests registered with
  `add_pull`, filtered by state (default `open`) and head label
- `POST /repos/{owner}/{repo}/dispatches`                    repository_dispatch (422 over
  GitHub's limits: `event_type` > 100 chars, `client_payload` > 10 top-level keys)

Everything received is recorded in `server.requests` (method, path, query, headers, json).

Use it as a context manager or through the `github_api` fixture (import it into a conftest)::

    with GitHubAPIServer() as gh:
        gh.add_comparison("pytorch/pytorch", base, head, files=["a.py"], commits=["msg"])
        adapter = GitHubAdapter(base_url=gh.url, token=gh.token, app_id=gh.app_id,
                                installation_id=gh.installation_id,
                                private_key_pem=gh.private_key_pem)
        ...
        assert gh.statuses[("pytorch/pytorch", sha)][-1]["state"] == "success"
        gh.fail_next("POST", r"/statuses/", status=502)   # inject an outage
        gh.add_file("pytorch/pytorch", base, "aten/src/ATen/native/SoftMax.cpp", text)

Any repository is known on first use; unknown comparisons answer 404 like GitHub.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

COMPARE_FILE_CAP = 300
CONTENTS_OBJECT_MAX_BYTES = 1024 * 1024  # larger files: `encoding: none`, raw media type only
RAW_MEDIA_TYPE = "application/vnd.github.raw"
DISPATCH_KEY_CAP = 10
DISPATCH_EVENT_TYPE_CAP = 100


@dataclass
class RecordedRequest:
    method: str
    path: str  # without the /api/v3 prefix and without the query
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    json: Any = None


@dataclass
class _Comparison:
    files: list[dict[str, Any]]
    commits: list[str]
    status: str = "ahead"
    # Registered by `add_commits`: the commits' own shas and authors (else made up).
    shas: list[str] = field(default_factory=list)
    authors: list[str] = field(default_factory=list)


@dataclass
class _Commit:
    sha: str
    message: str
    author: str
    files: list[dict[str, Any]]


@dataclass
class _Failure:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class GitHubAPIServer:
    """The server; `url` is the GitHub Enterprise base URL (`{url}/api/v3` is the API root)."""

    token: str = "ghp_spyreci_test_token"
    app_id: str = "424242"
    installation_id: int = 31337
    requests: list[RecordedRequest] = field(default_factory=list)
    statuses: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    reruns: list[dict[str, Any]] = field(default_factory=list)
    installation_tokens: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        key = _app_key()
        self.private_key_pem: bytes = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        self._public_key = key.public_key()
        self._comparisons: dict[tuple[str, str, str], _Comparison] = {}
        self._commits: dict[tuple[str, str], _Commit] = {}
        self._files: dict[tuple[str, str, str], bytes] = {}
        self.pulls: list[dict[str, Any]] = []
        self._failures: list[_Failure] = []
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> GitHubAPIServer:
        handler = type("Handler", (_Handler,), {"api": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> GitHubAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def api_url(self) -> str:
        return self.url + "/api/v3"

    # -- test set-up and inspection ------------------------------------------------------------

    def add_comparison(
        self,
        repo: str,
        base: str,
        head: str,
        files: Sequence[str | dict[str, Any]],
        commits: Sequence[str] = ("change",),
    ) -> None:
        """Register `GET compare/{base}...{head}`; files as paths or GitHub file objects."""
        entries = []
        for item in files:
            entry = {"filename": item, "status": "modified"} if isinstance(item, str) else item
            entries.append(_file_object(repo, head, entry))
        self._comparisons[(repo, base, head)] = _Comparison(entries, list(commits))

    def add_commits(
        self, repo: str, base: str, head: str, commits: Sequence[dict[str, Any]]
    ) -> None:
        """Register a window of real-looking commits, oldest first, each `{"sha", "message",
        "author", "files": [GitHub file objects with their "patch"]}`: the compare of
        `base...head` lists them (its files: every commit's, the last status of each path)
        and `GET commits/{sha}` answers each with its own files."""
        combined: dict[str, dict[str, Any]] = {}
        for commit in commits:
            entries = [_file_object(repo, commit["sha"], dict(f)) for f in commit["files"]]
            self._commits[(repo, commit["sha"])] = _Commit(
                commit["sha"], commit["message"], commit.get("author", "Upstream Dev"), entries
            )
            for entry in entries:
                combined[entry["filename"]] = entry
        self._comparisons[(repo, base, head)] = _Comparison(
            list(combined.values()),
            [c["message"] for c in commits],
            shas=[c["sha"] for c in commits],
            authors=[c.get("author", "Upstream Dev") for c in commits],
        )

    def add_file(self, repo: str, ref: str, path: str, content: str | bytes) -> None:
        """Register the file `path` at `ref` (a sha or a branch) for the contents API."""
        data = content.encode() if isinstance(content, str) else content
        self._files[(repo, ref, path.strip("/"))] = data

    def add_pull(self, repo: str, head: str, state: str = "open") -> dict[str, Any]:
        """Register a pull request on `repo` from `head` (`owner:branch`); set its `state`
        to "closed" later to close it."""
        owner, _, branch = head.partition(":")
        pull = {
            "repo": repo,
            "number": len(self.pulls) + 1,
            "state": state,
            "head": {"label": head, "ref": branch, "user": {"login": owner}},
        }
        self.pulls.append(pull)
        return pull

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int = 502,
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next `times` matching requests with `status` and `headers` (a 429's
        `Retry-After`, say), after recording them."""
        self._failures.append(
            _Failure(method.upper(), re.compile(path_regex), status, times, dict(headers or {}))
        )

    def find(self, method: str, path_regex: str) -> list[RecordedRequest]:
        """Recorded requests whose method matches and whose path matches `path_regex`."""
        pattern = re.compile(path_regex)
        return [r for r in self.requests if r.method == method.upper() and pattern.search(r.path)]

    # -- request handling ------------------------------------------------------------------------

    def _handle(self, req: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            self.requests.append(req)
            for failure in self._failures:
                if (
                    failure.times > 0
                    and failure.method == req.method
                    and failure.pattern.search(req.path)
                ):
                    failure.times -= 1
                    return failure.status, {"message": "Injected failure"}, dict(failure.headers)
        for method, pattern, name in _ROUTES:
            match = pattern.fullmatch(req.path)
            if match and method == req.method:
                return getattr(self, name)(req, **match.groupdict())
        return 404, _not_found(), {}

    def _auth(self, req: RecordedRequest, installation: bool = False) -> tuple[int, Any] | None:
        header = req.headers.get("authorization", "")
        scheme, _, credential = header.partition(" ")
        if scheme.lower() not in ("token", "bearer") or not credential:
            return 401, {
                "message": "Requires authentication",
                "documentation_url": "https://docs.github.com/rest",
            }
        if credential in self.installation_tokens:
            return None
        if installation:
            return 403, {
                "message": "You must authenticate via a GitHub App.",
                "documentation_url": "https://docs.github.com/rest/checks/runs",
            }
        if credential != self.token:
            return 401, {
                "message": "Bad credentials",
                "documentation_url": "https://docs.github.com/rest",
            }
        return None

    def _repository(self, req: RecordedRequest, owner: str, repo: str) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        return 200, repository_object(self.api_url, f"{owner}/{repo}"), {}

    def _compare(
        self, req: RecordedRequest, owner: str, repo: str, base: str, head: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        comparison = self._comparisons.get((f"{owner}/{repo}", base, head))
        if comparison is None:
            return 404, _not_found(), {}
        per_page = min(int(req.query.get("per_page", ["250"])[0]), 250)
        page = int(req.query.get("page", ["1"])[0])
        total = len(comparison.commits)
        chunk = comparison.commits[(page - 1) * per_page : page * per_page]
        api = f"{self.api_url}/repos/{owner}/{repo}"
        body: dict[str, Any] = {
            "url": f"{api}/compare/{base}...{head}",
            "html_url": f"{self.url}/{owner}/{repo}/compare/{base}...{head}",
            "permalink_url": f"{self.url}/{owner}/{repo}/compare/{base[:7]}...{head[:7]}",
            "diff_url": f"{self.url}/{owner}/{repo}/compare/{base}...{head}.diff",
            "patch_url": f"{self.url}/{owner}/{repo}/compare/{base}...{head}.patch",
            "base_commit": commit_object(api, base, "base"),
            "merge_base_commit": commit_object(api, base, "base"),
            "status": comparison.status,
            "ahead_by": total,
            "behind_by": 0,
            "total_commits": total,
            "commits": [
                commit_object(api, *_commit_of(comparison, (page - 1) * per_page + i, head))
                for i in range(len(chunk))
            ],
        }
        # GitHub lists files on the first page only, at most 300 for the whole comparison.
        if page == 1:
            body["files"] = comparison.files[:COMPARE_FILE_CAP]
        return 200, body, _pages(f"{api}/compare/{base}...{head}", page, per_page, total)

    def _commit(
        self, req: RecordedRequest, owner: str, repo: str, sha: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        commit = self._commits.get((f"{owner}/{repo}", sha))
        if commit is None:
            return 422, {"message": f"No commit found for SHA: {sha}"}, {}
        per_page = min(int(req.query.get("per_page", ["300"])[0]), 300)
        page = int(req.query.get("page", ["1"])[0])
        api = f"{self.api_url}/repos/{owner}/{repo}"
        body = commit_object(api, commit.sha, commit.message, commit.author)
        files = commit.files[(page - 1) * per_page : page * per_page]
        body["files"] = files
        body["stats"] = {
            "additions": sum(f["additions"] for f in commit.files),
            "deletions": sum(f["deletions"] for f in commit.files),
            "total": sum(f["changes"] for f in commit.files),
        }
        return 200, body, _pages(f"{api}/commits/{sha}", page, per_page, len(commit.files))

    def _contents(
        self, req: RecordedRequest, owner: str, repo: str, path: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        full = f"{owner}/{repo}"
        ref = req.query.get("ref", ["main"])[0]
        path = unquote(path).strip("/")
        api = f"{self.api_url}/repos/{full}"
        data = self._files.get((full, ref, path))
        if data is None:
            prefix = f"{path}/"
            below = sorted(
                p for (r, f, p) in self._files if (r, f) == (full, ref) and p.startswith(prefix)
            )
            if not below:
                return 404, _not_found(), {}
            names: dict[str, str] = {}
            for p in below:
                rest = p[len(prefix) :]
                names.setdefault(rest.split("/", 1)[0], "dir" if "/" in rest else "file")
            return (
                200,
                [
                    {**_content_object(api, self.url, full, ref, f"{prefix}{n}", b""), "type": kind}
                    for n, kind in names.items()
                ],
                {},
            )
        if RAW_MEDIA_TYPE in req.headers.get("accept", ""):
            return 200, data, {"Content-Type": f"{RAW_MEDIA_TYPE}; charset=utf-8"}
        return 200, _content_object(api, self.url, full, ref, path, data), {}

    def _create_status(
        self, req: RecordedRequest, owner: str, repo: str, sha: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        data = req.json if isinstance(req.json, dict) else {}
        if data.get("state") not in ("error", "failure", "pending", "success"):
            return 422, _invalid("state", "Status", data.get("state")), {}
        now = _now()
        status_id = next(self._ids)
        status = {
            "url": f"{self.api_url}/repos/{owner}/{repo}/statuses/{sha}",
            "avatar_url": "https://avatars.example/u/1",
            "id": status_id,
            "node_id": f"SC_{status_id}",
            "state": data["state"],
            "description": data.get("description"),
            "target_url": data.get("target_url"),
            "context": data.get("context", "default"),
            "created_at": now,
            "updated_at": now,
            "creator": user_object(self.api_url, "spyre-ci-bot"),
        }
        with self._lock:
            self.statuses.setdefault((f"{owner}/{repo}", sha), []).append(status)
        return 201, status, {}

    def _access_token(self, req: RecordedRequest, installation_id: str) -> tuple[int, Any, dict]:
        header = req.headers.get("authorization", "")
        if not header.lower().startswith("bearer "):
            return 401, {"message": "A JSON web token could not be decoded"}, {}
        try:
            claims = jwt.decode(
                header.split(" ", 1)[1],
                self._public_key,
                algorithms=["RS256"],
                options={"require": ["iat", "exp", "iss"]},
            )
        except jwt.PyJWTError as exc:
            return 401, {"message": f"A JSON web token could not be decoded: {exc}"}, {}
        if str(claims["iss"]) != self.app_id:
            return 401, {"message": "Integration not found"}, {}
        if claims["exp"] - claims["iat"] > 600 + 60:
            return 401, {"message": "'Expiration time' claim ('exp') is too far in the future"}, {}
        if int(installation_id) != self.installation_id:
            return 404, _not_found(), {}
        token = f"ghs_{next(self._ids)}installation"
        with self._lock:
            self.installation_tokens.append(token)
        expires = datetime.now(UTC) + timedelta(hours=1)
        return (
            201,
            {
                "token": token,
                "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "permissions": {"checks": "write", "statuses": "write", "contents": "write"},
                "repository_selection": "all",
            },
            {},
        )

    def _create_check_run(
        self, req: RecordedRequest, owner: str, repo: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req, installation=True)
        if denied:
            return (*denied, {})
        data = req.json if isinstance(req.json, dict) else {}
        for required in ("name", "head_sha"):
            if not data.get(required):
                return 422, _invalid(required, "CheckRun", None), {}
        problem = _check_run_problem(data)
        if problem:
            return 422, problem, {}
        run_id = next(self._ids)
        run = check_run_object(self.api_url, self.url, f"{owner}/{repo}", run_id, self.app_id, data)
        with self._lock:
            self.check_runs[run_id] = run
        return 201, run, {}

    def _get_check_run(
        self, req: RecordedRequest, owner: str, repo: str, run_id: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req, installation=True)
        if denied:
            return (*denied, {})
        run = self.check_runs.get(int(run_id))
        if run is None or run["_repo"] != f"{owner}/{repo}":
            return 404, _not_found(), {}
        return 200, _public(run), {}

    def _update_check_run(
        self, req: RecordedRequest, owner: str, repo: str, run_id: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req, installation=True)
        if denied:
            return (*denied, {})
        run = self.check_runs.get(int(run_id))
        if run is None or run["_repo"] != f"{owner}/{repo}":
            return 404, _not_found(), {}
        data = req.json if isinstance(req.json, dict) else {}
        problem = _check_run_problem({**{"status": run["status"]}, **data})
        if problem:
            return 422, problem, {}
        with self._lock:
            for key in (
                "name",
                "details_url",
                "external_id",
                "status",
                "conclusion",
                "started_at",
                "completed_at",
            ):
                if key in data:
                    run[key] = data[key]
            if data.get("conclusion"):
                run["status"] = "completed"
                run["completed_at"] = run.get("completed_at") or _now()
            if isinstance(data.get("output"), dict):
                run["output"].update(data["output"])
            run.setdefault("_updates", []).append(data)
        return 200, _public(run), {}

    def _suite_check_runs(
        self, req: RecordedRequest, owner: str, repo: str, suite_id: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req, installation=True)
        if denied:
            return (*denied, {})
        runs = [
            _public(r)
            for r in self.check_runs.values()
            if r["_repo"] == f"{owner}/{repo}" and r["check_suite"]["id"] == int(suite_id)
        ]
        return 200, {"total_count": len(runs), "check_runs": runs}, {}

    def _rerun(
        self, req: RecordedRequest, owner: str, repo: str, run_id: str, what: str
    ) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        with self._lock:
            self.reruns.append(
                {
                    "repo": f"{owner}/{repo}",
                    "run_id": run_id,
                    "failed_only": what == "rerun-failed-jobs",
                }
            )
        return 201, {}, {}

    def _pulls(self, req: RecordedRequest, owner: str, repo: str) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        state = (req.query.get("state") or ["open"])[0]
        head = (req.query.get("head") or [None])[0]
        found = [
            {k: v for k, v in pull.items() if k != "repo"}
            for pull in self.pulls
            if pull["repo"] == f"{owner}/{repo}"
            and (state == "all" or pull["state"] == state)
            and (head is None or pull["head"]["label"] == head)
        ]
        return 200, found, {}

    def _dispatch(self, req: RecordedRequest, owner: str, repo: str) -> tuple[int, Any, dict]:
        denied = self._auth(req)
        if denied:
            return (*denied, {})
        data = req.json if isinstance(req.json, dict) else None
        if data is None or not isinstance(data.get("event_type"), str) or not data["event_type"]:
            return 422, _invalid("event_type", "RepositoryDispatch", None), {}
        if len(data["event_type"]) > DISPATCH_EVENT_TYPE_CAP:
            return 422, {"message": "event_type is too long (maximum is 100 characters)"}, {}
        payload = data.get("client_payload", {})
        if not isinstance(payload, dict):
            return 422, {"message": "client_payload must be an object"}, {}
        if len(payload) > DISPATCH_KEY_CAP:
            return (
                422,
                {
                    "message": "No more than 10 properties are allowed; "
                    f"{len(payload)} were supplied."
                },
                {},
            )
        with self._lock:
            self.dispatches.append({"repo": f"{owner}/{repo}", **data})
        return 204, None, {}


@functools.cache
def _app_key() -> rsa.RSAPrivateKey:
    """The App's RSA key: one per test process (generating 2048-bit keys is slow)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


_SHA = r"[^/]+"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("GET", re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"), "_repository"),
    (
        "GET",
        re.compile(
            rf"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/compare/(?P<base>{_SHA})\.\.\.(?P<head>{_SHA})"
        ),
        "_compare",
    ),
    (
        "GET",
        re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/commits/(?P<sha>[^/]+)"),
        "_commit",
    ),
    (
        "GET",
        re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/contents/(?P<path>.+)"),
        "_contents",
    ),
    (
        "POST",
        re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/statuses/(?P<sha>[^/]+)"),
        "_create_status",
    ),
    (
        "POST",
        re.compile(r"/app/installations/(?P<installation_id>\d+)/access_tokens"),
        "_access_token",
    ),
    (
        "POST",
        re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-runs"),
        "_create_check_run",
    ),
    (
        "GET",
        re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-runs/(?P<run_id>\d+)"),
        "_get_check_run",
    ),
    (
        "PATCH",
        re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-runs/(?P<run_id>\d+)"),
        "_update_check_run",
    ),
    ("POST", re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/dispatches"), "_dispatch"),
    ("GET", re.compile(r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pulls"), "_pulls"),
    (
        "GET",
        re.compile(
            r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/check-suites/(?P<suite_id>\d+)/check-runs"
        ),
        "_suite_check_runs",
    ),
    (
        "POST",
        re.compile(
            r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/actions/runs/(?P<run_id>[^/]+)/"
            r"(?P<what>rerun|rerun-failed-jobs)"
        ),
        "_rerun",
    ),
]


class _Handler(BaseHTTPRequestHandler):
    api: GitHubAPIServer
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        if not path.startswith("/api/v3/"):
            self._send(404, _not_found(), {})
            return
        req = RecordedRequest(
            method=self.command,
            path=path.removeprefix("/api/v3"),
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            json=parsed,
        )
        if body and parsed is None:
            self.api.requests.append(req)
            self._send(400, {"message": "Problems parsing JSON"}, {})
            return
        status, payload, headers = self.api._handle(req)
        self._send(status, payload, headers)

    do_GET = do_POST = do_PATCH = _serve

    def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        """JSON, or `payload` as it is when it is bytes (a raw media type's answer)."""
        raw = isinstance(payload, bytes)
        data = payload if raw else b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if "Content-Type" not in headers:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-GitHub-Request-Id", f"SPYRE:{time.monotonic_ns():x}")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean; requests are recorded instead


@pytest.fixture()
def github_api() -> Iterator[GitHubAPIServer]:
    """A running GitHubAPIServer, stopped after the test."""
    with GitHubAPIServer() as server:
        yield server


# -- realistic payload builders -------------------------------------------------------------------


def user_object(api: str, login: str, user_id: int = 1, kind: str = "User") -> dict[str, Any]:
    url = f"{api}/users/{login}"
    return {
        "login": login,
        "id": user_id,
        "node_id": f"U_{user_id}",
        "avatar_url": f"https://avatars.example/u/{user_id}",
        "gravatar_id": "",
        "url": url,
        "html_url": url.replace("/api/v3/users", ""),
        "followers_url": f"{url}/followers",
        "following_url": f"{url}/following{{/other_user}}",
        "gists_url": f"{url}/gists{{/gist_id}}",
        "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{url}/subscriptions",
        "organizations_url": f"{url}/orgs",
        "repos_url": f"{url}/repos",
        "events_url": f"{url}/events{{/privacy}}",
        "received_events_url": f"{url}/received_events",
        "type": kind,
        "site_admin": False,
    }


def repository_object(api: str, full_name: str) -> dict[str, Any]:
    owner, name = full_name.split("/")
    url = f"{api}/repos/{full_name}"
    web = api.removesuffix("/api/v3")
    repo: dict[str, Any] = {
        "id": abs(hash(full_name)) % 10**9,
        "node_id": f"R_{name}",
        "name": name,
        "full_name": full_name,
        "owner": user_object(api, owner, kind="Organization"),
        "private": False,
        "html_url": f"{web}/{full_name}",
        "description": f"{name} repository",
        "fork": False,
        "url": url,
        "homepage": None,
        "language": "Python",
        "forks_count": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "size": 1024,
        "default_branch": "main",
        "open_issues_count": 0,
        "has_issues": True,
        "has_projects": True,
        "has_wiki": False,
        "has_pages": False,
        "has_downloads": True,
        "archived": False,
        "disabled": False,
        "pushed_at": "2026-11-01T00:00:00Z",
        "created_at": "2016-08-13T05:26:41Z",
        "updated_at": "2026-11-01T00:00:00Z",
        "clone_url": f"{web}/{full_name}.git",
        "git_url": f"git://example/{full_name}.git",
        "ssh_url": f"git@example:{full_name}.git",
        "svn_url": f"{web}/{full_name}",
        "mirror_url": None,
        "network_count": 0,
        "subscribers_count": 0,
        "permissions": {"admin": False, "push": True, "pull": True},
    }
    for key, suffix in {
        "archive_url": "{archive_format}{/ref}",
        "assignees_url": "assignees{/user}",
        "blobs_url": "git/blobs{/sha}",
        "branches_url": "branches{/branch}",
        "collaborators_url": "collaborators{/collaborator}",
        "comments_url": "comments{/number}",
        "commits_url": "commits{/sha}",
        "compare_url": "compare/{base}...{head}",
        "contents_url": "contents/{+path}",
        "contributors_url": "contributors",
        "deployments_url": "deployments",
        "downloads_url": "downloads",
        "events_url": "events",
        "forks_url": "forks",
        "git_commits_url": "git/commits{/sha}",
        "git_refs_url": "git/refs{/sha}",
        "git_tags_url": "git/tags{/sha}",
        "hooks_url": "hooks",
        "issue_comment_url": "issues/comments{/number}",
        "issue_events_url": "issues/events{/number}",
        "issues_url": "issues{/number}",
        "keys_url": "keys{/key_id}",
        "labels_url": "labels{/name}",
        "languages_url": "languages",
        "merges_url": "merges",
        "milestones_url": "milestones{/number}",
        "notifications_url": "notifications{?since,all,participating}",
        "pulls_url": "pulls{/number}",
        "releases_url": "releases{/id}",
        "stargazers_url": "stargazers",
        "statuses_url": "statuses/{sha}",
        "subscribers_url": "subscribers",
        "subscription_url": "subscription",
        "tags_url": "tags",
        "teams_url": "teams",
        "trees_url": "git/trees{/sha}",
    }.items():
        repo[key] = f"{url}/{suffix}"
    return repo


def _commit_of(comparison: _Comparison, index: int, head: str) -> tuple[str, str, str]:
    """(sha, message, author) of a compare's commit `index`: registered, else made up."""
    if index < len(comparison.shas):
        return comparison.shas[index], comparison.commits[index], comparison.authors[index]
    return _sha(f"{head}-{index}"), comparison.commits[index], "Upstream Dev"


def commit_object(api: str, sha: str, message: str, name: str = "Upstream Dev") -> dict[str, Any]:
    email = f"{name.lower().replace(' ', '.')}@example.com"
    author = {"name": name, "email": email, "date": "2026-11-01T00:00:00Z"}
    return {
        "sha": sha,
        "node_id": f"C_{sha[:10]}",
        "url": f"{api}/commits/{sha}",
        "html_url": f"{api}/commit/{sha}".replace("/api/v3/repos", ""),
        "comments_url": f"{api}/commits/{sha}/comments",
        "commit": {
            "url": f"{api}/git/commits/{sha}",
            "author": author,
            "committer": author,
            "message": message,
            "tree": {"url": f"{api}/git/trees/{sha}", "sha": sha},
            "comment_count": 0,
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
            },
        },
        "author": None,
        "committer": None,
        "parents": [],
    }


def check_run_object(
    api: str, web: str, repo: str, run_id: int, app_id: str, data: dict[str, Any]
) -> dict[str, Any]:
    status = data.get("status", "queued")
    if data.get("conclusion"):
        status = "completed"
    output = {
        "title": None,
        "summary": None,
        "text": None,
        "annotations_count": 0,
        "annotations_url": f"{api}/repos/{repo}/check-runs/{run_id}/annotations",
    }
    if isinstance(data.get("output"), dict):
        output.update({k: data["output"].get(k) for k in ("title", "summary", "text")})
    return {
        "_repo": repo,
        "id": run_id,
        "node_id": f"CR_{run_id}",
        "head_sha": data["head_sha"],
        "external_id": data.get("external_id", ""),
        "url": f"{api}/repos/{repo}/check-runs/{run_id}",
        "html_url": f"{web}/{repo}/runs/{run_id}",
        "details_url": data.get("details_url"),
        "status": status,
        "conclusion": data.get("conclusion"),
        "started_at": data.get("started_at") or _now(),
        "completed_at": data.get("completed_at") or (_now() if data.get("conclusion") else None),
        "output": output,
        "name": data["name"],
        "check_suite": {"id": suite_id(data["head_sha"])},
        "app": {
            "id": int(app_id),
            "slug": "spyre-ci",
            "node_id": "A_1",
            "owner": user_object(api, "spyre-ci", 9, "Organization"),
            "name": "spyre-ci",
            "description": "spyre-ci",
            "external_url": web,
            "html_url": f"{web}/apps/spyre-ci",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "permissions": {"checks": "write"},
            "events": [],
        },
        "pull_requests": [],
    }


def suite_id(head_sha: str) -> int:
    """GitHub keeps one check suite per app and head sha: its id, stable per sha."""
    return int(hashlib.sha1(head_sha.encode()).hexdigest()[:8], 16)


def _public(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if not k.startswith("_")}


_CHECK_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
_CONCLUSIONS = (
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
)


def _check_run_problem(data: dict[str, Any]) -> dict[str, Any] | None:
    if data.get("status") is not None and data["status"] not in _CHECK_STATUSES:
        return _invalid("status", "CheckRun", data["status"])
    if data.get("conclusion") is not None and data["conclusion"] not in _CONCLUSIONS:
        return _invalid("conclusion", "CheckRun", data["conclusion"])
    if data.get("status") == "completed" and not data.get("conclusion"):
        return {"message": 'Invalid request.\n\n"conclusion" wasn\'t supplied.'}
    return None


def _file_object(repo: str, head: str, entry: dict[str, Any]) -> dict[str, Any]:
    name = entry["filename"]
    status = entry.get("status", "modified")
    obj = {
        "sha": _sha(name),
        "filename": name,
        "status": status,
        "additions": entry.get("additions", 1),
        "deletions": entry.get("deletions", 0),
        "changes": entry.get("changes", 1),
        "blob_url": f"https://example/{repo}/blob/{head}/{name}",
        "raw_url": f"https://example/{repo}/raw/{head}/{name}",
        "contents_url": f"https://example/repos/{repo}/contents/{name}?ref={head}",
    }
    patch = entry.get("patch", "@@ -1 +1 @@\n-old\n+new")
    if patch is not None:  # GitHub sends none for binary and very large files
        obj["patch"] = patch
    if status == "renamed":
        obj["previous_filename"] = entry["previous_filename"]
    return obj


def _content_object(
    api: str, web: str, repo: str, ref: str, path: str, data: bytes
) -> dict[str, Any]:
    """A contents API file object: base64 content in 60-column lines, as GitHub sends it;
    over 1 MB no content and `encoding: none`."""
    small = len(data) <= CONTENTS_OBJECT_MAX_BYTES
    encoded = base64.b64encode(data).decode() if small else ""
    sha = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    url = f"{api}/contents/{path}?ref={ref}"
    return {
        "type": "file",
        "encoding": "base64" if small else "none",
        "size": len(data),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "content": "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60))
        + ("\n" if encoded else ""),
        "sha": sha,
        "url": url,
        "git_url": f"{api}/git/blobs/{sha}",
        "html_url": f"{web}/{repo}/blob/{ref}/{path}",
        "download_url": f"{web}/{repo}/raw/{ref}/{path}",
        "_links": {
            "self": url,
            "git": f"{api}/git/blobs/{sha}",
            "html": f"{web}/{repo}/blob/{ref}/{path}",
        },
    }


def _pages(url: str, page: int, per_page: int, total: int) -> dict[str, str]:
    """GitHub's `Link` header of a paginated answer (none on its last page)."""
    last = max(1, -(-total // per_page))
    if page >= last:
        return {}
    link = f"{url}?per_page={per_page}"
    return {"Link": f'<{link}&page={page + 1}>; rel="next", <{link}&page={last}>; rel="last"'}


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _not_found() -> dict[str, str]:
    return {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}


def _invalid(field_name: str, resource: str, value: Any) -> dict[str, Any]:
    return {
        "message": "Validation Failed",
        "errors": [{"resource": resource, "field": field_name, "code": "invalid", "value": value}],
        "documentation_url": "https://docs.github.com/rest",
    }
