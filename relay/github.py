"""The GitHub adapter: every GitHub call spyre-ci makes, over github3.py.

Long on purpose: one adapter is the only code that speaks to GitHub, so every call has the
same client, the same error translation (404, 422, rate limits, a server down) and the same
test server; its methods are short and independent, and splitting them by endpoint would
spread that handling over several modules.

Every answer is checked against the shape GitHub's API documents before any of it is used
(`_object`, `_items`, `_field`): a JSON array where an object belongs, a file entry without
its name, a body that is not JSON are `GitHubUnavailable` naming the call and the field (a
proxy's page or a broken server answering for GitHub; the same call may work later), never
a traceback and never an answer read in part.

Two identities: a token (compare, contents, commit statuses, repository_dispatch) and a GitHub App
installation (check runs: GitHub only lets Apps write them). `base_url` selects a GitHub
Enterprise server (tests point it at a local implementation of the same REST endpoints);
None means api.github.com.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import github3
import requests
from github3.exceptions import GitHubError, IncompleteResponse, UnprocessableResponseBody

from contracts.event import ChangedFile
from dashboard_export.retry import retry_after_s, retryable
from relay.config import GitHubConfig
from relay.events import RelayError
from relay.github_errors import GitHubRefused as GitHubRefused
from relay.github_errors import GitHubUnavailable as GitHubUnavailable

log = logging.getLogger("relay.github")

COMPARE_FILE_CAP = 300  # GitHub lists at most 300 files for a whole comparison
COMPARE_PAGE_SIZE = 250
DISPATCH_KEY_CAP = 10
DISPATCH_EVENT_TYPE_CAP = 100
DISPATCH_PAYLOAD_WARN_BYTES = 65_000
# Installation tokens live one hour; renew well before.
INSTALLATION_TOKEN_SECONDS = 50 * 60
_FILE_STATUS = {"added": "added", "removed": "removed", "renamed": "renamed", "copied": "added"}
# What a compare file entry keeps: enough for `selector.diff.compare_patch_text`.
_ENTRY_KEYS = ("filename", "status", "previous_filename", "patch", "changes")
# The contents API answers files up to 100 MB with the raw media type; we read less.
CONTENTS_MAX_BYTES = 8 * 1024 * 1024
RAW_MEDIA_TYPE = "application/vnd.github.raw+json"


@dataclass(frozen=True)
class Comparison:
    """GitHub's compare of `base...head`: its files, whether the list is cut at 300, every
    commit message, and the file entries as GitHub gave them (`filename`, `status`,
    `previous_filename`, `patch` when GitHub sent one: none for binary or very large files)."""

    files: tuple[ChangedFile, ...]
    truncated: bool
    commit_messages: tuple[str, ...]
    entries: tuple[Mapping[str, Any], ...] = ()
    # GitHub's `status` of head against base: identical, ahead (base is an ancestor of head),
    # behind (head is an ancestor of base) or diverged; and the commit counts either side.
    status: str = ""
    ahead_by: int = 0
    behind_by: int = 0
    commit_shas: tuple[str, ...] = ()


@dataclass(frozen=True)
class UpstreamCommit:
    """One commit of a compare: its sha, message and author (name, else login)."""

    sha: str
    message: str
    author: str


def _upstream_commit(item: Mapping[str, Any], what: str, where: str) -> UpstreamCommit:
    detail = _object(item.get("commit") or {}, what, f"{where}.commit")
    author = _object(detail.get("author") or {}, what, f"{where}.commit.author")
    login = _object(item.get("author") or {}, what, f"{where}.author")
    name = str(author.get("name") or login.get("login") or "unknown")
    message = _field(detail, "message", str, what, f"{where}.commit") or ""
    return UpstreamCommit(_field(item, "sha", str, what, where, required=True), message, name)


class GitHubAdapter:
    """Compare, commit statuses, check runs and repository_dispatch against one GitHub."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        app_id: str | int | None = None,
        installation_id: int | None = None,
        private_key_pem: bytes | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.base_url = base_url
        self.token = token
        # github3.py 4.0.1 puts the app id in the JWT `iss` claim, which PyJWT wants as a str.
        self.app_id = None if app_id is None else str(app_id)
        self.installation_id = installation_id
        self.private_key_pem = private_key_pem
        self.timeout = timeout
        self._token_client: github3.GitHub | None = None
        self._app_client: github3.GitHub | None = None
        self._app_client_born = 0.0
        self._repos: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: GitHubConfig) -> GitHubAdapter:
        key = None
        if config.private_key_path:
            try:
                key = Path(config.private_key_path).read_bytes()
            except OSError as exc:
                raise RelayError(
                    f"github.private_key_path {config.private_key_path}: cannot read: {exc}"
                ) from None
        return cls(config.base_url, config.token, config.app_id, config.installation_id, key)

    # -- compare --------------------------------------------------------------------------------

    def compare(self, repo: str, base: str, head: str) -> tuple[tuple[ChangedFile, ...], bool]:
        """Files changed between `base` and `head`, and whether GitHub's list is truncated.

        GitHub lists files on the first page only, at most 300 for the whole comparison: an
        answer of 300 files is treated as truncated.
        """
        files, truncated, _messages = self.compare_details(repo, base, head)
        return files, truncated

    def compare_details(
        self, repo: str, base: str, head: str
    ) -> tuple[tuple[ChangedFile, ...], bool, tuple[str, ...]]:
        """`compare` plus every commit message, following the commit pages."""
        found = self.comparison(repo, base, head)
        return found.files, found.truncated, found.commit_messages

    def comparison(self, repo: str, base: str, head: str) -> Comparison:
        """The whole compare answer: files, truncation, commit messages and patches."""
        client = self._client()
        url = f"{self._api_root(client)}/repos/{repo}/compare/{base}...{head}"
        params: dict[str, Any] | None = {"per_page": COMPARE_PAGE_SIZE, "page": 1}
        what = f"compare {repo} {base[:12]}...{head[:12]}"
        first = self._request(client, "GET", url, what, params=params)
        body = _object(_json(first, what), what)
        raw_files = [_file_entry(f, what, where) for where, f in _items(body, "files", what)]
        pages = [body]
        next_url = first.links.get("next", {}).get("url")
        while next_url:
            page = self._request(client, "GET", next_url, what)
            pages.append(_object(_json(page, what), what))
            next_url = page.links.get("next", {}).get("url")
        commits = [
            _upstream_commit(item, what, where)
            for page_body in pages
            for where, item in _items(page_body, "commits", what)
        ]
        files = tuple(
            ChangedFile(
                f["filename"],
                _FILE_STATUS.get(f.get("status") or "", "modified"),
                f.get("previous_filename"),
            )
            for f in raw_files
        )
        return Comparison(
            files,
            len(raw_files) >= COMPARE_FILE_CAP,
            tuple(c.message for c in commits),
            tuple(raw_files),
            _field(body, "status", str, what) or "",
            _field(body, "ahead_by", int, what) or 0,
            _field(body, "behind_by", int, what) or 0,
            tuple(c.sha for c in commits),
        )

    def window_commits(self, repo: str, base: str, head: str) -> tuple[UpstreamCommit, ...]:
        """The commits after `base` up to `head`, oldest first (the compare's `commits`,
        every page): sha, first line of the message, author. Files are not in them: ask
        `commit_entries` per commit."""
        client = self._client()
        url: str | None = f"{self._api_root(client)}/repos/{repo}/compare/{base}...{head}"
        params: dict[str, Any] | None = {"per_page": COMPARE_PAGE_SIZE, "page": 1}
        what = f"compare {repo} {base[:12]}...{head[:12]}"
        found: list[UpstreamCommit] = []
        while url:
            page = self._request(client, "GET", url, what, params=params)
            params = None  # the next link carries them
            body = _object(_json(page, what), what)
            found += [
                _upstream_commit(item, what, where) for where, item in _items(body, "commits", what)
            ]
            url = page.links.get("next", {}).get("url")
        return tuple(found)

    def commit_entries(self, repo: str, sha: str) -> tuple[Mapping[str, Any], ...]:
        """The file entries of one commit (`GET /repos/{repo}/commits/{sha}`, every page of
        its files) as the compare gives them: `filename`, `status`, `previous_filename`,
        `patch` when GitHub sent one."""
        client = self._client()
        url: str | None = f"{self._api_root(client)}/repos/{repo}/commits/{sha}"
        params: dict[str, Any] | None = {"per_page": 100, "page": 1}
        what = f"commit {repo} {sha[:12]}"
        entries: list[Mapping[str, Any]] = []
        while url:
            page = self._request(client, "GET", url, what, params=params)
            params = None
            body = _object(_json(page, what), what)
            entries += [_file_entry(f, what, where) for where, f in _items(body, "files", what)]
            url = page.links.get("next", {}).get("url")
        return tuple(entries)

    def commit_date(self, repo: str, sha: str) -> str:
        """The committer date of `sha` (ISO 8601, as GitHub gives it; "" when it gives none)."""
        client = self._client()
        url = f"{self._api_root(client)}/repos/{repo}/commits/{sha}"
        what = f"commit {repo} {sha[:12]}"
        page = self._request(client, "GET", url, what, params={"per_page": 1})
        detail = _object(_object(_json(page, what), what).get("commit") or {}, what, "commit")
        for who in ("committer", "author"):
            person = _object(detail.get(who) or {}, what, f"commit.{who}")
            date = _field(person, "date", str, what, f"commit.{who}")
            if date:
                return str(date)
        return ""

    # -- contents -------------------------------------------------------------------------------

    def file_at(
        self, repo: str, path: str, ref: str, max_bytes: int = CONTENTS_MAX_BYTES
    ) -> str | None:
        """The text of `path` at `ref` (contents API, raw media type), or None when the file
        is not there (404, a directory), larger than `max_bytes`, or not UTF-8 text."""
        client = self._client()
        url = f"{self._api_root(client)}/repos/{repo}/contents/{quote(path)}"
        what = f"contents {repo}/{path}@{ref[:12]}"
        response = self._request(
            client,
            "GET",
            url,
            what,
            params={"ref": ref},
            headers={"Accept": RAW_MEDIA_TYPE},
            stream=True,
            passed=(404,),
        )
        with response:
            if response.status_code == 404:
                return None
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                return None
            data = _read_at_most(response, max_bytes, what)
            if data is None:
                return None
            kind = response.headers.get("Content-Type", "")
        if kind.startswith("application/json"):
            # A directory listing, or a server that ignored the raw media type: the JSON
            # object form carries small files base64-encoded.
            data = _json_file_content(data, what)
            if data is None or len(data) > max_bytes:
                return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    # -- commit statuses ------------------------------------------------------------------------

    def set_commit_status(
        self,
        repo: str,
        sha: str,
        state: str,
        context: str,
        description: str = "",
        target_url: str | None = None,
    ) -> None:
        """Set a commit status (`state`: error | failure | pending | success)."""
        if state not in ("error", "failure", "pending", "success"):
            raise GitHubRefused(
                f"commit status state must be error/failure/pending/success: {state!r}"
            )
        repository = self._repository(self._client(), repo)
        # GitHub rejects descriptions over 140 characters.
        created = self._call(
            f"status {context} on {repo}@{sha[:12]}",
            repository.create_status,
            sha,
            state,
            target_url,
            description[:140] or None,
            context,
        )
        if created is None:
            raise GitHubRefused(f"status {context} on {repo}@{sha[:12]}: GitHub did not create it")

    # -- check runs (GitHub App) ------------------------------------------------------------------

    def create_check_run(
        self,
        repo: str,
        head_sha: str,
        name: str,
        external_id: str,
        status: str,
        conclusion: str | None = None,
        output: Mapping[str, Any] | None = None,
        details_url: str | None = None,
    ) -> int:
        """Create a check run as the App installation; returns its id."""
        repository = self._repository(self._installation(), repo)
        run = self._call(
            f"check run {name!r} on {repo}@{head_sha[:12]}",
            repository.create_check_run,
            name,
            head_sha,
            details_url,
            external_id,
            None,
            status,
            conclusion,
            None,
            dict(output) if output else None,
        )
        if run is None:
            raise GitHubRefused(f"check run {name!r} on {repo}: GitHub did not create it")
        return int(run.id)

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        status: str | None = None,
        conclusion: str | None = None,
        output: Mapping[str, Any] | None = None,
        name: str | None = None,
        details_url: str | None = None,
    ) -> None:
        """Update a check run's status, conclusion (completes it), output, name or link."""
        client = self._installation()
        data = {
            "status": status,
            "conclusion": conclusion,
            "name": name,
            "details_url": details_url,
            "output": dict(output) if output else None,
        }
        url = f"{self._api_root(client)}/repos/{repo}/check-runs/{int(check_run_id)}"
        self._request(
            client,
            "PATCH",
            url,
            f"check run {check_run_id} on {repo}",
            data=json.dumps({k: v for k, v in data.items() if v is not None}),
        )

    # -- repository_dispatch ------------------------------------------------------------------

    def dispatch(self, repo: str, event_type: str, client_payload: Mapping[str, Any]) -> None:
        """Send a `repository_dispatch` to `repo` (GitHub caps: 100-char type, 10 keys)."""
        if not event_type or len(event_type) > DISPATCH_EVENT_TYPE_CAP:
            raise GitHubRefused(
                f"dispatch to {repo}: event_type must be 1 to {DISPATCH_EVENT_TYPE_CAP} "
                f"characters, not {len(event_type)}"
            )
        if len(client_payload) > DISPATCH_KEY_CAP:
            raise GitHubRefused(
                f"dispatch to {repo}: client_payload has {len(client_payload)} top-level keys; "
                f"GitHub allows {DISPATCH_KEY_CAP}"
            )
        body = json.dumps({"event_type": event_type, "client_payload": dict(client_payload)})
        if len(body) > DISPATCH_PAYLOAD_WARN_BYTES:
            log.warning("dispatch to %s: payload is %d bytes", repo, len(body))
        client = self._client() if self.token else self._installation()
        self._request(
            client,
            "POST",
            f"{self._api_root(client)}/repos/{repo}/dispatches",
            f"dispatch {event_type} to {repo}",
            data=body,
        )

    def rerun_workflow_run(self, repo: str, run_id: str, failed_only: bool) -> None:
        """Re-run a downstream workflow run: its failed jobs, or all of it."""
        client = self._client() if self.token else self._installation()
        action = "rerun-failed-jobs" if failed_only else "rerun"
        self._request(
            client,
            "POST",
            f"{self._api_root(client)}/repos/{repo}/actions/runs/{run_id}/{action}",
            f"{action} of {repo} run {run_id}",
        )

    def has_open_pull(self, repo: str, head: str) -> bool:
        """Whether `repo` has an open pull request from `head` (`owner:branch`)."""
        client = self._client() if self.token else self._installation()
        response = self._request(
            client,
            "GET",
            f"{self._api_root(client)}/repos/{repo}/pulls",
            f"open pull requests of {repo} from {head}",
            params={"state": "open", "head": head, "per_page": 1},
        )
        what = f"open pull requests of {repo} from {head}"
        pulls = _json(response, what) if response.content else []
        if not isinstance(pulls, list):
            raise _not_documented(
                what, f"a JSON {_kind(pulls)} where a list of pull requests belongs"
            )
        return bool(pulls)

    def suite_check_runs(self, repo: str, check_suite_id: int) -> list[dict[str, Any]]:
        """The check runs of one check suite (`name`, `external_id`, ...), first 100."""
        client = self._installation()
        response = self._request(
            client,
            "GET",
            f"{self._api_root(client)}/repos/{repo}/check-suites/{check_suite_id}/check-runs",
            f"check runs of suite {check_suite_id} on {repo}",
            params={"per_page": 100},
        )
        what = f"check runs of suite {check_suite_id} on {repo}"
        body = _object(_json(response, what), what) if response.content else {}
        return [dict(run) for _where, run in _items(body, "check_runs", what)]

    # -- plumbing ---------------------------------------------------------------------------------

    def _new_client(self) -> github3.GitHub:
        client = github3.GitHubEnterprise(self.base_url) if self.base_url else github3.GitHub()
        client.session.default_read_timeout = self.timeout
        client.session.default_connect_timeout = min(4.0, self.timeout)
        return client

    def _client(self) -> github3.GitHub:
        with self._lock:
            if self._token_client is None:
                if not self.token:
                    raise GitHubRefused(
                        "GitHub token is not configured (github.token or SPYRE_CI_GITHUB_TOKEN)"
                    )
                client = self._new_client()
                client.login(token=self.token)
                self._token_client = client
            return self._token_client

    def _installation(self) -> github3.GitHub:
        if not (self.app_id and self.installation_id and self.private_key_pem):
            raise GitHubRefused(
                "check runs need a GitHub App: set github.app_id, github.installation_id and "
                "github.private_key_path (or SPYRE_CI_GITHUB_APP_ID, ..._INSTALLATION_ID, "
                "..._PRIVATE_KEY)"
            )
        with self._lock:
            fresh = time.monotonic() - self._app_client_born < INSTALLATION_TOKEN_SECONDS
            if self._app_client is not None and fresh:
                return self._app_client
            client = self._new_client()
            self._call(
                f"installation token for app {self.app_id}",
                client.login_as_app_installation,
                self.private_key_pem,
                self.app_id,
                self.installation_id,
            )
            self._app_client = client
            self._app_client_born = time.monotonic()
            self._repos = {k: v for k, v in self._repos.items() if k[0] != "app"}
            return client

    def _repository(self, client: github3.GitHub, repo: str) -> Any:
        owner, _, name = repo.partition("/")
        if not owner or not name:
            raise GitHubRefused(f"repository must be owner/repo, not {repo!r}")
        kind = "app" if client is self._app_client else "token"
        cached = self._repos.get((kind, repo))
        if cached is not None:
            return cached
        found = self._call(f"repository {repo}", client.repository, owner, name)
        if found is None:
            raise GitHubRefused(f"repository {repo}: not found or not visible to this identity")
        self._repos[(kind, repo)] = found
        return found

    @staticmethod
    def _api_root(client: github3.GitHub) -> str:
        return str(client.session.base_url).rstrip("/")

    def _request(
        self,
        client: github3.GitHub,
        method: str,
        url: str,
        what: str,
        passed: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> requests.Response:
        """One REST call; 408, 429, 5xx and network errors are GitHubUnavailable, other 4xx
        (except the statuses in `passed`, handed back) GitHubRefused."""
        try:
            response: requests.Response = client.session.request(method, url, **kwargs)
        except requests.RequestException as exc:
            raise GitHubUnavailable(f"{what}: GitHub unreachable: {exc}") from exc
        if response.status_code in passed:
            return response
        if retryable(response.status_code):
            raise GitHubUnavailable(
                f"{what}: GitHub answered {response.status_code}",
                retry_after_s(response.headers.get("Retry-After")),
            )
        if response.status_code >= 400:
            raise GitHubRefused(
                f"{what}: GitHub answered {response.status_code}: {_message(response)}"
            )
        return response

    @staticmethod
    def _call(what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except requests.RequestException as exc:
            raise GitHubUnavailable(f"{what}: GitHub unreachable: {exc}") from exc
        except (IncompleteResponse, UnprocessableResponseBody) as exc:
            # a 2xx that is not the object GitHub documents, or lacks its attributes
            raise _not_documented(what, f"github3 could not read it: {exc.msg}") from exc
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # github3 reading an answer of another shape (a JSON array for an object, a body
            # that is not JSON): the answer's fault, the arguments are the adapter's own.
            raise _not_documented(
                what, f"github3 could not read it: {type(exc).__name__}: {exc}"
            ) from exc
        except GitHubError as exc:
            code = getattr(exc, "code", None) or 0
            if retryable(code):
                answer = getattr(exc, "response", None)
                headers = getattr(answer, "headers", None) or {}
                raise GitHubUnavailable(
                    f"{what}: GitHub answered {code}", retry_after_s(headers.get("Retry-After"))
                ) from exc
            raise GitHubRefused(f"{what}: GitHub answered {code}: {exc.msg}") from exc


def _not_documented(what: str, problem: str) -> GitHubUnavailable:
    """An answer that is not of the shape GitHub's API documents: an outage (a proxy's page,
    a broken server answering for GitHub), named; none of it is used."""
    return GitHubUnavailable(
        f"{what}: GitHub's answer is not what its API documents ({problem[:300]}); "
        "nothing of it was used (a proxy or a broken server answering for GitHub?)"
    )


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return names.get(type(value), "null" if value is None else type(value).__name__)


def _json(response: requests.Response, what: str) -> Any:
    """The answer's JSON body; one that is not JSON is `_not_documented`."""
    try:
        return response.json()
    except ValueError as exc:
        start = response.text[:60].strip()
        raise _not_documented(what, f"not JSON: {exc}; it starts {start!r}") from None


def _object(value: Any, what: str, where: str = "the answer") -> Mapping[str, Any]:
    """`value`, which GitHub documents as a JSON object."""
    if not isinstance(value, dict):
        raise _not_documented(what, f"{where} is a JSON {_kind(value)}, not an object")
    return value


def _items(body: Mapping[str, Any], key: str, what: str) -> list[tuple[str, Mapping[str, Any]]]:
    """`body[key]`, a list of objects (absent or null: none), each with where it is."""
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _not_documented(what, f"{key} is a JSON {_kind(value)}, not an array")
    return [(f"{key}[{i}]", _object(item, what, f"{key}[{i}]")) for i, item in enumerate(value)]


def _field(
    item: Mapping[str, Any],
    key: str,
    kind: type,
    what: str,
    where: str = "the answer",
    required: bool = False,
) -> Any:
    """`item[key]` when it is of `kind` (None when absent or null, unless `required`)."""
    value = item.get(key)
    if value is None and not required:
        return None
    negative = isinstance(value, int) and value < 0
    if not isinstance(value, kind) or isinstance(value, bool) or negative:
        expected = {str: "a string", int: "a count"}.get(kind, kind.__name__)
        raise _not_documented(what, f"{where}.{key} is a JSON {_kind(value)}, not {expected}")
    return value


def _file_entry(item: Mapping[str, Any], what: str, where: str) -> dict[str, Any]:
    """A file entry of a compare or a commit, checked, with what spyre-ci keeps of it."""
    _field(item, "filename", str, what, where, required=True)
    for key in ("status", "previous_filename", "patch"):
        _field(item, key, str, what, where)
    _field(item, "changes", int, what, where)
    return {k: item[k] for k in _ENTRY_KEYS if k in item}


def _read_at_most(response: requests.Response, limit: int, what: str) -> bytes | None:
    """The body, or None once it passes `limit` (reading stops there)."""
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(64 * 1024):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    except requests.RequestException as exc:
        raise GitHubUnavailable(f"{what}: GitHub unreachable: {exc}") from exc
    return b"".join(chunks)


def _json_file_content(data: bytes, what: str) -> bytes | None:
    """The bytes of a contents answer in its JSON form; None for what is not a file's text
    here (a directory's listing, a symlink or submodule, a file over 1 MB, which GitHub
    sends with `encoding: none`)."""
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise _not_documented(what, f"not JSON: {exc}") from None
    if isinstance(body, list):  # a directory's entries
        return None
    kind = _field(_object(body, what), "type", str, what, required=True)
    if kind != "file":
        return None
    encoding = _field(body, "encoding", str, what)
    if encoding == "none":  # over 1 MB: no content in this form
        return None
    content = _field(body, "content", str, what, required=True)
    if encoding != "base64":
        raise _not_documented(what, f"the file's encoding is {encoding!r}, not base64")
    try:
        return base64.b64decode(content)
    except ValueError as exc:  # binascii.Error
        raise _not_documented(what, f"its base64 content does not decode: {exc}") from None


def _message(response: requests.Response) -> str:
    """GitHub's `message` of a refusal; the start of the body when it has none."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])[:300]
    return response.text[:300]
