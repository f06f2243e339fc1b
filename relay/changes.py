"""What changed in an event's range, from GitHub's compare API: the files, when the payload
lacks them, and the patches, as the change's diff.

Consumers call `complete_files` after `claim` (not the webhook: GitHub wants its answer fast).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from contracts.event import TriggerEvent
from relay.github import Comparison, GitHubAdapter, GitHubRefused, GitHubUnavailable
from selector.diff import compare_patch_text

log = logging.getLogger("relay.changes")

# Bound on the diff an event carries on to its run (a Celery task argument). GitHub itself
# sends at most 300 files and leaves out the patch of very large ones.
MAX_DIFF_BYTES = 8 * 1024 * 1024


def complete_files(event: TriggerEvent, adapter: GitHubAdapter) -> TriggerEvent:
    """`event` with the compare of `base...head`: its files if the event's own list is
    incomplete, and its patches as `diff_text` when no diff is known yet.

    A 300-file answer sets `truncated`. An event without a base (nightly, a new branch) is
    returned unchanged: only a full run can cover it. When the event's files are complete
    (a push), the patches only sharpen the plan: a GitHub failure is logged and the event
    goes on without them; otherwise the failure is raised, so the delivery is retried.
    """
    if not event.base_sha or not event.head_sha:
        return event
    if event.files_complete and event.diff_text is not None:
        return event
    try:
        found = adapter.comparison(event.repo, event.base_sha, event.head_sha)
    except (GitHubUnavailable, GitHubRefused) as exc:
        if not event.files_complete:
            raise
        log.warning("%s: no patches from GitHub (%s); paths alone are used", event.delivery_id, exc)
        return event
    return with_comparison(event, found)


def with_comparison(event: TriggerEvent, found: Comparison) -> TriggerEvent:
    """`event` completed by a compare answer (pure)."""
    if event.files_complete:
        files, complete, truncated = event.files, True, event.truncated
    else:
        files, complete, truncated = found.files, not found.truncated, found.truncated
    return replace(
        event,
        files=files,
        files_complete=complete,
        truncated=truncated,
        commit_messages=event.commit_messages or found.commit_messages,
        diff_text=event.diff_text if event.diff_text is not None else diff_of(found.entries),
    )


def diff_of(entries: Sequence[Mapping[str, Any]], limit: int = MAX_DIFF_BYTES) -> str | None:
    """The unified diff of the compare entries that carry their patch (None if none does).

    A file GitHub sent no patch for (binary, very large), or past `limit`, is left out of
    the diff: the event still names it, so the Scout sees it as a path without a patch
    (completeness `paths-only`) instead of a change it has seen whole. A rename without
    changes has no patch and is complete as it is.
    """
    kept: list[dict[str, object]] = []
    size = 0
    for entry in entries:
        patch = entry.get("patch")
        pure_rename = entry.get("status") == "renamed" and not entry.get("changes")
        if not (isinstance(patch, str) and patch) and not pure_rename:
            continue
        length = len(patch) if isinstance(patch, str) else 0
        if size + length > limit:
            continue
        size += length
        kept.append(dict(entry))
    return compare_patch_text(kept) if kept else None
