"""`spyre-ci worker`: the start-up check of the intake's GitHub settings, and `worker status`
when Redis or the intake is down (the password never printed)."""

from __future__ import annotations

import os
import subprocess

from tests.testing.cli import spyre_ci


def worker(*args: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPYRE_CI_GITHUB_")}
    return spyre_ci("worker", *args, env={**env, "SPYRE_CI_REDIS_URL": redis_url}, timeout=120)


def test_intake_without_github_settings_is_refused_at_start() -> None:
    ran = worker("--intake", redis_url="redis://127.0.0.1:1/0")
    assert ran.returncode == 2, ran.stderr
    for name in ("SPYRE_CI_GITHUB_TOKEN", "SPYRE_CI_GITHUB_APP_ID", "--no-github"):
        assert name in ran.stderr


def test_status_with_redis_down_exits_3_and_masks_the_password() -> None:
    ran = worker("status", redis_url="redis://:s3cret@127.0.0.1:1/0")
    assert ran.returncode == 3
    assert "DOWN" in ran.stdout and "s3cret" not in ran.stdout + ran.stderr
    assert "redis://:***@127.0.0.1:1/0" in ran.stdout


def test_status_without_intake_or_workers_exits_3(redis_server: str) -> None:
    ran = worker("status", redis_url=redis_server)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    assert "intake  DOWN" in ran.stdout and "workers 0 alive" in ran.stdout
    assert "unhealthy: no intake loop; no worker" in ran.stdout
