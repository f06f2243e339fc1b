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

    def prestart(
        plugin: str,
        specs: Any,
        env: Any = None,
        python: str | None = None,
        memory_mb: int | None = None,
    ) -> None:
        assert memory_mb == request.memory_mb  # no zygote where no warm process fits
        started.append({**(env or {}), **({"python": python} if python else {})})

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


def test_a_run_on_a_build_warms_the_build_s_interpreter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An event whose head has a prepared build runs there, change and all: its one zygote
    is the build's interpreter's, not this one's."""
    from tests.workflows.runner.test_torch_builds import BUILD_SHA, fake_build

    build = fake_build(tmp_path / "builds" / "nightly", BUILD_SHA)
    settings = Settings(
        state_dir=tmp_path / "state", redis_url=None, torch_builds=tmp_path / "builds"
    )
    event = TriggerEvent("push", "d1", "pytorch/pytorch", BUILD_SHA)
    request = RunRequest("r1", event, "out", "", diff_text=GLU)
    assert _started(monkeypatch, request, settings) == [{"python": str(build / "bin" / "python")}]


def test_the_same_warm_up_again_at_once_is_not_done_twice_but_later_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`spyre-ci run` warms up before its Inventory, its driver again before the plan: the
    second is a no-op (its keys cost the specs' digests and a look at every file the zygote
    loaded). Another request warms at once; the same one later again (a worker's next run of
    that change, after its zygote may have ended idle)."""
    settings = Settings(state_dir=tmp_path, redis_url=None)
    request = _request(GLU)
    clock = [1000.0]
    monkeypatch.setattr(pipeline.time, "monotonic", lambda: clock[0])
    first = _started(monkeypatch, request, settings)
    assert len(first) == 2
    assert _started(monkeypatch, request, settings) == []  # the driver's, at once
    assert _started(monkeypatch, _request(None), settings) == [{}]  # another request
    assert len(_started(monkeypatch, request, settings)) == 2  # it was not the last one
    clock[0] += pipeline.WARM_UP_AGAIN_S + 1
    assert len(_started(monkeypatch, request, settings)) == 2  # later: again
    other = Settings(state_dir=tmp_path / "other", redis_url=None)
    assert len(_started(monkeypatch, request, other)) == 2  # another state directory
