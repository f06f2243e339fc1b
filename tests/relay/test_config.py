"""Relay config and CRCR allowlist parsing: values, overrides and errors that name the field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from relay.allowlist import AllowlistFile, load_allowlist, parse_allowlist
from relay.config import load_config
from relay.crcr_state import Rejected, plan
from relay.events import RelayError


def test_defaults_then_file_then_environment(tmp_path: Path) -> None:
    assert load_config(None, env={}).upstream_repo == "pytorch/pytorch"
    path = tmp_path / "relay.yaml"
    path.write_text(
        "webhook_secret: from-file\nbranches: [main, viable/strict]\n"
        "callback_tokens: {torch-spyre/torch-spyre: tok}\n"
        "github: {base_url: 'https://ghe.example', app_id: 123, installation_id: '9'}\n"
    )
    config = load_config(
        path, env={"SPYRE_CI_WEBHOOK_SECRET": "from-env", "SPYRE_CI_REDIS_URL": "redis://r:1/2"}
    )
    assert config.webhook_secret == "from-env" and config.redis_url == "redis://r:1/2"
    assert config.branches == ("main", "viable/strict")
    assert config.rules.branches == ("main", "viable/strict")
    assert config.callback_tokens == {"tok": "torch-spyre/torch-spyre"}
    assert config.github.app_id == "123" and config.github.installation_id == 9
    env = load_config(
        None,
        env={"SPYRE_CI_BRANCHES": "main,release/2.14", "SPYRE_CI_CALLBACK_TOKENS": "a/b=t1,c/d=t2"},
    )
    assert env.branches == ("main", "release/2.14")
    assert env.callback_tokens == {"t1": "a/b", "t2": "c/d"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("branches: []\n", "field 'branches' must be a non-empty list"),
        ("upstream_repo: pytorch\n", "field 'upstream_repo' must be owner/repo"),
        ("max_body_bytes: -1\n", "field 'max_body_bytes' must be a positive integer"),
        ("webhok_secret: x\n", "unknown field(s) webhok_secret"),
        ("github: {token: t, org: x}\n", "field 'github' accepts only"),
        ("oidc: {audience: x}\n", "field 'oidc' needs jwks_url or jwks_file"),
        ("- a\n", "a relay config is a mapping"),
    ],
)
def test_config_errors_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "relay.yaml"
    path.write_text(text)
    with pytest.raises(RelayError) as info:
        load_config(path, env={})
    assert str(path) in str(info.value) and message in str(info.value)


def test_environment_errors_name_the_variable() -> None:
    with pytest.raises(RelayError, match="environment variable SPYRE_CI_CALLBACK_TOKENS"):
        load_config(None, env={"SPYRE_CI_CALLBACK_TOKENS": "no-equals-sign"})


def test_allowlist_upstream_format(tmp_path: Path) -> None:
    path = tmp_path / "allowlist.yml"
    path.write_text(
        "L1:\n  - a/one\nL2:\n  - torch-spyre/torch-spyre: x, y\n"
        "L3:\n  spyre:\n    b/three: [z]\nL4:\n  - c/four\n"
    )
    allowlist = load_allowlist(path)
    assert len(allowlist) == 4
    spyre = allowlist.get("torch-spyre/torch-spyre")
    assert spyre is not None and spyre.level == "L2" and spyre.oncalls == ("x", "y")
    assert spyre.hud and not spyre.wants_check_run(("ciflow/crcr/spyre",))
    three = allowlist.get("b/three")
    assert three is not None and three.device == "spyre"
    assert three.wants_check_run(("ciflow/crcr/spyre",)) and not three.wants_check_run(())
    four = allowlist.get("c/four")
    assert four is not None and four.wants_check_run(())
    one = allowlist.get("a/one")
    assert one is not None and not one.hud


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"L5": []}, "unknown level(s) L5"),
        ({"L1": ["a/b"], "L2": ["a/b"]}, "a/b is listed in L1 and L2"),
        ({"L1": ["not-a-repo"]}, "'not-a-repo' is not owner/repo"),
        ({"L3": {"spyre": ["a/b"]}}, "device 'spyre' must map owner/repo"),
        ({"L2": "a/b"}, "L2 must be a list"),
    ],
)
def test_allowlist_errors(data: object, message: str) -> None:
    with pytest.raises(RelayError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_allowlist(data, "allowlist.yml")


def test_state_transitions_are_pure() -> None:
    started = plan("in_progress", None, 100.0, 130.0, "k")
    assert started.state == "IN_PROGRESS" and started.queue_time == 30.0
    job = {"state": "IN_PROGRESS", "in_progress_at": "130.0", "queue_time": "30.0"}
    done = plan("completed", job, 100.0, 190.0, "k")
    assert done.state == "COMPLETED" and done.execution_time == 60.0 and done.queue_time == 30.0
    for status, current, dispatched, why in [
        ("in_progress", None, None, "no prior dispatch"),
        ("in_progress", job, 100.0, "duplicate in_progress"),
        ("completed", None, 100.0, "skips in_progress"),
        ("completed", {"state": "COMPLETED"}, 100.0, "duplicate completed"),
        ("completed", {"state": "TIMED_OUT"}, 100.0, "job is TIMED_OUT"),
        ("queued", None, 100.0, "must be in_progress or completed"),
    ]:
        with pytest.raises(Rejected, match=why):
            plan(status, current, dispatched, 200.0, "k")


def test_allowlist_file_reloads_edits_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    path = tmp_path / "allowlist.yml"
    path.write_text("L1:\n  - a/one\n")
    allowlist = AllowlistFile(path, check_every=0)
    assert allowlist.get("a/one") is not None and allowlist.get("b/two") is None
    path.write_text("L1:\n  - a/one\nL4:\n  - b/two\n")
    os.utime(path, ns=(1, 10**18))  # a distinct mtime even on coarse clocks
    four = allowlist.get("b/two")
    assert four is not None and four.level == "L4" and len(allowlist) == 2
    path.write_text("L1:\n  - a/one\nL2:\n  - a/one\n")  # invalid: listed twice
    os.utime(path, ns=(1, 2 * 10**18))
    assert len(allowlist) == 2 and allowlist.get("b/two") is not None
