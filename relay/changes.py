"""Changed files from the GitHub compare API, for events whose payload lacks them."""

from __future__ import annotations

from dataclasses import replace

from contracts.event import TriggerEvent
from relay.github import GitHubAdapter


def complete_files(event: TriggerEvent, adapter: GitHubAdapter) -> TriggerEvent:
    """`event` with files from `compare(base, head)` if its own list is incomplete.

    Consumers call this after `claim` (not the webhook: GitHub wants its answer fast). A
    300-file answer sets `truncated`; an event without a base (nightly, a new branch) is
    returned unchanged: only a full run can cover it.
    """
    if event.files_complete or not event.base_sha or not event.head_sha:
        return event
    files, truncated, messages = adapter.compare_details(event.repo, event.base_sha, event.head_sha)
    return replace(
        event,
        files=files,
        files_complete=not truncated,
        truncated=truncated,
        commit_messages=event.commit_messages or messages,
    )
