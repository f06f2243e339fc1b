"""`spyre-ci serve` (gunicorn, several worker processes) as a subprocess; its refusals and
`spyre-ci trigger`, which end before anything is served, in-process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from contracts.event import ChangedFile, TriggerEvent
from relay.intake import RedisIntake
from relay.signature import sign
from tests.servers.github_api import GitHubAPIServer
from tests.testing.cli import cli
from tests.testing.paths import REPO_ROOT
from tests.testing.processes import free_port
from tests.testing.relay import SECRET, RedisProcess

SHA_A, SHA_B = "a" * 40, "b" * 40


def relay_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPYRE_CI_")}
    env.update(SPYRE_CI_WEBHOOK_SECRET=SECRET, SPYRE_CI_REDIS_URL=redis_url, **extra)
    return env


@contextlib.contextmanager
def serving(env: dict[str, str], *args: str) -> Iterator[str]:
    """`spyre-ci serve *args` on a free port, its URL once /healthz answers 200."""
    port = free_port()
    # The server's output goes to a file, not a pipe: nobody reads it until the end.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workflows", "serve", "--port", str(port), *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        else:
            proc.kill()
            proc.wait()
            log.seek(0)
            pytest.fail(f"spyre-ci serve did not come up: {log.read()!r}")
        try:
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=20)


@pytest.fixture()
def served(redis_proc: RedisProcess, tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "relay.yaml"
    config.write_text("upstream_repo: pytorch/pytorch\nbranches: [main, release/2.13]\n")
    args = ("--workers", "2", "--config", str(config), "--log-level", "warning")
    with serving(relay_env(redis_proc.url), *args) as url:
        yield url


def test_serve_counts_deliveries_across_worker_processes(served: str) -> None:
    session = requests.Session()
    for i in range(30):
        payload = {
            "ref": "refs/heads/release/2.13",
            "before": SHA_A,
            "after": SHA_B,
            "repository": {"full_name": "pytorch/pytorch"},
            "commits": [{"message": "m", "modified": ["a.py"]}],
        }
        body = json.dumps(payload).encode()
        # A fresh connection each time, so both worker processes answer.
        answer = requests.post(
            f"{served}/github/webhook",
            data=body,
            timeout=10,
            headers={
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": f"serve-{i % 20}",
                "X-Hub-Signature-256": sign(SECRET, body),
                "Connection": "close",
            },
        )
        assert answer.status_code == 202, answer.text
    # Each process adds its counts to Redis within its flush interval (0.1 s).
    expected = [
        'spyre_ci_deliveries_total{event="push",outcome="accepted"} 20',
        'spyre_ci_deliveries_total{event="push",outcome="duplicate"} 10',
        'spyre_ci_queue_depth{queue="intake"} 20',
    ]
    deadline = time.monotonic() + 5
    while True:
        text = session.get(f"{served}/metrics", timeout=10).text
        if all(line in text for line in expected) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for line in expected:
        assert line in text
    assert re.search(r'spyre_ci_delivery_seconds_bucket\{le="\+Inf"\} 30', text)


def test_serve_without_a_secret_says_what_to_set(redis_proc: RedisProcess) -> None:
    env = relay_env(redis_proc.url)
    del env["SPYRE_CI_WEBHOOK_SECRET"]
    result = cli("serve", env=env)
    assert result.returncode == 2 and "SPYRE_CI_WEBHOOK_SECRET" in result.stderr


def test_serve_config_errors_name_the_field(redis_proc: RedisProcess, tmp_path: Path) -> None:
    config = tmp_path / "relay.yaml"
    config.write_text("branches: 3\n")
    result = cli("serve", "--config", str(config), env=relay_env(redis_proc.url))
    assert result.returncode == 2
    assert f"{config}: field 'branches' must be a non-empty list" in result.stderr


def test_serve_refuses_an_allowlist_listing_a_repo_twice(
    redis_proc: RedisProcess, tmp_path: Path
) -> None:
    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text("L1:\n  - acme/backend\nL4:\n  - acme/backend\n")
    env = relay_env(redis_proc.url, SPYRE_CI_ALLOWLIST=str(allowlist))
    result = cli("serve", env=env)
    assert result.returncode == 2
    assert f"{allowlist}: acme/backend is listed in L1 and L4" in result.stderr


def test_trigger_nightly_enqueues_once(redis_proc: RedisProcess) -> None:
    env = relay_env(redis_proc.url)
    first = cli("trigger", "nightly", "--sha", SHA_B, env=env)
    assert first.returncode == 0 and "enqueued nightly" in first.stdout
    second = cli("trigger", "nightly", "--sha", SHA_B, env=env)
    assert second.returncode == 0 and "already enqueued" in second.stdout
    claimed = RedisIntake.from_url(redis_proc.url).claim("w")
    assert claimed is not None
    assert claimed.event.kind == "nightly" and claimed.event.head_sha == SHA_B
    assert claimed.event.delivery_id == SHA_B  # the CRCR contract: nightly delivery = sha
    bad = cli("trigger", "nightly", "--sha", "abc", env=env)
    assert bad.returncode == 2 and "40-hex-digit" in bad.stderr


def test_trigger_with_redis_down_is_an_infrastructure_error(redis_proc: RedisProcess) -> None:
    redis_proc.stop()
    result = cli("trigger", "periodic", "--sha", SHA_A, env=relay_env(redis_proc.url))
    # A service down is exit code 3, not bad input (2); the message names what failed.
    assert result.returncode == 3, result.stderr
    assert "infrastructure error" in result.stderr and "not enqueued" in result.stderr


def test_complete_files_asks_compare_when_the_payload_is_partial(
    github_api: GitHubAPIServer,
) -> None:
    from relay.changes import complete_files
    from relay.github import GitHubAdapter

    github_api.add_comparison(
        "pytorch/pytorch", SHA_A, SHA_B, files=[f"f{i}.py" for i in range(300)], commits=["a", "b"]
    )
    adapter = GitHubAdapter(base_url=github_api.url, token=github_api.token)
    partial = TriggerEvent(
        kind="pull_request",
        delivery_id="d",
        repo="pytorch/pytorch",
        head_sha=SHA_B,
        base_sha=SHA_A,
        files_complete=False,
    )
    done = complete_files(partial, adapter)
    assert len(done.files) == 300 and done.truncated and not done.files_complete
    assert done.commit_messages == ("a", "b")
    complete = TriggerEvent(
        kind="push",
        delivery_id="d",
        repo="pytorch/pytorch",
        head_sha=SHA_B,
        base_sha=SHA_A,
        files=(ChangedFile("x.py", "modified"),),
    )
    # A complete push keeps its own files and still asks compare, for the patches
    # (tests/relay/test_changes.py).
    pushed = complete_files(complete, adapter)
    assert pushed.files == complete.files and pushed.files_complete and not pushed.truncated
    assert pushed.diff_text is not None and pushed.diff_text.count("diff --git") == 300
    assert len(github_api.find("GET", "/compare/")) == 2


def test_serve_answers_503_while_redis_is_down_and_recovers(
    served: str, redis_proc: RedisProcess
) -> None:
    payload = {
        "ref": "refs/heads/main",
        "before": SHA_A,
        "after": SHA_B,
        "repository": {"full_name": "pytorch/pytorch"},
        "commits": [],
    }
    body = json.dumps(payload).encode()
    headers = {
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "outage-1",
        "X-Hub-Signature-256": sign(SECRET, body),
    }
    redis_proc.stop()
    assert (
        requests.post(
            f"{served}/github/webhook", data=body, headers=headers, timeout=10
        ).status_code
        == 503
    )
    assert requests.get(f"{served}/healthz", timeout=10).status_code == 503
    redis_proc.start()
    answer = requests.post(f"{served}/github/webhook", data=body, headers=headers, timeout=10)
    assert answer.status_code == 202 and answer.json()["message"] == "enqueued"


def test_serve_fans_out_and_takes_callbacks(
    redis_proc: RedisProcess, github_api: GitHubAPIServer, tmp_path: Path
) -> None:
    allowlist = tmp_path / "allowlist.yml"
    allowlist.write_text("L4:\n  - acme/l4-backend\n")
    key = tmp_path / "app.pem"
    key.write_bytes(github_api.private_key_pem)
    port = free_port()
    env = relay_env(
        redis_proc.url,
        SPYRE_CI_ALLOWLIST=str(allowlist),
        SPYRE_CI_CALLBACK_TOKENS="acme/l4-backend=tok-l4",
        SPYRE_CI_GITHUB_URL=github_api.url,
        SPYRE_CI_GITHUB_TOKEN=github_api.token,
        SPYRE_CI_GITHUB_APP_ID=github_api.app_id,
        SPYRE_CI_GITHUB_INSTALLATION_ID=str(github_api.installation_id),
        SPYRE_CI_GITHUB_PRIVATE_KEY=str(key),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workflows",
            "serve",
            "--port",
            str(port),
            "--workers",
            "2",
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
        payload = {
            "ref": "refs/tags/ciflow/trunk/31",  # a PR's trunk run: check runs
            "before": SHA_A,
            "after": SHA_B,
            "repository": {"full_name": "pytorch/pytorch"},
            "commits": [],
        }
        body = json.dumps(payload).encode()
        requests.post(
            f"{url}/github/webhook",
            data=body,
            timeout=10,
            headers={
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": "e2e-1",
                "X-Hub-Signature-256": sign(SECRET, body),
            },
        ).raise_for_status()
        deadline = time.monotonic() + 15
        while not github_api.dispatches:  # sent by a worker's background thread
            assert time.monotonic() < deadline, "no repository_dispatch was sent"
            time.sleep(0.05)
        (dispatch,) = github_api.dispatches
        assert dispatch["repo"] == "acme/l4-backend"
        callback = {
            **dispatch["client_payload"],
            "workflow": {
                "schema_version": "1",
                "status": "in_progress",
                "name": "ci",
                "run_id": "5",
                "run_attempt": 1,
                "job_name": "test",
                "conclusion": None,
            },
        }
        auth = {"Authorization": "Bearer tok-l4"}
        started = None
        deadline = time.monotonic() + 5
        while started is None or started.status_code == 400:
            # The DISPATCHED record lands just after the dispatch itself.
            started = requests.post(
                f"{url}/github/callback", json=callback, headers=auth, timeout=10
            )
            assert time.monotonic() < deadline, started.text
        assert started.status_code == 200, started.text
        callback["workflow"].update(status="completed", conclusion="success")
        done = requests.post(f"{url}/github/callback", json=callback, headers=auth, timeout=10)
        assert done.status_code == 200 and done.json()["execution_time"] >= 0
        (run,) = github_api.check_runs.values()
        assert run["name"] == "crcr/acme/l4-backend/ci/test" and run["conclusion"] == "success"
        assert run["head_sha"] == SHA_B and run["external_id"] == "5:31"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_two_relays_on_one_host_do_not_share_a_control_socket(
    redis_proc: RedisProcess, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**relay_env(redis_proc.url), "HOME": str(home)}
    env.pop("XDG_RUNTIME_DIR", None)
    procs, urls = [], []
    try:
        for _ in range(2):
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "workflows",
                        "serve",
                        "--port",
                        str(port),
                        "--workers",
                        "1",
                        "--log-level",
                        "warning",
                    ],
                    cwd=REPO_ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                assert time.monotonic() < deadline, f"{url} did not come up"
                time.sleep(0.1)
        procs[1].terminate()
        procs[1].wait(timeout=20)
        assert requests.get(f"{urls[0]}/healthz", timeout=5).status_code == 200
        assert not (home / ".gunicorn").exists()  # no per-user socket to take over
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)
