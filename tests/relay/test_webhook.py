"""Webhook intake over real HTTP against a real Redis: signatures, dedupe + enqueue, answers."""

from __future__ import annotations

import json
import re

import pytest
import redis

from contracts.event import TriggerEvent
from relay.intake import INTAKE_STREAM, QueueUnavailable, RedisIntake
from relay.signature import sign, verify
from tests.testing.relay import SECRET, RedisProcess, RelayHTTP
from tests.testing.waiting import wait_for

SHA_A, SHA_B = "a" * 40, "b" * 40


def push(repo: str = "pytorch/pytorch", ref: str = "refs/heads/main", **extra: object) -> dict:
    payload: dict = {
        "ref": ref,
        "before": SHA_A,
        "after": SHA_B,
        "created": False,
        "deleted": False,
        "forced": False,
        "base_ref": None,
        "compare": "https://example/compare",
        "commits": [
            {
                "id": SHA_B,
                "message": "fix kernel",
                "added": [],
                "removed": [],
                "modified": ["aten/src/ATen/native/Foo.cpp"],
            }
        ],
        "head_commit": {"id": SHA_B},
        "pusher": {"name": "dev"},
        "repository": {"full_name": repo},
    }
    payload.update(extra)
    return payload


def test_github_documented_signature_vector() -> None:
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(SECRET, b"Hello, World!") == expected
    assert verify(SECRET, b"Hello, World!", expected)
    assert not verify(SECRET, b"Hello, World!", expected.upper().replace("SHA256", "sha1"))
    assert not verify(SECRET, b"Hello, World!", None)
    assert not verify("", b"Hello, World!", expected)


def test_push_is_enqueued_once_and_claimed(relay_http: RelayHTTP) -> None:
    answer = relay_http.webhook("push", push(), "d-1")
    assert answer.status_code == 202, answer.text
    assert answer.json()["message"] == "enqueued"
    again = relay_http.webhook("push", push(), "d-1")
    assert again.status_code == 202 and again.json()["message"] == "already accepted"
    intake = relay_http.relay.intake
    assert intake.depth() == 1
    claimed = intake.claim("worker-1")
    assert claimed is not None and claimed.delivery_id == "d-1"
    assert isinstance(claimed.event, TriggerEvent)
    assert claimed.event.head_sha == SHA_B and claimed.event.paths == (
        "aten/src/ATen/native/Foo.cpp",
    )
    assert intake.claim("worker-2") is None  # handed out once
    intake.ack(claimed)
    assert intake.depth() == 0
    assert relay_http.webhook("push", push(), "d-1").json()["message"] == "already accepted"


def test_signature_failures_are_401(relay_http: RelayHTTP) -> None:
    body = json.dumps(push()).encode()
    wrong = relay_http.webhook("push", push(), "d-2", secret="not the secret")
    assert wrong.status_code == 401
    missing = relay_http.webhook("push", push(), "d-3", headers={"X-Hub-Signature-256": ""})
    assert missing.status_code == 401
    sha1_only = relay_http.http.post(
        f"{relay_http.url}/github/webhook",
        data=body,
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "d-4",
            "X-Hub-Signature": "sha1=" + "0" * 40,
        },
    )
    assert sha1_only.status_code == 401 and "SHA-1" in sha1_only.json()["message"]
    malformed = relay_http.webhook(
        "push", push(), "d-5", headers={"X-Hub-Signature-256": "sha256=zz"}
    )
    assert malformed.status_code == 401
    assert relay_http.relay.intake.depth() == 0


def test_oversized_body_is_413(relay_http: RelayHTTP) -> None:
    body = b"{" + b" " * (25 * 1024 * 1024) + b"}"
    answer = relay_http.webhook("push", None, "d-big", raw=body)
    assert answer.status_code == 413


def test_invalid_json_and_missing_headers_are_400(relay_http: RelayHTTP) -> None:
    assert relay_http.webhook("push", None, "d-6", raw=b"{not json").status_code == 400
    no_delivery = relay_http.webhook("push", push(), "", headers={"X-GitHub-Delivery": ""})
    assert no_delivery.status_code == 400
    bad_push = relay_http.webhook("push", push(after=None), "d-7")
    assert bad_push.status_code == 400 and "d-7" in bad_push.json()["message"]


def test_ping_is_200(relay_http: RelayHTTP) -> None:
    answer = relay_http.webhook(
        "ping", {"zen": "Keep it logically awesome.", "hook_id": 1, "hook": {}}, "d-ping"
    )
    assert answer.status_code == 200 and answer.json()["zen"] == "Keep it logically awesome."


def test_ignored_deliveries_are_202_and_not_enqueued(relay_http: RelayHTTP) -> None:
    other = relay_http.webhook("push", push(repo="someone/fork"), "d-8")
    assert other.status_code == 202 and "someone/fork" in other.json()["message"]
    tag = relay_http.webhook("push", push(ref="refs/tags/v2.13.0"), "d-9")
    assert tag.status_code == 202 and "not a branch" in tag.json()["message"]
    deleted = relay_http.webhook("push", push(deleted=True, after="0" * 40), "d-10")
    assert deleted.status_code == 202 and "deletes" in deleted.json()["message"]
    issues = relay_http.webhook("issues", {"repository": {"full_name": "pytorch/pytorch"}}, "d-11")
    assert issues.status_code == 202 and "not handled" in issues.json()["message"]
    assert relay_http.relay.intake.depth() == 0


def test_labelled_pull_request_and_rerun_are_enqueued(relay_http: RelayHTTP) -> None:
    pr = {
        "action": "labeled",
        "label": {"name": "ciflow/crcr/spyre"},
        "repository": {"full_name": "pytorch/pytorch"},
        "pull_request": {
            "number": 7,
            "labels": [{"name": "ciflow/crcr/spyre"}],
            "head": {"sha": SHA_B},
            "base": {"sha": SHA_A, "ref": "main"},
            "title": "t",
            "body": None,
            "merged": False,
        },
    }
    assert relay_http.webhook("pull_request", pr, "d-pr").status_code == 202
    rerun = {
        "action": "rerequested",
        "repository": {"full_name": "pytorch/pytorch"},
        "check_suite": {"head_sha": SHA_B},
    }
    assert relay_http.webhook("check_suite", rerun, "d-rerun").status_code == 202
    intake = relay_http.relay.intake
    kinds = []
    while (claimed := intake.claim("w")) is not None:
        kinds.append((claimed.event.kind, claimed.event.pr_number, claimed.event.rerun))
        intake.ack(claimed)
    assert kinds == [("pull_request", 7, None), ("rerun", None, "full")]


def test_redis_outage_is_503_and_redelivery_is_accepted(
    relay_http: RelayHTTP, redis_proc: RedisProcess
) -> None:
    assert relay_http.get("/healthz").status_code == 200
    redis_proc.stop()
    down = relay_http.webhook("push", push(), "d-outage")
    assert down.status_code == 503
    assert relay_http.get("/healthz").status_code == 503
    assert relay_http.get("/metrics").status_code == 503
    redis_proc.start()  # an empty Redis again (no persistence): nothing was half-recorded
    assert relay_http.get("/healthz").status_code == 200
    again = relay_http.webhook("push", push(), "d-outage")
    assert again.status_code == 202 and again.json()["message"] == "enqueued"
    assert relay_http.relay.intake.depth() == 1
    # The 503 was counted in the process and reaches Redis once it is back.
    text = relay_http.get("/metrics").text
    assert 'spyre_ci_deliveries_total{event="push",outcome="unavailable"} 1' in text


def test_failed_enqueue_leaves_no_seen_mark(
    relay_http: RelayHTTP, redis_proc: RedisProcess
) -> None:
    client = redis.Redis.from_url(redis_proc.url)
    client.set(INTAKE_STREAM, "not a stream")  # XADD now fails inside the script
    failed = relay_http.webhook("push", push(), "d-retry")
    assert failed.status_code == 503
    assert not relay_http.relay.intake.seen("d-retry")
    client.delete(INTAKE_STREAM)
    accepted = relay_http.webhook("push", push(), "d-retry")
    assert accepted.status_code == 202 and accepted.json()["message"] == "enqueued"
    assert relay_http.relay.intake.depth() == 1


def test_metrics_count_deliveries_latency_and_depth(relay_http: RelayHTTP) -> None:
    relay_http.webhook("push", push(), "m-1")
    relay_http.webhook("push", push(), "m-1")
    relay_http.webhook("push", push(), "m-2", secret="wrong")
    text = relay_http.get("/metrics").text
    assert 'spyre_ci_deliveries_total{event="push",outcome="accepted"} 1' in text
    assert 'spyre_ci_deliveries_total{event="push",outcome="duplicate"} 1' in text
    assert 'spyre_ci_deliveries_total{event="push",outcome="unauthorized"} 1' in text
    assert 'spyre_ci_delivery_seconds_bucket{le="+Inf"} 3' in text
    assert "spyre_ci_delivery_seconds_count 3" in text
    assert 'spyre_ci_queue_depth{queue="intake"} 1' in text
    # Header values never become label values.
    relay_http.webhook("x" * 50, {}, "m-3")
    assert 'event="other"' in relay_http.get("/metrics").text
    assert not re.search(r'event="x{50}"', relay_http.get("/metrics").text)


def test_abandoned_entries_are_reclaimed(redis_proc: RedisProcess) -> None:
    intake = RedisIntake.from_url(redis_proc.url, reclaim_idle_ms=50)
    event = TriggerEvent(kind="push", delivery_id="r-1", repo="pytorch/pytorch", head_sha=SHA_B)
    assert intake.accept("r-1", event)
    first = intake.claim("crashed-worker")
    assert first is not None and not first.reclaimed
    # Idle past reclaim_idle_ms (50 ms), the crashed worker's entry goes to the next claim.
    second = wait_for(
        lambda: intake.claim("healthy-worker", block_ms=10),
        5,
        "the abandoned entry to be claimed again",
        every=0.02,
    )
    assert second.reclaimed and second.entry_id == first.entry_id
    intake.ack(second)
    assert intake.claim("healthy-worker") is None and intake.depth() == 0


def test_consumers_survive_a_redis_restart(redis_proc: RedisProcess) -> None:
    intake = RedisIntake.from_url(redis_proc.url)
    event = TriggerEvent(kind="push", delivery_id="x-1", repo="pytorch/pytorch", head_sha=SHA_B)
    assert intake.claim("w") is None  # creates the group
    redis_proc.stop()
    with pytest.raises(QueueUnavailable):
        intake.claim("w")
    redis_proc.start()  # empty: the group is gone
    assert intake.claim("w") is None
    assert intake.accept("x-1", event)
    claimed = intake.claim("w")
    assert claimed is not None and claimed.delivery_id == "x-1"


class ListQueue:
    """Another Queue implementation (as a Celery-backed enqueuer would be): in memory."""

    def __init__(self) -> None:
        self.events: list[TriggerEvent] = []
        self.seen: set[str] = set()

    def accept(self, delivery_id: str, event: TriggerEvent) -> bool:
        if delivery_id in self.seen:
            return False
        self.events.append(event)
        self.seen.add(delivery_id)
        return True

    def depth(self) -> int:
        return len(self.events)


def test_any_queue_can_take_the_triggers(redis_proc: RedisProcess) -> None:
    from relay.app import Relay
    from relay.intake import Queue, connect
    from tests.testing.relay import base_config

    queue = ListQueue()
    assert isinstance(queue, Queue)
    relay = Relay(base_config(redis_proc.url), client=connect(redis_proc.url), intake=queue)
    service = RelayHTTP(relay)
    try:
        assert service.webhook("push", push(), "q-1").json()["message"] == "enqueued"
        assert service.webhook("push", push(), "q-1").json()["message"] == "already accepted"
        assert [e.head_sha for e in queue.events] == [SHA_B]
        assert 'spyre_ci_queue_depth{queue="intake"} 1' in service.get("/metrics").text
    finally:
        service.stop()


def test_a_form_encoded_delivery_is_verified_over_its_raw_body_and_accepted(
    relay_http: RelayHTTP,
) -> None:
    from urllib.parse import urlencode

    # GitHub's default content type for a new webhook: the JSON in a `payload` field.
    raw = urlencode({"payload": json.dumps(push())}).encode()
    answer = relay_http.webhook(
        "push",
        None,
        "d-form",
        raw=raw,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 202, answer.text
    assert relay_http.relay.intake.depth() == 1
    no_field = relay_http.webhook(
        "push",
        None,
        "d-form-2",
        raw=b"other=1",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert no_field.status_code == 400 and "'payload' field" in no_field.json()["message"]


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "says"),
    [
        (b'{"a": 1}', "text/plain", 415, "application/json"),
        (b'{"after": NaN}', "application/json", 400, "NaN is not a JSON number"),
        (b'{"after": Infinity}', "application/json", 400, "Infinity"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 400, "nested"),
        (b'{"a":' * 70 + b"1" + b"}" * 70, "application/json", 400, "nested deeper than 64"),
        (b"\xff\xfe", "application/json", 400, "not UTF-8"),
    ],
)
def test_bodies_no_webhook_sends_are_refused_with_a_reason_never_a_500(
    relay_http: RelayHTTP, raw: bytes, content_type: str, status: int, says: str
) -> None:
    answer = relay_http.webhook(
        "push", None, "d-odd", raw=raw, headers={"Content-Type": content_type}
    )
    assert answer.status_code == status, answer.text
    assert says in answer.json()["message"]
    assert relay_http.relay.intake.depth() == 0


@pytest.mark.parametrize("sha", ["/../../.", "B" * 40, "a" * 39, "g" * 40])
def test_a_signed_push_whose_sha_is_not_a_sha_is_refused(relay_http: RelayHTTP, sha: str) -> None:
    answer = relay_http.webhook("push", push(after=sha), "d-sha")
    assert answer.status_code == 400 and "is not 40 hex characters" in answer.json()["message"]
    assert relay_http.relay.intake.depth() == 0
