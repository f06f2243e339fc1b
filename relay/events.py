"""Normalize upstream GitHub deliveries (direct or forwarded by CRCR) into one TriggerEvent.

Pure functions over the decoded payload: no I/O but `load_event_file`. What the payload
lacks (a pull request's changed files, a push with more commits than GitHub lists) is marked
`files_complete=False`; the GitHub adapter's compare call fills it in later.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.errors import BadInput, Unavailable
from contracts.event import ChangedFile, TriggerEvent

ZERO_SHA = "0" * 40
SPYRE_LABEL = "ciflow/crcr/spyre"
# GitHub lists at most this many commits in a push payload; more means the list is partial.
PUSH_COMMIT_LIMIT = 2048
_FILE_KEYS = (("added", "added"), ("modified", "modified"), ("removed", "removed"))


class RelayError(BadInput, ValueError):
    """The relay's one error type for bad input: a delivery, event file, config or callback
    that cannot be used; the message names the delivery, file or field and what to do."""


class RelayUnavailable(Unavailable):
    """A service the relay needs (Redis, GitHub, HUD) is down or unreachable: an outage,
    not bad input (never a RelayError); the same request may succeed when it is back."""


# The name other packages already catch for bad deliveries and event files.
EventError = RelayError


@dataclass(frozen=True)
class Ignored:
    """A delivery that needs no run, and why (logged, answered 202)."""

    reason: str


@dataclass(frozen=True)
class TriggerRules:
    """What makes a delivery a trigger."""

    repo: str = "pytorch/pytorch"
    branches: tuple[str, ...] = ("main",)
    label: str = SPYRE_LABEL


def normalize(
    event_name: str,
    payload: Mapping[str, Any],
    delivery_id: str,
    rules: TriggerRules | None = None,
) -> TriggerEvent | Ignored:
    """Turn one delivery (`X-GitHub-Event`, decoded body, `X-GitHub-Delivery`) into a trigger.

    Its shas, when it has them, are checked (40 hex characters): they name folders, Redis
    keys and URLs later.
    """
    result = _normalize(event_name, payload, delivery_id, rules)
    if isinstance(result, TriggerEvent):
        for name, sha in (("head sha", result.head_sha), ("base sha", result.base_sha)):
            # A payload field of another type (a bool, a number) is refused as well.
            if sha and not (isinstance(sha, str) and _SHA.fullmatch(sha)):
                raise RelayError(
                    f"delivery {delivery_id}: {name} {str(sha)[:60]!r} is not 40 hex characters"
                )
    return result


_SHA = re.compile(r"[0-9a-f]{40}")


def _normalize(
    event_name: str,
    payload: Mapping[str, Any],
    delivery_id: str,
    rules: TriggerRules | None = None,
) -> TriggerEvent | Ignored:
    rules = rules or TriggerRules()
    if not isinstance(payload, Mapping):
        raise EventError(f"delivery {delivery_id}: payload is not a JSON object")
    if event_name == "repository_dispatch":
        return _from_dispatch(payload, delivery_id, rules)
    if event_name in ("nightly", "periodic"):
        return scheduled(event_name, _require(payload, "head_sha", delivery_id), rules.repo)
    repo = _repo_name(payload)
    if repo != rules.repo:
        return Ignored(f"{event_name} from {repo or 'an unnamed repository'}, not {rules.repo}")
    handler = _HANDLERS.get(event_name)
    if handler is None:
        return Ignored(f"event {event_name!r} is not handled")
    try:
        return handler(payload, delivery_id, rules)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        if isinstance(exc, RelayError):
            raise
        # A field of the wrong type (a list where GitHub sends an object, ...): not GitHub's.
        raise RelayError(
            f"delivery {delivery_id}: {event_name} payload has a field of an unexpected type "
            f"({type(exc).__name__}: {exc})"
        ) from None


def scheduled(kind: str, sha: str, repo: str = "pytorch/pytorch") -> TriggerEvent:
    """A nightly or periodic trigger: the whole inventory at one upstream sha."""
    if kind not in ("nightly", "periodic"):
        raise EventError(f"scheduled trigger kind must be nightly or periodic, not {kind!r}")
    return TriggerEvent(
        kind=kind,
        delivery_id=sha,
        repo=repo,
        head_sha=sha,
        files_complete=False,
        source="cli",
        upstream_event=kind,
    )


def _push(
    payload: Mapping[str, Any], delivery_id: str, rules: TriggerRules
) -> TriggerEvent | Ignored:
    ref = str(payload.get("ref", ""))
    if payload.get("deleted") or payload.get("after") == ZERO_SHA:
        return Ignored(f"push deletes {ref}")
    if not ref.startswith("refs/heads/"):
        return Ignored(f"push to {ref or 'no ref'} is not a branch")
    branch = ref.removeprefix("refs/heads/")
    if branch not in rules.branches:
        return Ignored(f"push to branch {branch!r}, not one of {', '.join(rules.branches)}")
    commits = payload.get("commits") or []
    files = _files_from_commits(commits)
    before = payload.get("before")
    complete = bool(commits) and len(commits) < PUSH_COMMIT_LIMIT and not payload.get("forced")
    return TriggerEvent(
        kind="push",
        delivery_id=delivery_id,
        repo=rules.repo,
        head_sha=_require(payload, "after", delivery_id),
        base_sha=None if before in (None, ZERO_SHA) else before,
        ref=ref,
        files=files,
        files_complete=complete,
        commit_messages=tuple(str(c.get("message", "")) for c in commits),
        upstream_event="push",
        payload=payload,
    )


def _pull_request(
    payload: Mapping[str, Any], delivery_id: str, rules: TriggerRules
) -> TriggerEvent | Ignored:
    action = payload.get("action")
    pr = payload.get("pull_request")
    if not isinstance(pr, Mapping):
        raise EventError(f"delivery {delivery_id}: pull_request event without a pull_request")
    labels = tuple(str(lbl.get("name", "")) for lbl in pr.get("labels") or ())
    merged = action == "closed" and bool(pr.get("merged"))
    labelled = rules.label in labels and action in ("labeled", "opened", "reopened", "synchronize")
    if action == "labeled" and (payload.get("label") or {}).get("name") != rules.label:
        return Ignored(f"label {(payload.get('label') or {}).get('name')!r} is not {rules.label}")
    if not (merged or labelled):
        return Ignored(f"pull request {action} is neither merged nor labelled {rules.label}")
    head = pr.get("head") or {}
    base = pr.get("base") or {}
    head_sha = pr.get("merge_commit_sha") if merged else head.get("sha")
    return TriggerEvent(
        kind="pull_request",
        delivery_id=delivery_id,
        repo=rules.repo,
        head_sha=str(head_sha or head.get("sha") or ""),
        base_sha=base.get("sha"),
        ref=base.get("ref"),
        pr_number=_pr_number(pr, delivery_id),
        files_complete=False,  # a pull request payload never lists its files
        commit_messages=(str(pr.get("title", "")), str(pr.get("body") or "")),
        labels=labels,
        upstream_event="pull_request",
        payload=payload,
    )


def _rerequested(
    payload: Mapping[str, Any], delivery_id: str, rules: TriggerRules
) -> TriggerEvent | Ignored:
    if payload.get("action") != "rerequested":
        return Ignored(f"check action {payload.get('action')!r} is not rerequested")
    key = "check_run" if "check_run" in payload else "check_suite"
    check = payload.get(key) or {}
    return TriggerEvent(
        kind="rerun",
        delivery_id=delivery_id,
        repo=rules.repo,
        head_sha=str(check.get("head_sha", "")),
        files_complete=False,
        rerun="failed" if key == "check_run" else "full",
        upstream_event=key,
        payload=payload,
    )


_HANDLERS = {
    "push": _push,
    "pull_request": _pull_request,
    "check_run": _rerequested,
    "check_suite": _rerequested,
}


def _from_dispatch(
    payload: Mapping[str, Any], delivery_id: str, rules: TriggerRules
) -> TriggerEvent | Ignored:
    client = payload.get("client_payload")
    if not isinstance(client, Mapping):
        raise EventError(f"delivery {delivery_id}: repository_dispatch without a client_payload")
    inner_event = client.get("event_type") or payload.get("action")
    inner_delivery = client.get("delivery_id")
    inner = client.get("payload")
    if not inner_event or not inner_delivery or not isinstance(inner, Mapping):
        raise EventError(
            f"delivery {delivery_id}: CRCR client_payload needs event_type, delivery_id and "
            "payload (object)"
        )
    if inner_event in ("nightly", "periodic"):
        sha = str(inner.get("head_sha") or inner_delivery)
        event = scheduled(str(inner_event), sha, rules.repo)
        return _as_crcr(event, inner)
    result = normalize(str(inner_event), inner, str(inner_delivery), rules)
    if isinstance(result, Ignored):
        return Ignored(f"CRCR dispatch: {result.reason}")
    return _as_crcr(result, inner)


def _as_crcr(event: TriggerEvent, inner: Mapping[str, Any]) -> TriggerEvent:
    return dataclasses.replace(event, source="crcr", payload=inner)


def _files_from_commits(commits: Sequence[Mapping[str, Any]]) -> tuple[ChangedFile, ...]:
    """Net file changes over a push's commits, in first-seen order."""
    status: dict[str, str] = {}
    for commit in commits:
        for key, kind in _FILE_KEYS:
            for path in commit.get(key) or ():
                previous = status.get(path)
                if kind == "removed" and previous == "added":
                    del status[path]  # added then removed in the same push: no net change
                elif previous == "added" and kind == "modified":
                    continue
                else:
                    status[path] = kind
    return tuple(ChangedFile(p, s) for p, s in status.items())


def _pr_number(pr: Mapping[str, Any], delivery_id: str) -> int | None:
    number = pr.get("number")
    if number is None or (isinstance(number, int) and not isinstance(number, bool)):
        return number
    raise RelayError(f"delivery {delivery_id}: pull_request.number must be an integer")


def _repo_name(payload: Mapping[str, Any]) -> str:
    repo = payload.get("repository")
    return str(repo.get("full_name", "")) if isinstance(repo, Mapping) else ""


def _require(payload: Mapping[str, Any], key: str, delivery_id: str) -> str:
    value = payload.get(key)
    if not value:
        raise EventError(f"delivery {delivery_id}: payload has no {key!r}")
    return str(value)


def load_event_file(path: str | Path, rules: TriggerRules | None = None) -> TriggerEvent | Ignored:
    """Read a recorded delivery: `{"event": ..., "delivery_id": ..., "payload": {...}}`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EventError(f"{path}: no such event file") from None
    except IsADirectoryError:
        raise EventError(f"{path}: is a directory, not an event file") from None
    except OSError as exc:
        raise EventError(f"{path}: cannot read the event file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise EventError(
            f"{path}: not an event file: binary data (byte at offset {exc.start} "
            "is not UTF-8); an event file is JSON"
        ) from None
    except json.JSONDecodeError as exc:
        raise EventError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg} (an event file is JSON)"
        ) from None
    except RecursionError:
        raise EventError(f"{path}: not an event file: JSON nested too deep to read") from None
    if not isinstance(data, dict) or "event" not in data or "payload" not in data:
        raise EventError(
            f"{path}: an event file is an object with 'event' (the X-GitHub-Event name), "
            "'delivery_id' and 'payload' (the webhook body)"
        )
    delivery = str(data.get("delivery_id") or path.stem)
    try:
        return normalize(str(data["event"]), data["payload"], delivery, rules)
    except EventError as exc:
        raise EventError(f"{path}: {exc}") from None
