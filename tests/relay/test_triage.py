"""Incoming triage verdicts: normalized as PyTorch's relay normalizes them, or dropped whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.triage import checked_verdict
from tests.relay.test_callback import SHA_B, Crcr, body, crcr  # noqa: F401 - the fixture

GOOD: dict[str, Any] = {
    "schema_version": 1,
    "category": "upstream",
    "confidence": "high",
    "summary": "  softmax's CPU kernel changed  ",
    "suspected_upstream": {"commit": "abcdef1", "reason": "first bad", "pr": 42},
    "evidence": [
        {"job": "spyre", "test": "ops::compare_cpu::softmax::float32", "excerpt": "not close"},
        {"log_url": "https://ci.example/runs/1"},
    ],
    "reproduced_on_retry": True,
    "analyzer": {"name": "spyre-ci", "version": "1", "extra": "ignored"},
    "analyzed_at": "2026-12-01T10:00:00Z",
    "future_field": {"ignored": True},
}


def test_a_valid_verdict_is_normalized() -> None:
    verdict = checked_verdict(GOOD)
    assert verdict is not None
    assert verdict["summary"] == "softmax's CPU kernel changed"
    assert verdict["analyzer"] == {"name": "spyre-ci", "version": "1"}
    assert "future_field" not in verdict
    assert checked_verdict({**GOOD, "schema_version": "1"}) is not None  # the string form


@pytest.mark.parametrize(
    "change",
    [
        {"schema_version": 2},
        {"schema_version": True},
        {"category": "cosmic rays"},
        {"confidence": "certain"},
        {"summary": True},
        {"summary": "   "},
        {"category": "backend"},  # with a suspected_upstream: only an upstream verdict has one
        {"suspected_upstream": {"reason": "names neither a pr nor a commit"}},
        {"suspected_upstream": {"commit": "not-a-sha"}},
        {"suspected_upstream": {"pr": True}},
        {"evidence": [{"log_url": "javascript:alert(1)"}]},
        {"evidence": [{"log_url": "https://github.com@evil.example/x"}]},
        {"evidence": [{"log_url": "https://ci.example/a\n[x](https://evil)"}]},
        {"evidence": "a string"},
        {"reproduced_on_retry": "yes"},
        {"analyzed_at": "yesterday"},
        {"summary": "x" * (17 * 1024)},  # over 16 KiB in all
    ],
)
def test_a_structural_violation_drops_the_whole_verdict(change: dict[str, Any]) -> None:
    assert checked_verdict({**GOOD, **change}) is None
    assert checked_verdict("not an object") is None


def test_overflow_is_capped_not_refused() -> None:
    long = {
        **GOOD,
        "summary": "s" * 5000,
        "evidence": [{"test": f"t{i}", "excerpt": "e" * 2000} for i in range(4)],
    }  # under the 16 KiB cap in all, over the summary's and the excerpts' caps
    verdict = checked_verdict(long)
    assert verdict is not None
    assert len(verdict["summary"]) == 1000
    assert all(len(e["excerpt"]) == 1000 for e in verdict["evidence"])
    many = {**GOOD, "evidence": [{"test": f"t{i}"} for i in range(30)]}
    checked = checked_verdict(many)
    assert checked is not None and len(checked["evidence"]) == 10


def test_the_relay_keeps_the_normalized_verdict_and_drops_a_broken_one(
    crcr: Crcr,  # noqa: F811 - the fixture
) -> None:
    for delivery, verdict in (("t-good", GOOD), ("t-bad", {**GOOD, "category": "backend"})):
        crcr.push(delivery)
        assert crcr.callback("tok-spyre", body(delivery, "in_progress")).status_code == 200
        done = body(delivery, "completed", conclusion="failure")
        done["workflow"]["triage_verdict"] = verdict
        answer = crcr.callback("tok-spyre", done)
        assert answer.status_code == 200, answer.text  # the result counts either way
    client = crcr.http.relay.client
    kept = {}
    for delivery in ("t-good", "t-bad"):
        state = client.hgetall(f"crcr:state:{delivery}:torch-spyre/torch-spyre:9001:1:test")
        kept[delivery] = json.loads(state[b"callback"])["workflow"].get("triage_verdict")
    assert kept == {"t-good": checked_verdict(GOOD), "t-bad": None}
