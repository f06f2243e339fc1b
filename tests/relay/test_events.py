from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.event import ChangedFile, TriggerEvent
from relay.events import EventError, Ignored, load_event_file, normalize

SHA_A = "a" * 40
SHA_B = "b" * 40


def push(**overrides: object) -> dict[str, object]:
    payload: dict[str, object] = {
        "ref": "refs/heads/main",
        "before": SHA_A,
        "after": SHA_B,
        "deleted": False,
        "forced": False,
        "repository": {"full_name": "pytorch/pytorch"},
        "commits": [
            {"message": "add kernel", "added": ["x.cpp"], "modified": ["y.py"], "removed": []},
            {"message": "fix", "added": [], "modified": ["x.cpp", "z.py"], "removed": ["y.py"]},
        ],
    }
    payload.update(overrides)
    return payload


def test_push_nets_file_changes_over_commits() -> None:
    event = normalize("push", push(), "d-1")
    assert isinstance(event, TriggerEvent)
    assert event.files == (
        ChangedFile("x.cpp", "added"),
        ChangedFile("y.py", "removed"),
        ChangedFile("z.py", "modified"),
    )
    assert (event.base_sha, event.head_sha, event.files_complete) == (SHA_A, SHA_B, True)
    assert event.commit_messages == ("add kernel", "fix")


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"deleted": True, "after": "0" * 40}, "deletes"),
        ({"ref": "refs/tags/v2.14.0"}, "not a branch"),
        ({"ref": "refs/heads/feature"}, "branch 'feature'"),
        ({"repository": {"full_name": "someone/fork"}}, "someone/fork"),
    ],
)
def test_push_ignored_with_reason(overrides: dict[str, object], reason: str) -> None:
    result = normalize("push", push(**overrides), "d-2")
    assert isinstance(result, Ignored)
    assert reason in result.reason


def test_crcr_dispatch_wraps_push() -> None:
    dispatch = {
        "action": "push",
        "client_payload": {"event_type": "push", "delivery_id": "up-1", "payload": push()},
        "repository": {"full_name": "torch-spyre/torch-spyre"},
    }
    event = normalize("repository_dispatch", dispatch, "d-3")
    assert isinstance(event, TriggerEvent)
    assert (event.source, event.delivery_id, event.kind) == ("crcr", "up-1", "push")


def test_dispatch_without_client_payload_names_delivery() -> None:
    with pytest.raises(EventError, match="d-4"):
        normalize("repository_dispatch", {"action": "push"}, "d-4")


def test_merged_pull_request_needs_compare() -> None:
    payload = {
        "action": "closed",
        "repository": {"full_name": "pytorch/pytorch"},
        "pull_request": {
            "number": 7,
            "merged": True,
            "merge_commit_sha": SHA_B,
            "title": "t",
            "body": None,
            "head": {"sha": SHA_A},
            "base": {"sha": "c" * 40, "ref": "main"},
            "labels": [],
        },
    }
    event = normalize("pull_request", payload, "d-5")
    assert isinstance(event, TriggerEvent)
    assert (event.pr_number, event.head_sha, event.files_complete) == (7, SHA_B, False)


def test_json_round_trip() -> None:
    event = normalize("push", push(), "d-6")
    assert isinstance(event, TriggerEvent)
    assert TriggerEvent.from_json(json.loads(json.dumps(event.to_json()))) == event


def test_event_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(EventError, match=r"bad\.json:1:2: invalid JSON"):
        load_event_file(bad)
    shapeless = tmp_path / "shapeless.json"
    shapeless.write_text("{}")
    with pytest.raises(EventError, match="'event'"):
        load_event_file(shapeless)
