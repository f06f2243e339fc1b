"""GitHub commit status and check run for a run, through a GitHub adapter it is handed.

Name `crcr/<downstream_repo>/<workflow>/<job>` and `external_id` `<run_id>:<pr_number>`, as
the CRCR relay names the check runs it creates. A commit status is keyed by its context on
GitHub (the latest wins); a check run is not, so the id of the one created is remembered in
a small state file next to the export and re-exporting updates it instead of adding another.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from contracts.errors import Refused, Unavailable
from contracts.tested import Tested
from dashboard_export import ExportError, PublishUnavailable, retry
from dashboard_export.crcr import result_counts
from dashboard_export.layout import atomic_write
from dashboard_export.model import RunRecord
from dashboard_export.report import render_markdown
from dashboard_export.retry import RetryPolicy

T = TypeVar("T")

SUMMARY_LIMIT = 65_535  # GitHub's cap on a check run's output.summary
DESCRIPTION_LIMIT = 140  # GitHub's cap on a commit status description
_STATUS_STATE = {
    "success": "success",
    "failure": "failure",
    # A commit status has no neutral: "error" (the CI could not do its job) is what a change
    # not tested, or tested in part, is; the description says which.
    "neutral": "error",
    "cancelled": "error",
    "timed_out": "error",
}


class GitHubChecks(Protocol):
    """What this publisher needs of a GitHub adapter (relay.github.GitHubAdapter is one).

    Each call raises contracts.errors.Refused when GitHub (or the adapter) refuses it and
    contracts.errors.Unavailable when GitHub is down, unreachable or answers 408 or 429
    (with `retry_after`, in seconds, when GitHub sent a Retry-After): the calls are retried
    under the publishing retry policy (`dashboard_export.retry`).
    """

    def set_commit_status(
        self,
        repo: str,
        sha: str,
        state: str,
        context: str,
        description: str = "",
        target_url: str | None = None,
    ) -> None: ...

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
    ) -> int: ...

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        status: str | None = None,
        conclusion: str | None = None,
        output: Mapping[str, Any] | None = None,
        name: str | None = None,
        details_url: str | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class GitHubResult:
    """What was published: the status context and/or the check run id."""

    context: str
    status_state: str | None
    check_run_id: int | None
    check_run_created: bool


def check_name(record: RunRecord) -> str:
    """`crcr/<downstream_repo>/<workflow>/<job>`."""
    return f"crcr/{record.downstream_repo}/{record.workflow}/{record.job}"


def external_id(record: RunRecord) -> str:
    """`<run_id>:<pr_number>` (0 when the run is not for a pull request)."""
    return f"{record.run_id}:{record.event.pr_number or 0}"


def description(record: RunRecord) -> str:
    """One line for a commit status, within GitHub's 140 characters."""
    counts = result_counts(record)
    new = len(record.new_failures)
    text = (
        f"{new} new failure{'s' if new != 1 else ''}, "
        f"{counts['failed'] - new} known, {counts['passed']} passed of {counts['total']}"
    )
    tested = record.environment.tested
    if tested in (Tested.PARTIAL, Tested.NOT_TESTED):
        # First, so that the 140 characters keep it: the numbers are not about the change.
        lead = "change tested in part" if tested is Tested.PARTIAL else "change NOT tested"
        text = f"{lead}; {text}"
    if record.gaps and record.effective_conclusion == "neutral":
        # First too: why the numbers are not a pass (`evidence`).
        text = f"{record.gaps_message}; {text}"
    return text[:DESCRIPTION_LIMIT]


def check_output(record: RunRecord) -> dict[str, str]:
    """The check run's title and Markdown summary (the report, cut to GitHub's limit)."""
    summary = render_markdown(record)
    if len(summary) > SUMMARY_LIMIT:
        marker = "\n\n... (truncated; see the full report)\n"
        summary = summary[: SUMMARY_LIMIT - len(marker)] + marker
    return {"title": description(record), "summary": summary}


def publish_github(
    record: RunRecord,
    adapter: GitHubChecks,
    *,
    status: str = "completed",
    commit_status: bool = True,
    check_run: bool = False,
    state_path: str | Path | None = None,
    repo: str | None = None,
    sha: str | None = None,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GitHubResult:
    """Post the run's commit status and/or check run on the upstream commit.

    `repo`/`sha` default to the event's repository and head sha. `state_path` remembers the
    check run id so a re-export updates the same check run. Check runs need the adapter's
    GitHub App identity; commit statuses its token. Each call follows the retry policy
    (`policy`, default `RetryPolicy.from_env()`). Raises ExportError when GitHub refuses a
    call and PublishUnavailable when it stays down through the retries.
    """
    if status not in ("in_progress", "completed"):
        raise ExportError(f"GitHub status must be in_progress or completed, not {status!r}")
    repo = repo or record.event.repo
    sha = sha or record.event.head_sha
    if not sha:
        raise ExportError(f"run {record.run_id}: the event has no head sha to report on")
    name = check_name(record)
    done = status == "completed"
    conclusion = record.effective_conclusion if done else None
    target = record.run_url or None
    state = None
    run_id: int | None = None
    created = False

    def call(what: str, attempt: Callable[[], T]) -> T:
        value, _attempts = retry.run(attempt, what=what, policy=policy, sleep=sleep)
        return value

    try:
        if commit_status:
            state = _STATUS_STATE[conclusion] if conclusion else "pending"
            text = description(record) if done else "running"
            status_state = state
            call(
                "commit status",
                lambda: adapter.set_commit_status(repo, sha, status_state, name, text, target),
            )
        if check_run:
            output = check_output(record) if done else None
            known = _load_state(state_path, repo, sha, name)
            if known is not None:
                call(
                    f"check run {known}",
                    lambda: adapter.update_check_run(
                        repo,
                        known,
                        "completed" if done else "in_progress",
                        conclusion,
                        output,
                        details_url=target,
                    ),
                )
                run_id = known
            else:
                run_id = call(
                    "check run",
                    lambda: adapter.create_check_run(
                        repo,
                        sha,
                        name,
                        external_id(record),
                        "completed" if done else "in_progress",
                        conclusion,
                        output,
                        target,
                    ),
                )
                created = True
                _save_state(state_path, repo, sha, name, run_id)
    except Refused as exc:
        raise ExportError(f"GitHub {name} on {repo}@{sha[:12]}: {exc}") from None
    except Unavailable as exc:
        raise PublishUnavailable(f"GitHub {name} on {repo}@{sha[:12]}: {exc}") from exc
    return GitHubResult(name, state, run_id, created)


def _load_state(path: str | Path | None, repo: str, sha: str, name: str) -> int | None:
    if path is None or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ExportError(
            f"{path}: invalid JSON ({exc.msg}); delete it to create a new check run"
        ) from None
    entry = data.get("check_runs", {}).get(f"{repo}@{sha}/{name}")
    return int(entry) if entry is not None else None


def _save_state(path: str | Path | None, repo: str, sha: str, name: str, run_id: int) -> None:
    if path is None:
        return
    path = Path(path)
    data: dict[str, Any] = {"check_runs": {}}
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
    data.setdefault("check_runs", {})[f"{repo}@{sha}/{name}"] = run_id
    atomic_write(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8"))
