"""CRCR relay mode over real HTTP: fan-out, callback auth, state machine, rate limit, sweeper,
HUD forwarding (local HUD server) and check runs (local GitHub API server)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from dashboard_export.publish import publish_hud
from relay.app import Relay
from relay.config import OidcConfig
from relay.crcr_state import ZOMBIE_TIMEOUT_SECONDS
from relay.github import GitHubAdapter
from relay.intake import connect
from tests.servers.github_api import GitHubAPIServer
from tests.servers.hud import HudServer
from tests.testing.relay import RedisProcess, RelayHTTP, base_config

SHA_A, SHA_B = "a" * 40, "b" * 40
ALLOWLIST = """\
L1:
  - acme/l1-backend
L2:
  - torch-spyre/torch-spyre: oncall-a, oncall-b
L3:
  spyre:
    acme/l3-backend: [oncall-c]
L4:
  - acme/l4-backend
"""
TOKENS = {
    "tok-spyre": "torch-spyre/torch-spyre",
    "tok-l1": "acme/l1-backend",
    "tok-l3": "acme/l3-backend",
    "tok-l4": "acme/l4-backend",
    "tok-stranger": "evil/unlisted",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Crcr:
    http: RelayHTTP
    clock: Clock
    github: GitHubAPIServer
    hud: HudServer

    def push(self, delivery: str) -> None:
        payload = {
            "ref": "refs/heads/main",
            "before": SHA_A,
            "after": SHA_B,
            "deleted": False,
            "forced": False,
            "repository": {"full_name": "pytorch/pytorch"},
            "commits": [{"message": "m", "added": ["a.py"], "modified": [], "removed": []}],
        }
        assert self.http.webhook("push", payload, delivery).status_code == 202
        fanout = self.http.relay.fanout
        assert fanout is not None
        assert fanout.run_once("test-fanout") == 4

    def callback(self, token: str | None, body: Any) -> Any:
        return self.http.callback(body, token)


def body(
    delivery: str,
    status: str,
    job: str = "test",
    run_id: str = "9001",
    event_type: str = "push",
    conclusion: str | None = None,
    payload: dict | None = None,
) -> dict[str, Any]:
    return {
        "event_type": event_type,
        "delivery_id": delivery,
        "payload": payload
        if payload is not None
        else {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": SHA_B},
        "workflow": {
            "schema_version": "1",
            "status": status,
            "conclusion": conclusion,
            "name": "spyre-ci",
            "url": "https://ci.example/runs/9001",
            "run_id": run_id,
            "run_attempt": "1",
            "job_name": job,
            "check_run_id": f"{run_id}-1",
            "started_at": "2026-11-29T10:00:00Z",
            "completed_at": "2026-11-29T10:30:00Z" if status == "completed" else None,
        },
    }


@pytest.fixture()
def crcr(redis_proc: RedisProcess, github_api: GitHubAPIServer, tmp_path: Path) -> Iterator[Crcr]:
    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text(ALLOWLIST)
    config = base_config(
        redis_proc.url,
        allowlist=str(allowlist),
        callback_tokens=TOKENS,
        callback_rate_per_minute=1000,
    )
    adapter = GitHubAdapter(
        base_url=github_api.url,
        token=github_api.token,
        app_id=github_api.app_id,
        installation_id=github_api.installation_id,
        private_key_pem=github_api.private_key_pem,
    )
    with HudServer("hud-key") as hud:

        def publisher(envelope: Any) -> Any:
            return publish_hud(
                envelope, hud.url, "hud-key", require_https=False, sleep=lambda _s: None
            )

        relay = Relay(
            config,
            client=connect(redis_proc.url, socket_timeout=2.0),
            adapter=adapter,
            hud=publisher,
        )
        clock = Clock()
        relay.callbacks.clock = clock
        assert relay.fanout is not None
        relay.fanout.clock = clock
        service = RelayHTTP(relay)
        try:
            yield Crcr(service, clock, github_api, hud)
        finally:
            service.stop()


def test_push_is_fanned_out_to_every_allowlisted_repo(crcr: Crcr) -> None:
    crcr.push("d-1")
    repos = sorted(d["repo"] for d in crcr.github.dispatches)
    assert repos == [
        "acme/l1-backend",
        "acme/l3-backend",
        "acme/l4-backend",
        "torch-spyre/torch-spyre",
    ]
    sent = crcr.github.dispatches[0]
    assert sent["event_type"] == "push"
    assert set(sent["client_payload"]) == {"event_type", "delivery_id", "payload"}
    assert sent["client_payload"]["delivery_id"] == "d-1"
    assert sent["client_payload"]["payload"]["after"] == SHA_B
    # The same delivery again is a duplicate: nothing more is sent.
    crcr.http.webhook("push", sent["client_payload"]["payload"], "d-1")
    assert crcr.http.relay.fanout is not None
    assert crcr.http.relay.fanout.run_once("test-fanout") == 0
    assert len(crcr.github.dispatches) == 4


def test_github_outage_during_fanout_is_retried_without_duplicates(crcr: Crcr) -> None:
    crcr.github.fail_next("POST", r"/repos/acme/l4-backend/dispatches", status=502)
    payload = {
        "ref": "refs/heads/main",
        "before": SHA_A,
        "after": SHA_B,
        "repository": {"full_name": "pytorch/pytorch"},
        "commits": [],
    }
    assert crcr.http.webhook("push", payload, "d-2").status_code == 202
    fanout = crcr.http.relay.fanout
    assert fanout is not None
    assert fanout.run_once("f1") == 3  # l4 failed: the entry stays pending
    fanout.outbox.reclaim_idle_ms = 0
    assert fanout.run_once("f2") == 1  # reclaimed; only l4 is sent again
    assert sorted(d["repo"] for d in crcr.github.dispatches).count("acme/l4-backend") == 1
    assert fanout.outbox.depth() == 0


def test_job_goes_dispatched_in_progress_completed(crcr: Crcr) -> None:
    crcr.push("d-3")
    crcr.clock.now += 42.0
    started = crcr.callback("tok-spyre", body("d-3", "in_progress"))
    assert started.status_code == 200, started.text
    assert started.json()["queue_time"] == pytest.approx(42.0)
    assert started.json()["hud"] == "forwarded"
    assert crcr.callback("tok-spyre", body("d-3", "in_progress")).status_code == 400
    crcr.clock.now += 600.0
    done = crcr.callback("tok-spyre", body("d-3", "completed", conclusion="success"))
    assert done.status_code == 200, done.text
    assert done.json()["execution_time"] == pytest.approx(600.0)
    assert done.json()["queue_time"] == pytest.approx(42.0)
    duplicate = crcr.callback("tok-spyre", body("d-3", "completed", conclusion="success"))
    assert duplicate.status_code == 400 and "duplicate" in duplicate.json()["message"]
    (row,) = crcr.hud.rows
    assert row["status"] == "completed" and row["downstream_repo"] == "torch-spyre/torch-spyre"
    assert row["queue_time"] == pytest.approx(42.0)
    assert row["execution_time"] == pytest.approx(600.0)
    state = crcr.http.relay.client.hgetall("crcr:state:d-3:torch-spyre/torch-spyre:9001:1:test")
    assert state[b"state"] == b"COMPLETED"


def test_out_of_order_and_undispatched_callbacks_are_400(crcr: Crcr) -> None:
    crcr.push("d-4")
    skipped = crcr.callback("tok-spyre", body("d-4", "completed", conclusion="success"))
    assert skipped.status_code == 400 and "skips in_progress" in skipped.json()["message"]
    never = crcr.callback("tok-spyre", body("never-dispatched", "in_progress"))
    assert never.status_code == 400 and "no prior dispatch" in never.json()["message"]
    assert crcr.hud.rows == []


def test_callback_auth_allowlist_and_schema(crcr: Crcr) -> None:
    crcr.push("d-5")
    assert crcr.callback(None, body("d-5", "in_progress")).status_code == 401
    assert crcr.callback("nope", body("d-5", "in_progress")).status_code == 401
    # A repo not on the allowlist is ignored, as the reference relay does: 200, nothing kept.
    stranger = crcr.callback("tok-stranger", body("d-5", "in_progress"))
    assert stranger.status_code == 200 and stranger.json()["message"] == "ignored"
    assert crcr.http.relay.client.keys("crcr:state:*") == []
    bad = body("d-5", "in_progress")
    del bad["workflow"]["run_id"]
    answer = crcr.callback("tok-spyre", bad)
    assert answer.status_code == 400 and "run_id" in answer.json()["message"]
    wrong_version = body("d-5", "in_progress")
    wrong_version["workflow"]["schema_version"] = "2"
    assert crcr.callback("tok-spyre", wrong_version).status_code == 400
    assert crcr.callback("tok-spyre", b"{nope").status_code == 400


def test_l1_is_ignored_and_writes_no_state(crcr: Crcr) -> None:
    crcr.push("d-6")
    answer = crcr.callback("tok-l1", body("d-6", "in_progress"))
    assert answer.status_code == 200 and answer.json()["message"] == "ignored"
    assert "L1" in answer.json()["reason"]
    assert crcr.hud.rows == []
    assert crcr.http.relay.client.keys("crcr:state:*") == []
    assert crcr.http.relay.client.keys("crcr:ratelimit:*") == []


def test_l4_gets_a_check_run_and_l3_only_with_its_label(crcr: Crcr) -> None:
    crcr.push("d-7")
    trunk = {
        "ref": "refs/tags/ciflow/trunk/77",
        "after": SHA_B,
        "repository": {"full_name": "pytorch/pytorch"},
    }
    started = crcr.callback("tok-l4", body("d-7", "in_progress", job="build", payload=trunk))
    check_id = started.json()["check_run"]
    run = crcr.github.check_runs[check_id]
    assert run["name"] == "crcr/acme/l4-backend/spyre-ci/build"
    assert run["head_sha"] == SHA_B and run["external_id"] == "9001:77"
    assert run["details_url"] == "https://github.com/acme/l4-backend/actions/runs/9001"
    done = body("d-7", "completed", job="build", conclusion="failure", payload=trunk)
    crcr.callback("tok-l4", done)
    assert run["status"] == "completed" and run["conclusion"] == "failure"
    l3 = crcr.callback("tok-l3", body("d-7", "in_progress", job="build"))
    assert l3.json()["check_run"] is None
    labelled = {
        "repository": {"full_name": "pytorch/pytorch"},
        "pull_request": {
            "number": 12,
            "labels": [{"name": "ciflow/crcr/spyre"}],
            "head": {"sha": SHA_A},
        },
    }
    l3_pr = crcr.callback("tok-l3", body("d-7", "in_progress", job="lint", payload=labelled))
    pr_run = crcr.github.check_runs[l3_pr.json()["check_run"]]
    assert pr_run["head_sha"] == SHA_A and pr_run["external_id"] == "9001:12"


def test_a_completion_while_the_label_creates_the_check_run_completes_that_one(
    crcr: Crcr,
) -> None:
    # The race behind a flaky reference case: the label's check run exists on GitHub but its
    # id is not recorded yet when the job's completion arrives. One check run, completed.
    crcr.push("d-7b")
    pr = {"number": 12, "labels": [], "head": {"sha": SHA_A}}
    payload = {"repository": {"full_name": "pytorch/pytorch"}, "pull_request": pr}
    started = crcr.callback("tok-l3", body("d-7b", "in_progress", job="e2e", payload=payload))
    assert started.status_code == 200 and started.json()["check_run"] is None
    adapter = crcr.http.relay.callbacks.adapter
    assert adapter is not None
    create = adapter.create_check_run
    answers = []

    def create_then_complete(*args: Any, **kwargs: Any) -> int:
        check_id = create(*args, **kwargs)
        done = body("d-7b", "completed", job="e2e", conclusion="failure", payload=payload)
        answers.append(crcr.callback("tok-l3", done))
        return check_id

    adapter.create_check_run = create_then_complete  # type: ignore[method-assign]
    label = {"name": "ciflow/crcr/spyre"}
    labeled = {**payload, "action": "labeled", "label": label, "pull_request": {**pr}}
    assert crcr.http.webhook("pull_request", labeled, "d-7b-label").status_code == 202
    assert crcr.http.relay.fanout is not None
    assert crcr.http.relay.fanout.run_once("test-fanout") == 1
    (answer,) = answers
    assert answer.status_code == 200 and answer.json()["check_run"] == "pending"
    (run,) = crcr.github.check_runs.values()
    assert run["name"] == "crcr/acme/l3-backend/spyre-ci/e2e"
    assert run["status"] == "completed" and run["conclusion"] == "failure"


def test_hud_outage_is_502_and_leaves_the_state_for_a_retry(
    crcr: Crcr, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A retry cap of 0: the first 503 is the outage (the retries are test_publish's).
    monkeypatch.setenv("SPYRE_CI_PUBLISH_RETRY_S", "0")
    crcr.push("d-8")
    crcr.hud.fail_next(1, 503)
    refused = crcr.callback("tok-spyre", body("d-8", "in_progress"))
    assert refused.status_code == 502
    retried = crcr.callback("tok-spyre", body("d-8", "in_progress"))
    assert retried.status_code == 200 and retried.json()["hud"] == "forwarded"


def test_huds_4xx_goes_back_to_the_caller_and_leaves_the_state(crcr: Crcr) -> None:
    crcr.push("d-8b")
    crcr.hud.fail_next(1, 422)
    refused = crcr.callback("tok-spyre", body("d-8b", "in_progress"))
    assert refused.status_code == 422 and "HUD refused" in refused.json()["message"]
    retried = crcr.callback("tok-spyre", body("d-8b", "in_progress"))
    assert retried.status_code == 200 and retried.json()["hud"] == "forwarded"


def test_rate_limit_is_per_repo_and_fails_closed(crcr: Crcr, redis_proc: RedisProcess) -> None:
    crcr.http.relay.config = crcr.http.relay.callbacks.config = base_config(
        redis_proc.url, callback_tokens=TOKENS, callback_rate_per_minute=3
    )
    crcr.push("d-9")
    codes = [
        crcr.callback("tok-l3", body("d-9", "in_progress", run_id=str(i))).status_code
        for i in range(4)
    ]
    assert codes == [200, 200, 200, 429]
    assert crcr.callback("tok-spyre", body("d-9", "in_progress")).status_code == 200
    crcr.clock.now += 61
    assert crcr.callback("tok-l3", body("d-9", "in_progress", run_id="10")).status_code == 200
    redis_proc.stop()
    assert crcr.callback("tok-l3", body("d-9", "in_progress", run_id="11")).status_code == 503


def test_sweeper_times_out_jobs_stuck_in_progress(crcr: Crcr) -> None:
    crcr.push("d-10")
    trunk = {"ref": "refs/tags/ciflow/trunk/5", "after": SHA_B}
    crcr.callback("tok-l4", body("d-10", "in_progress", job="slow", payload=trunk))
    crcr.clock.now += 3600
    assert crcr.http.relay.callbacks.sweep() == 0
    crcr.clock.now += ZOMBIE_TIMEOUT_SECONDS
    assert crcr.http.relay.callbacks.sweep() == 1
    late = crcr.callback("tok-l4", body("d-10", "completed", job="slow", conclusion="success"))
    assert late.status_code == 400
    (row,) = crcr.hud.rows
    assert row["conclusion"] == "timed_out"
    (run,) = crcr.github.check_runs.values()
    assert run["conclusion"] == "timed_out"


def test_nightly_callback_skips_the_state_machine(crcr: Crcr) -> None:
    nightly = body(
        SHA_B, "completed", event_type="nightly", conclusion="success", payload={"head_sha": SHA_B}
    )
    answer = crcr.callback("tok-spyre", nightly)
    assert answer.status_code == 200 and answer.json()["hud"] == "forwarded"
    assert crcr.hud.rows[0]["event_type"] == "nightly"


@pytest.mark.parametrize("source", ["jwks_file", "jwks_url"])
def test_oidc_jwt_names_the_repository(
    redis_proc: RedisProcess, tmp_path: Path, source: str
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = {"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}
    jwks_path = tmp_path / "jwks.json"
    jwks_path.write_text(json.dumps(jwks))
    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text(ALLOWLIST)
    with ExitStack() as stack:
        if source == "jwks_file":
            oidc = OidcConfig(jwks_file=str(jwks_path))
        else:
            handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
            httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
            stack.callback(httpd.server_close)
            stack.callback(httpd.shutdown)
            oidc = OidcConfig(jwks_url=f"http://127.0.0.1:{httpd.server_port}/jwks.json")
        config = base_config(redis_proc.url, allowlist=str(allowlist), oidc=oidc)
        service = RelayHTTP(Relay(config, client=connect(redis_proc.url)))
        stack.callback(service.stop)
        service.relay.callbacks.state.record_dispatch(
            "d-oidc", "acme/l1-backend", "push", time.time()
        )
        claims = {
            "repository": "acme/l1-backend",
            "aud": "pytorch-cross-repo-ci-relay",
            "iss": "https://token.actions.githubusercontent.com",
            "exp": int(time.time()) + 300,
            "iat": int(time.time()),
        }
        token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
        assert service.callback(body("d-oidc", "in_progress"), token).status_code == 200
        for bad in (
            {"aud": "other"},
            {"iss": "https://evil.example"},
            {"exp": int(time.time()) - 10},
        ):
            forged = jwt.encode({**claims, **bad}, key, algorithm="RS256", headers={"kid": "k1"})
            assert service.callback(body("d-oidc", "in_progress"), forged).status_code == 401
        other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        unsigned = jwt.encode(claims, other_key, algorithm="RS256", headers={"kid": "k1"})
        assert service.callback(body("d-oidc", "in_progress"), unsigned).status_code == 401


def test_fanout_works_behind_another_queue(
    redis_proc: RedisProcess, github_api: GitHubAPIServer, tmp_path: Path
) -> None:
    from tests.relay.test_webhook import ListQueue

    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text(ALLOWLIST)
    config = base_config(redis_proc.url, allowlist=str(allowlist))
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    queue = ListQueue()
    relay = Relay(config, client=connect(redis_proc.url), adapter=adapter, intake=queue)
    service = RelayHTTP(relay)
    try:
        payload = {
            "ref": "refs/heads/main",
            "before": SHA_A,
            "after": SHA_B,
            "repository": {"full_name": "pytorch/pytorch"},
            "commits": [],
        }
        assert service.webhook("push", payload, "q-2").status_code == 202
        assert relay.fanout is not None and relay.fanout.run_once("f") == 4
        assert len(queue.events) == 1 and len(github_api.dispatches) == 4
    finally:
        service.stop()


def test_run_pages_are_served_from_runs_dir(redis_proc: RedisProcess, tmp_path: Path) -> None:
    import gzip

    run = tmp_path / "runs" / "push-a04374e4-1"
    (run / "hud" / "test_run" / "17001" / "1").parent.mkdir(parents=True)
    (run / "report.html").write_text("<html>report of push-a04374e4-1</html>")
    (run / "run.json").write_text("{}")
    (run / "hud" / "test_run" / "17001" / "1").write_bytes(gzip.compress(b'{"name": "t"}\n'))
    config = base_config(redis_proc.url, runs_dir=str(tmp_path / "runs"))
    service = RelayHTTP(Relay(config, client=connect(redis_proc.url)))
    try:
        page = service.get("/runs/push-a04374e4-1")
        assert page.status_code == 200 and "report of push-a04374e4-1" in page.text
        assert page.headers["Content-Type"].startswith("text/html")
        tests = service.get("/runs/push-a04374e4-1/tests")
        assert tests.status_code == 200 and json.loads(tests.text) == {"name": "t"}
        assert service.get("/runs/nope").status_code == 404
        assert service.get("/runs/..%2Fetc").status_code in (400, 404)
    finally:
        service.stop()
