"""Round trips through the local HUD server (tests/servers/hud.py) and a callback endpoint."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from contracts.errors import Unavailable
from dashboard_export import ExportError, PublishRefused, PublishUnavailable
from dashboard_export.crcr import envelope_for, hud_envelope
from dashboard_export.hud_row import row_for, workflow_job_row
from dashboard_export.model import RunRecord, VariantResult
from dashboard_export.publish import post_json, publish_callback, publish_hud, publish_run_to_hud
from dashboard_export.retry import RetryPolicy
from suites.model import Outcome, Status
from tests.servers.hud import HudServer
from tests.testing.processes import free_port

KEY = "hud-test-key"


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)

    def backoff(self) -> list[float]:
        """Each wait's base (1, 2, 4, ... s), checked to be within its quarter of jitter."""
        bases = [float(2**i) for i in range(len(self))]
        assert all(b <= s <= 1.25 * b for b, s in zip(bases, self, strict=True)), self
        return bases


def _publish(
    record: RunRecord,
    hud: HudServer,
    status: str = "completed",
    key: str = KEY,
    sleep: Sleeps | None = None,
    policy: RetryPolicy | None = None,
) -> Any:
    return publish_run_to_hud(
        record,
        hud.url,
        key,
        status=status,
        sleep=sleep if sleep is not None else Sleeps(),
        require_https=False,
        policy=policy,
    )


def _comparable(row: dict[str, Any]) -> dict[str, Any]:
    # JSON-in-a-string columns may differ in spacing between two writers, not in content.
    return {
        **row,
        "failed_tests_json": json.loads(row["failed_tests_json"] or "null"),
        "environment": json.loads(row["environment"] or "null"),
        "triage_verdict_json": json.loads(row["triage_verdict_json"] or "null"),
    }


def test_hud_stores_the_row_we_build(record: RunRecord, hud_server: HudServer) -> None:
    _publish(record, hud_server, "in_progress")
    [stored] = hud_server.rows
    assert _comparable(stored) == _comparable(row_for(record, "in_progress"))
    delivery = _publish(record, hud_server)
    assert delivery.status == 200 and delivery.attempts == 1
    assert hud_server.received[0].auth == KEY
    [stored] = hud_server.rows
    assert _comparable(stored) == _comparable(row_for(record))
    # started_at came with in_progress only; HUD's UpdateItem kept it.
    assert stored["started_at"] == "2026-11-29 14:00:05.000000000"


def test_another_downstreams_minimal_callback_goes_through(hud_server: HudServer) -> None:
    # The relay forwards every allowlisted repo's callback with this publisher: the contract's
    # required fields are enough, extra fields pass.
    callback = {
        "delivery_id": "d-77",
        "workflow": {
            "status": "completed",
            "run_id": 5,
            "name": "ci",
            "job_name": "test",
            "check_run_id": "5-1",
            "run_attempt": 1,
            "started_at": "2026-11-29T10:00:00.123Z",
            "vendor_field": {"anything": True},
        },
    }
    envelope = hud_envelope(callback, verified_repo="acme/npu", level="L2")
    publish_hud(envelope, hud_server.url, KEY, sleep=Sleeps(), require_https=False)
    [row] = hud_server.rows
    assert row["dynamoKey"] == "acme/npu/d-77/ci/test/5-1"
    assert _comparable(row) == _comparable(workflow_job_row(envelope))


def test_republishing_never_duplicates(record: RunRecord, hud_server: HudServer) -> None:
    _publish(record, hud_server, "in_progress")
    assert hud_server.rows[0]["status"] == "in_progress"
    assert _publish(record, hud_server).status == 200
    # HUD writes a completed record once: the same run again is a duplicate, not an error.
    again = _publish(record, hud_server)
    assert again.status == 409 and "final already" in again.body
    assert hud_server.inserts == 2
    [row] = hud_server.rows  # one key: (downstream_repo, delivery_id, dynamoKey)
    assert row["status"] == "completed" and row["conclusion"] == "failure"
    # Another attempt is another check run id, hence another row.
    _publish(dataclasses.replace(record, attempt=3, check_run_id=""), hud_server)
    assert len(hud_server.rows) == 2


def test_wrong_key_is_surfaced_with_the_body(record: RunRecord, hud_server: HudServer) -> None:
    sleeps = Sleeps()
    with pytest.raises(PublishRefused, match=r"HUD .* answered 401: .*x-hud-internal-bot") as info:
        _publish(record, hud_server, key="not-the-key", sleep=sleeps)
    assert sleeps == [] and hud_server.rows == []  # 4xx: no retry
    assert info.value.status == 401 and isinstance(info.value, ExportError)


def test_missing_required_field_is_400(record: RunRecord, hud_server: HudServer) -> None:
    envelope = envelope_for(record)
    del envelope["untrusted"]["callback_payload"]["workflow"]["check_run_id"]
    with pytest.raises(ExportError, match=r"answered 400: .*workflow\.check_run_id"):
        post_json(
            hud_server.url + "/crcr/results", envelope, {"x-hud-internal-bot": KEY}, sleep=Sleeps()
        )
    # The publisher validates first and never sends such a body.
    with pytest.raises(ExportError, match="invalid hud_envelope"):
        publish_hud(envelope, hud_server.url, KEY, sleep=Sleeps(), require_https=False)
    assert len(hud_server.received) == 1


def test_server_refuses_over_2mb_and_publisher_trims(
    record: RunRecord, hud_server: HudServer
) -> None:
    with pytest.raises(ExportError, match="answered 413"):
        post_json(
            hud_server.url + "/crcr/results",
            {"blob": "z" * (2 * 1024 * 1024)},
            {"x-hud-internal-bot": KEY},
            sleep=Sleeps(),
        )
    many = tuple(
        VariantResult.of(
            Outcome(f"big::tmpl::op{i}::float32", Status.FAILED, 1.0, "m" * 3900), "new"
        )
        for i in range(700)
    )
    big = dataclasses.replace(record, results=record.results + many)
    delivery = _publish(big, hud_server)
    assert delivery.status == 200 and delivery.omitted_failed_tests > 0
    assert delivery.bytes_sent <= 2 * 1024 * 1024
    [row] = hud_server.rows
    failed = json.loads(row["failed_tests_json"])
    assert len(failed) == 50 and row["failed_tests"] == len(big.failures)


def test_5xx_is_retried_after_1_2_4_seconds_and_jitter(
    record: RunRecord, hud_server: HudServer
) -> None:
    hud_server.fail_next(2, 503)
    sleeps = Sleeps()
    delivery = _publish(record, hud_server, sleep=sleeps)
    # 1 s then 2 s, each with up to a quarter more at random, never less.
    assert delivery.attempts == 3 and sleeps.backoff() == [1.0, 2.0]
    assert len(hud_server.rows) == 1

    hud_server.fail_next(4, 502)
    sleeps = Sleeps()
    with pytest.raises(PublishUnavailable, match="failed after 4 attempts; last: 502") as info:
        _publish(record, hud_server, sleep=sleeps, policy=RetryPolicy(cap_s=10))
    # A fourth wait (8 s) would pass the 10 s cap: not begun.
    assert sleeps.backoff() == [1.0, 2.0, 4.0]
    # An outage, told apart by type: neither bad input (ValueError) nor an ExportError.
    assert isinstance(info.value, Unavailable)
    assert not isinstance(info.value, (ValueError, ExportError))


def test_network_errors_are_retried(record: RunRecord) -> None:
    sleeps = Sleeps()
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(PublishUnavailable, match="failed after 4 attempts; last: network error"):
        publish_run_to_hud(
            record, url, KEY, sleep=sleeps, require_https=False, policy=RetryPolicy(cap_s=10)
        )
    assert sleeps.backoff() == [1.0, 2.0, 4.0]


def test_hud_url_must_be_https(record: RunRecord) -> None:
    with pytest.raises(ExportError, match="must be https"):
        publish_run_to_hud(record, "http://hud.example.invalid", KEY)
    with pytest.raises(ExportError, match="HUD_BOT_KEY"):
        publish_run_to_hud(record, "https://hud.example.invalid", "")


class _CallbackEndpoint:
    """The relay's callback contract as far as a sender sees it: bearer auth, one
    callback per (delivery, run, attempt, job, status), a duplicate is 400."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.bodies: list[dict[str, Any]] = []
        seen: set[tuple[str, ...]] = set()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.headers.get("Authorization") != f"Bearer {endpoint.token}":
                    status, reply = 401, "bad token"
                else:
                    wf = body["workflow"]
                    key = (
                        body["delivery_id"],
                        wf["run_id"],
                        str(wf["run_attempt"]),
                        wf["job_name"],
                        wf["status"],
                    )
                    if key in seen:
                        status, reply = 400, "duplicate callback"
                    else:
                        seen.add(key)
                        endpoint.bodies.append(body)
                        status, reply = 200, "ok"
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/github/callback"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()


@pytest.fixture()
def callback_endpoint() -> Iterator[_CallbackEndpoint]:
    endpoint = _CallbackEndpoint("oidc-token")
    yield endpoint
    endpoint.httpd.shutdown()
    endpoint.httpd.server_close()


def test_callback_publisher(record: RunRecord, callback_endpoint: _CallbackEndpoint) -> None:
    url = callback_endpoint.url
    publish_callback(record, url, "oidc-token", status="in_progress", sleep=Sleeps())
    publish_callback(record, url, "oidc-token", sleep=Sleeps())
    assert [b["workflow"]["status"] for b in callback_endpoint.bodies] == [
        "in_progress",
        "completed",
    ]
    assert callback_endpoint.bodies[1]["workflow"]["test_results"]["total"] == 9
    with pytest.raises(ExportError, match="answered 400: duplicate callback"):
        publish_callback(record, url, "oidc-token", sleep=Sleeps())
    with pytest.raises(ExportError, match="answered 401"):
        publish_callback(record, url, "wrong", sleep=Sleeps())


def test_callback_without_a_ci_run_id_is_refused_before_sending(record: RunRecord) -> None:
    local = dataclasses.replace(record, run_id="push-a04374e4-1", ci_run_id="")
    with pytest.raises(ExportError, match="no CI run id .*GITHUB_RUN_ID"):
        publish_callback(local, "http://127.0.0.1:9/github/callback", "oidc-token", sleep=Sleeps())


HUD_CASES = {
    "total absent is summed": {
        "status": "completed",
        "conclusion": "success",
        "test_results": {"passed": 3, "failed": 1, "skipped": 2},
    },
    "counts and conclusion only on completed": {
        "status": "in_progress",
        "conclusion": "failure",
        "test_results": {"passed": 3, "failed": 1, "skipped": 2, "total": 6},
    },
    "run_attempt junk falls back to 1": {"status": "in_progress", "run_attempt": "x"},
    "run_attempt absent is 1, numeric run id": {"status": "completed", "run_id": 42},
    "ISO timestamps with fractions": {
        "status": "completed",
        "started_at": "2026-11-29T10:00:00Z",
        "completed_at": "2026-11-29T10:30:00.123456Z",
    },
    "a Buildkite build": {
        "status": "completed",
        "run_id": "0190a8e1-8d5c-4b6e-9b1e-2f1d3c4b5a69",
        "run_attempt": "2",
        "artifact_url": "https://buildkite.example/b/1",
    },
}


@pytest.mark.parametrize("case", sorted(HUD_CASES))
def test_our_derivation_is_huds(case: str, hud_server: HudServer) -> None:
    workflow = {
        "name": "ci",
        "job_name": "test",
        "check_run_id": "7-1",
        "run_id": "7",
        "url": "https://ci.example/7",
        **HUD_CASES[case],
    }
    callback = {
        "event_type": "push",
        "delivery_id": "d-1",
        "payload": {"repository": {"full_name": "pytorch/pytorch"}},
        "workflow": workflow,
    }
    envelope = hud_envelope(callback, verified_repo="acme/npu", level="L2", queue_time=3.5)
    # Straight to HUD: the derivation is the point (our publisher refuses run_attempt "x").
    post_json(
        hud_server.url + "/crcr/results", envelope, {"x-hud-internal-bot": KEY}, sleep=Sleeps()
    )
    [row] = hud_server.rows
    assert _comparable(row) == _comparable(workflow_job_row(envelope))
    assert row["pytorch_head_sha"] == "d-1"  # no PR, no head_sha: the delivery id
    if workflow["status"] == "in_progress":
        assert row["conclusion"] == "" and row["total_tests"] == 0
    if "passed" in workflow.get("test_results", {}) and workflow["status"] == "completed":
        assert row["total_tests"] == 6


def test_job_fields_hud_requires_are_refused_as_hud_refuses_them(hud_server: HudServer) -> None:
    callback = {
        "delivery_id": "d-2",
        "workflow": {"status": "completed", "run_id": "5", "name": "ci", "check_run_id": "5-1"},
    }
    envelope = hud_envelope(callback, verified_repo="acme/npu", level="L2")
    with pytest.raises(ExportError, match="workflow.job_name"):
        workflow_job_row(envelope)
    with pytest.raises(ExportError, match=r"answered 400: .*workflow\.job_name"):
        post_json(
            hud_server.url + "/crcr/results", envelope, {"x-hud-internal-bot": KEY}, sleep=Sleeps()
        )
