"""The example events are real GitHub payloads, and their patches match them."""

from __future__ import annotations

import json

import pytest

from contracts.event import TriggerEvent
from relay.events import load_event_file
from selector.diff import parse_unified_diff
from tests.testing.paths import EVENTS

NAMES = sorted(p.stem for p in EVENTS.glob("*.json"))


def test_the_promised_examples_exist() -> None:
    assert {
        "push_docs_only",
        "push_softmax_kernel",
        "pr_merged_nn_functional",
        "dispatch_crcr_push",
        "nightly",
        "push_build_cmake",
    } <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_example_is_a_trigger(name: str) -> None:
    event = load_event_file(EVENTS / f"{name}.json")
    assert isinstance(event, TriggerEvent), event
    data = json.loads((EVENTS / f"{name}.json").read_text())
    payload = data["payload"]
    if data["event"] == "repository_dispatch":
        assert event.source == "crcr"
        payload = payload["client_payload"]["payload"]
    if "commits" in payload:
        for key in (
            "ref",
            "before",
            "after",
            "commits",
            "head_commit",
            "pusher",
            "compare",
            "repository",
            "sender",
            "created",
            "deleted",
            "forced",
        ):
            assert key in payload, key
        assert payload["repository"]["full_name"] == "pytorch/pytorch"
        assert payload["head_commit"]["id"] == payload["after"]


@pytest.mark.parametrize("name", [n for n in NAMES if (EVENTS / f"{n}.patch").exists()])
def test_patch_parses_and_matches_the_payload(name: str) -> None:
    parsed = parse_unified_diff((EVENTS / f"{name}.patch").read_text(), name)
    assert not parsed.truncated
    event = load_event_file(EVENTS / f"{name}.json")
    assert isinstance(event, TriggerEvent)
    if event.files:  # a pull request payload lists no files: the patch is the list
        assert sorted(event.paths) == sorted(f.path for f in parsed.files)
    else:
        assert event.kind == "pull_request"
        pr = json.loads((EVENTS / f"{name}.json").read_text())["payload"]["pull_request"]
        assert pr["changed_files"] == len(parsed.files)
