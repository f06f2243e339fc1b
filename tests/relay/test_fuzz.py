"""Fuzz the webhook and callback endpoints over real HTTP: malformed headers and bodies never
produce a 5xx (Redis stays up here; its outage 503 is tested in test_webhook.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.app import Relay
from relay.github import GitHubAdapter
from relay.intake import connect
from relay.signature import sign
from tests.servers.github_api import GitHubAPIServer
from tests.testing.relay import SECRET, RedisProcess, RelayHTTP, base_config

HEADER_TEXT = st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=60)
EVENTS = st.sampled_from(
    [
        "push",
        "pull_request",
        "check_run",
        "check_suite",
        "repository_dispatch",
        "nightly",
        "periodic",
        "ping",
        "issues",
        "",
    ]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=20,
)
# Payload-shaped objects: the keys normalization reads, with values of any type.
KEYS = st.sampled_from(
    [
        "ref",
        "before",
        "after",
        "deleted",
        "forced",
        "commits",
        "repository",
        "action",
        "pull_request",
        "label",
        "labels",
        "check_run",
        "check_suite",
        "client_payload",
        "event_type",
        "delivery_id",
        "payload",
        "head_sha",
        "merged",
        "number",
        "head",
        "base",
        "full_name",
        "added",
        "modified",
        "removed",
        "name",
        "message",
        "zen",
    ]
)
SHAPED = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=12)
    | st.just("pytorch/pytorch")
    | st.just("refs/heads/main")
    | st.just("ciflow/crcr/spyre"),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=6),
    max_leaves=30,
)
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def post(relay: RelayHTTP, path: str, body: bytes, headers: dict[str, str]) -> int:
    answer = relay.http.post(f"{relay.url}{path}", data=body, headers=headers, timeout=30)
    return answer.status_code


@FUZZ
@given(
    event=EVENTS,
    delivery=HEADER_TEXT,
    signature=st.one_of(st.none(), HEADER_TEXT),
    body=st.binary(max_size=200),
)
def test_webhook_garbage_is_never_5xx(
    relay_http: RelayHTTP, event: str, delivery: str, signature: str | None, body: bytes
) -> None:
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    assert post(relay_http, "/github/webhook", body, headers) in (400, 401)


@FUZZ
@given(event=EVENTS, delivery=HEADER_TEXT, payload=st.one_of(JSON, SHAPED))
def test_signed_odd_payloads_are_never_5xx(
    relay_http: RelayHTTP, event: str, delivery: str, payload: Any
) -> None:
    body = json.dumps(payload).encode()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(SECRET, body),
    }
    assert post(relay_http, "/github/webhook", body, headers) in (200, 202, 400)


@FUZZ
@given(
    auth=st.one_of(st.none(), HEADER_TEXT, st.just("Bearer tok"), st.just("Bearer a.b.c")),
    body=st.one_of(st.binary(max_size=200), JSON.map(lambda v: json.dumps(v).encode())),
)
def test_callback_garbage_is_never_5xx(
    relay_http: RelayHTTP, auth: str | None, body: bytes
) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    assert post(relay_http, "/github/callback", body, headers) in (400, 401, 403)


PUSH = {
    "ref": "refs/heads/main",
    "before": "a" * 40,
    "after": "b" * 40,
    "deleted": False,
    "forced": False,
    "repository": {"full_name": "pytorch/pytorch"},
    "commits": [{"message": "m", "added": ["a.py"], "modified": [], "removed": []}],
}
PULL = {
    "action": "labeled",
    "label": {"name": "ciflow/crcr/spyre"},
    "repository": {"full_name": "pytorch/pytorch"},
    "pull_request": {
        "number": 1,
        "merged": False,
        "labels": [{"name": "ciflow/crcr/spyre"}],
        "head": {"sha": "b" * 40},
        "base": {"sha": "a" * 40, "ref": "main"},
    },
}
CHECK = {
    "action": "rerequested",
    "repository": {"full_name": "pytorch/pytorch"},
    "check_run": {"head_sha": "b" * 40},
}
DISPATCH = {
    "action": "push",
    "client_payload": {"event_type": "push", "delivery_id": "x", "payload": PUSH},
}
TEMPLATES = [
    ("push", PUSH),
    ("pull_request", PULL),
    ("check_run", CHECK),
    ("check_suite", {**CHECK, "check_suite": CHECK["check_run"]}),
    ("repository_dispatch", DISPATCH),
]


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found += paths(child, (*prefix, i))
    return found


def mutated(template: Any, path: tuple, value: Any) -> Any:
    copy = json.loads(json.dumps(template))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copy


@st.composite
def mutations(draw: Any) -> tuple[str, Any]:
    event, template = draw(st.sampled_from(TEMPLATES))
    path = draw(st.sampled_from(paths(template)))
    return event, mutated(template, path, draw(JSON))


@FUZZ
@given(case=mutations(), delivery=HEADER_TEXT.filter(bool))
def test_valid_payloads_with_one_field_of_the_wrong_type_are_never_5xx(
    relay_http: RelayHTTP, case: tuple[str, Any], delivery: str
) -> None:
    event, payload = case
    body = json.dumps(payload).encode()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(SECRET, body),
    }
    assert post(relay_http, "/github/webhook", body, headers) in (202, 400)


CALLBACK = {
    "event_type": "pull_request",
    "delivery_id": "fuzz",
    "payload": {
        "repository": {"full_name": "pytorch/pytorch"},
        "pull_request": {
            "number": 3,
            "labels": [{"name": "ciflow/crcr/spyre"}],
            "head": {"sha": "b" * 40},
        },
    },
    "workflow": {
        "schema_version": "1",
        "status": "in_progress",
        "conclusion": None,
        "name": "ci",
        "url": "https://ci.example/1",
        "run_id": "1",
        "run_attempt": "1",
        "job_name": "test",
        "check_run_id": "1-1",
        "started_at": None,
        "completed_at": None,
    },
}


@pytest.fixture()
def crcr_http(
    redis_proc: RedisProcess, github_api: GitHubAPIServer, tmp_path: Path
) -> Iterator[RelayHTTP]:
    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text("L4:\n  - acme/l4-backend\n")
    config = base_config(
        redis_proc.url,
        allowlist=str(allowlist),
        callback_tokens={"tok": "acme/l4-backend"},
        fanout=False,
    )
    adapter = GitHubAdapter(
        base_url=github_api.url,
        token=github_api.token,
        app_id=github_api.app_id,
        installation_id=github_api.installation_id,
        private_key_pem=github_api.private_key_pem,
    )
    service = RelayHTTP(Relay(config, client=connect(redis_proc.url), adapter=adapter))
    service.relay.callbacks.state.record_dispatch("fuzz", "acme/l4-backend", "push", time.time())
    try:
        yield service
    finally:
        service.stop()


@st.composite
def callback_mutations(draw: Any) -> Any:
    path = draw(st.sampled_from(paths(CALLBACK)))
    return mutated(CALLBACK, path, draw(JSON))


@FUZZ
@given(body=callback_mutations())
def test_authorized_callbacks_with_a_wrong_field_are_never_5xx(
    crcr_http: RelayHTTP, body: Any
) -> None:
    answer = crcr_http.callback(body, "tok")
    assert answer.status_code in (200, 400), answer.text
