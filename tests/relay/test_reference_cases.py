"""The reference relay's own cases (pytorch/test-infra `aws/lambda/cross_repo_ci_relay/tests/`:
callback handler, event handler, cleanup, JWT), replayed against `spyre-ci serve` over real
HTTP with a real Redis, a local HUD (https) and a local GitHub API. Payloads and expected
answers are the reference's; where we answer otherwise on purpose, docs/relay.md says why.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
import redis
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from relay.crcr_state import CrcrState
from relay.signature import sign
from tests.relay.test_serve import relay_env
from tests.servers.github_api import GitHubAPIServer
from tests.servers.hud import HudServer
from tests.testing.paths import REPO_ROOT
from tests.testing.processes import free_port
from tests.testing.relay import SECRET, RedisProcess
from tests.testing.waiting import wait_for

HEAD = "abc123" + "0" * 34
ALLOWLIST = """\
L1:
  - acme/l1-backend
L2:
  - org/repo
L3:
  device1:
    acme/l3-backend: [oncall]
L4:
  - acme/l4-backend
"""
TOKENS = "org/repo=tok-l2,acme/l1-backend=tok-l1,acme/l3-backend=tok-l3,acme/l4-backend=tok-l4"
BK_PIPELINE = "018b5ec5-c236-4037-ba08-d8a5d29bcdae/018cdabc-d930-49f6-9085-634c4cb582ed"
CI_PROVIDERS = f"""\
providers:
  buildkite:
    repo_map:
      {BK_PIPELINE}:
        repo: org/repo
        required_claims:
          build_branch: [main]
"""


@dataclass
class Served:
    url: str
    hud: HudServer
    github: GitHubAPIServer
    key: rsa.RSAPrivateKey
    state: CrcrState

    def webhook(self, event: str, payload: dict[str, Any], delivery: str) -> requests.Response:
        body = json.dumps(payload).encode()
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(SECRET, body),
        }
        return requests.post(f"{self.url}/github/webhook", data=body, headers=headers, timeout=10)

    def callback(self, body: Any, token: str) -> requests.Response:
        return requests.post(
            f"{self.url}/github/callback",
            json=body,
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
        )

    def dispatched(self, delivery: str, repo: str) -> None:
        """Wait for the background thread to send `delivery` to `repo`, then for its record
        (DISPATCHED), which lands just after the dispatch itself."""
        wait_for(
            lambda: any(
                d["repo"] == repo and d["client_payload"]["delivery_id"] == delivery
                for d in self.github.dispatches
            ),
            15,
            f"{delivery} to be dispatched to {repo}",
            every=0.05,
        )
        wait_for(
            lambda: self.state.dispatched(delivery, repo),
            15,
            f"the DISPATCHED record of {delivery} at {repo}",
            every=0.05,
        )


def pr_payload(action: str = "synchronize", labels: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "action": action,
        "number": 42,
        "pull_request": {
            "number": 42,
            "head": {"sha": HEAD},
            "labels": [{"name": n} for n in labels],
        },
        "repository": {"full_name": "pytorch/pytorch"},
    }


def body(
    delivery: str,
    status: str = "completed",
    run_id: Any = 99999,
    job_name: str = "build",
    labels: tuple[str, ...] = (),
    **workflow: Any,
) -> dict[str, Any]:
    """The reference tests' `_body()`, with what the callback action always adds."""
    wf = {
        "status": status,
        "conclusion": "success" if status == "completed" else None,
        "name": "CI",
        "url": "http://ci.example.com/run/1",
        "run_id": run_id,
        "run_attempt": 1,
        "job_name": job_name,
        **workflow,
    }
    return {
        "event_type": "pull_request",
        "delivery_id": delivery,
        "payload": pr_payload(labels=labels),
        "workflow": wf,
    }


@pytest.fixture()
def served(
    redis_proc: RedisProcess, github_api: GitHubAPIServer, tmp_path: Path
) -> Iterator[Served]:
    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text(ALLOWLIST)
    providers = tmp_path / "ci_providers.yml"
    providers.write_text(CI_PROVIDERS)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1"}]}))
    app_key = tmp_path / "app.pem"
    app_key.write_bytes(github_api.private_key_pem)
    config = tmp_path / "relay.yaml"
    config.write_text(
        f"callback_rate_per_minute: 8\noidc:\n  jwks_file: {tmp_path / 'jwks.json'}\n"
        f"ci_providers: {providers}\n"
    )
    with HudServer("hud-key", tls_dir=str(tmp_path)) as hud:
        assert hud.ca_file is not None
        env = relay_env(
            redis_proc.url,
            SPYRE_CI_ALLOWLIST=str(allowlist),
            SPYRE_CI_CALLBACK_TOKENS=TOKENS,
            SPYRE_CI_GITHUB_URL=github_api.url,
            SPYRE_CI_GITHUB_TOKEN=github_api.token,
            SPYRE_CI_GITHUB_APP_ID=github_api.app_id,
            SPYRE_CI_GITHUB_INSTALLATION_ID=str(github_api.installation_id),
            SPYRE_CI_GITHUB_PRIVATE_KEY=str(app_key),
            SPYRE_CI_HUD_URL=hud.url,
            SPYRE_CI_HUD_BOT_KEY="hud-key",
            REQUESTS_CA_BUNDLE=hud.ca_file,
        )
        port = free_port()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workflows",
                "serve",
                "--port",
                str(port),
                "--workers",
                "1",
                "--config",
                str(config),
                "--log-level",
                "warning",
            ],
            cwd=REPO_ROOT,
            env=env,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    requests.get(f"{url}/healthz", timeout=1)
                    break
                except requests.ConnectionError:
                    assert time.monotonic() < deadline, "spyre-ci serve did not come up"
                    time.sleep(0.1)
            state = CrcrState(redis.Redis.from_url(redis_proc.url))
            yield Served(url, hud, github_api, key, state)
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def test_callback_handler_cases(served: Served) -> None:
    # test_verified_repo_not_in_l2_returns_ignored: nothing written, HUD not called.
    for token in ("tok-l1",):
        answer = served.callback(body("del-123"), token)
        assert answer.status_code == 200 and answer.json()["message"] == "ignored"
    assert served.hud.received == []
    # A callback with no prior dispatch is rejected.
    assert served.callback(body("del-123"), "tok-l2").status_code == 400
    assert served.webhook("pull_request", pr_payload(), "del-123").status_code == 202
    served.dispatched("del-123", "org/repo")
    # test_missing_delivery_id_returns_400 / test_missing_workflow_status_returns_400
    no_delivery = body("del-123")
    del no_delivery["delivery_id"]
    assert served.callback(no_delivery, "tok-l2").status_code == 400
    no_status = body("del-123")
    del no_status["workflow"]["status"]
    answer = served.callback(no_status, "tok-l2")
    assert answer.status_code == 400 and "status" in answer.json()["message"]
    # test_queue_time_calculated_from_state_records: dispatch -> in_progress, no schema_version,
    # an integer run id (the reference's `_body()` sends 99999).
    started = served.callback(body("del-123", "in_progress"), "tok-l2")
    assert started.status_code == 200, started.text
    assert started.json()["queue_time"] >= 0 and started.json()["execution_time"] is None
    # test_body_is_passed_to_hud_unchanged: a completed body without `total`, the way the
    # action's TEST_RESULTS often is, is forwarded and HUD sums the counts.
    done = body("del-123", test_results={"passed": 7, "failed": 2, "skipped": 1})
    answer = served.callback(done, "tok-l2")
    assert answer.status_code == 200, answer.text
    assert answer.json()["hud"] == "forwarded" and answer.json()["execution_time"] >= 0
    (row,) = served.hud.rows
    assert row["total_tests"] == 10 and row["conclusion"] == "success"
    assert row["run_id"] == "99999" and row["downstream_repo"] == "org/repo"
    assert row["queue_time"] is not None and row["execution_time"] is not None
    # Duplicate completed callback: an invalid state transition, 400.
    assert served.callback(done, "tok-l2").status_code == 400


def test_hud_4xx_reaches_the_caller_and_the_state_waits(served: Served) -> None:
    served.webhook("pull_request", pr_payload(), "del-4xx")
    served.dispatched("del-4xx", "org/repo")
    refused = body("del-4xx", "in_progress")
    del refused["workflow"]["job_name"]  # HUD answers 400 without it
    answer = served.callback(refused, "tok-l2")
    assert answer.status_code == 400 and "job_name" in answer.json()["message"]
    # Nothing was recorded: the corrected callback is taken.
    assert served.callback(body("del-4xx", "in_progress"), "tok-l2").status_code == 200


def test_rate_limit_exceeded_returns_429(served: Served) -> None:
    codes = [
        served.callback(body("never", "in_progress", run_id=i), "tok-l2").status_code
        for i in range(9)
    ]
    assert codes == [400] * 8 + [429]


def test_nightly_and_buildkite_callbacks(served: Served) -> None:
    # The action's nightly self-report: no dispatch, one completed callback; a Buildkite build
    # UUID as run id, its OIDC token mapped through ci_providers.yml.
    nightly = {
        "event_type": "nightly",
        "delivery_id": HEAD,
        "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": HEAD},
        "workflow": {
            "schema_version": "1",
            "status": "completed",
            "conclusion": "success",
            "name": "ci",
            "url": "https://buildkite.com/vllm/ci/builds/7",
            "run_id": "0190a8e1-8d5c-4b6e-9b1e-2f1d3c4b5a69",
            "run_attempt": "1",
            "job_name": "torch-nightly",
            "started_at": None,
            "completed_at": "2026-11-29T10:30:00Z",
        },
    }
    claims = {
        "iss": "https://agent.buildkite.com",
        "aud": "pytorch-cross-repo-ci-relay",
        "exp": int(time.time()) + 300,
        "organization_id": BK_PIPELINE.split("/")[0],
        "pipeline_id": BK_PIPELINE.split("/")[1],
        "organization_slug": "vllm",
        "pipeline_slug": "ci",
        "build_branch": "main",
    }
    token = jwt.encode(claims, served.key, algorithm="RS256", headers={"kid": "k1"})
    answer = served.callback(nightly, token)
    assert answer.status_code == 200, answer.text
    (row,) = served.hud.rows
    assert row["event_type"] == "nightly" and row["downstream_repo"] == "org/repo"
    # Without check_run_id: the action's fallback {run_id}-{run_attempt} keys the row.
    assert row["check_run_id"] == "0190a8e1-8d5c-4b6e-9b1e-2f1d3c4b5a69-1"
    # A fork branch may not report as the repo (required_claims), nor may an unmapped pipeline.
    fork = jwt.encode(
        {**claims, "build_branch": "evil"}, served.key, algorithm="RS256", headers={"kid": "k1"}
    )
    assert served.callback(nightly, fork).status_code == 401
    other = jwt.encode(
        {**claims, "pipeline_id": "x"}, served.key, algorithm="RS256", headers={"kid": "k1"}
    )
    assert served.callback(nightly, other).status_code == 401
    # A nightly in_progress is refused, as the reference refuses it.
    nightly["workflow"]["status"] = "in_progress"
    answer = served.callback(nightly, "tok-l2")
    assert answer.status_code == 400 and "completed" in answer.json()["message"]


def test_check_runs_labels_and_rerequests(served: Served) -> None:
    served.webhook("pull_request", pr_payload(), "del-cr")
    served.dispatched("del-cr", "acme/l4-backend")
    served.dispatched("del-cr", "acme/l3-backend")
    # test_completed_callback_creates_check_run / scoped by job name / external_id is run id
    served.callback(body("del-cr", "in_progress", job_name="ec05-multi-job-a"), "tok-l4")
    served.callback(body("del-cr", job_name="ec05-multi-job-a"), "tok-l4")
    (l4,) = served.github.check_runs.values()
    assert l4["name"] == "crcr/acme/l4-backend/CI/ec05-multi-job-a"
    assert l4["conclusion"] == "success" and l4["external_id"].split(":")[0] == "99999"
    # test_l3_without_label_does_not_create_check_run
    served.callback(body("del-cr", "in_progress"), "tok-l3")
    assert len(served.github.check_runs) == 1
    # _handle_pr_labeled: the label creates the check run of the job that already reported.
    labeled = {
        **pr_payload("labeled", ("ciflow/crcr/device1",)),
        "label": {"name": "ciflow/crcr/device1"},
    }
    assert served.webhook("pull_request", labeled, "del-label").status_code == 202
    deadline = time.monotonic() + 15
    while len(served.github.check_runs) < 2:
        assert time.monotonic() < deadline, "the label created no check run"
        time.sleep(0.05)
    l3 = [r for r in served.github.check_runs.values() if "l3-backend" in r["name"]][0]
    assert l3["status"] == "in_progress" and l3["head_sha"] == HEAD
    # A label is not a dispatch.
    assert not [
        d for d in served.github.dispatches if d["client_payload"]["delivery_id"] == "del-label"
    ]
    # The job's completion completes that check run (the flag is set now).
    served.callback(body("del-cr", conclusion="failure"), "tok-l3")
    # If the label's background thread has created the check run but not yet recorded its id,
    # the callback answers "pending" and that thread completes the check run (crcr_state).
    deadline = time.monotonic() + 15
    while l3["status"] != "completed":
        assert time.monotonic() < deadline, [
            (r["id"], r["name"], r["status"], r.get("conclusion"))
            for r in served.github.check_runs.values()
        ]
        time.sleep(0.05)
    assert l3["conclusion"] == "failure"
    assert len(served.github.check_runs) == 2, "one check run per job, never a second"
    # check_run rerequested: re-run the failed jobs of the downstream run; other actions: none.
    check = {
        "action": "completed",
        "check_run": {"name": l4["name"], "external_id": l4["external_id"]},
        "repository": {"full_name": "pytorch/pytorch"},
    }
    served.webhook("check_run", check, "del-cr-done")
    served.webhook("check_run", {**check, "action": "rerequested"}, "del-cr-again")
    served.webhook(
        "check_suite",
        {
            "action": "rerequested",
            "check_suite": {"id": l4["check_suite"]["id"], "head_sha": HEAD},
            "repository": {"full_name": "pytorch/pytorch"},
        },
        "del-suite",
    )
    deadline = time.monotonic() + 15
    while len(served.github.reruns) < 3:
        assert time.monotonic() < deadline, served.github.reruns
        time.sleep(0.05)
    # A fixed wait on purpose: the check is that no fourth rerun comes, and one would have
    # been sent by now.
    time.sleep(0.3)
    assert sorted((r["repo"], r["failed_only"]) for r in served.github.reruns) == [
        ("acme/l3-backend", False),
        ("acme/l4-backend", False),
        ("acme/l4-backend", True),
    ]
    assert all(r["run_id"] == "99999" for r in served.github.reruns)
    assert not [d for d in served.github.dispatches if d["event_type"].startswith("check_")]
