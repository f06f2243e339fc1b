"""`pipeline.warm_up`: which zygotes a run starts warming before its Inventory and plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contracts.event import TriggerEvent
from tests.testing.paths import REPO_ROOT
from workflows.run import pipeline
from workflows.run.run_model import RunRequest
from workflows.settings import Settings

GLU = (REPO_ROOT / "examples" / "changes" / "glu_batch_check.patch").read_text()


def _request(diff: str | None, apply: bool = True) -> RunRequest:
    event = TriggerEvent("push", "d1", "pytorch/pytorch", "")
    return RunRequest("r1", event, "out", "", diff_text=diff, apply_change=apply)


def _started(
    monkeypatch: pytest.MonkeyPatch, request: RunRequest, settings: Settings
) -> list[dict[str, str]]:
    started: list[dict[str, str]] = []

    def prestart(plugin: str, specs: Any, env: Any = None) -> None:
        started.append(dict(env or {}))

    monkeypatch.setattr(pipeline.zygote, "prestart", prestart)
    pipeline.warm_up(request, settings)
    return started


def test_a_run_that_applies_a_change_warms_the_changed_and_the_base_torch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Both at once, before the plan: a failure's A/B then finds the base's zygote warm."""
    settings = Settings(state_dir=tmp_path, redis_url=None)
    request = _request(GLU)
    changed = pipeline.change_env(request, settings)
    assert changed  # the glu edit applies to the installed torch
    assert _started(monkeypatch, request, settings) == [changed, {}]


@pytest.mark.parametrize("diff, apply", [(None, True), (GLU, False)], ids=["none", "no-apply"])
def test_a_run_that_applies_nothing_warms_one_zygote(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, diff: str | None, apply: bool
) -> None:
    settings = Settings(state_dir=tmp_path, redis_url=None)
    assert _started(monkeypatch, _request(diff, apply), settings) == [{}]


def test_no_zygote_is_started_when_the_warm_runner_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = Settings(state_dir=tmp_path, redis_url=None, zygote=False)
    assert _started(monkeypatch, _request(GLU), settings) == []
