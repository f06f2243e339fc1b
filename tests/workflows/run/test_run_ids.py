"""A run id names folders and Redis keys: whatever a payload says, it stays in a safe
alphabet, and a run's folder stays under its root."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.event import TriggerEvent
from workflows.drivers.intake_bridge import request_for_event
from workflows.run import run_folder, run_model
from workflows.settings import Settings


@pytest.mark.parametrize(
    "sha",
    [
        "/../../.",
        "../../etc/passwd" + "0" * 30,
        "a" * 7 + "/",
        "",
        "ABCDEF12" + "0" * 32,
        "\x00" * 40,
    ],
)
def test_a_payloads_sha_never_reaches_a_folder_name(sha: str, tmp_path: Path) -> None:
    event = TriggerEvent(kind="push", delivery_id="d-1", repo="pytorch/pytorch", head_sha=sha)
    request = request_for_event(
        event, tmp_path / "runs", tmp_path / "inv.json.gz", settings=Settings(tmp_path, None)
    )
    out = Path(request.out_dir)
    assert out.parent == (tmp_path / "runs").resolve()
    assert request.run_id.startswith("push-nosha-")


def test_a_kind_that_is_not_a_word_is_not_kept() -> None:
    event = TriggerEvent(kind="../x", delivery_id="d", repo="r", head_sha="ab" * 20)
    assert run_folder.run_id_for(event).startswith("event-abababab-")


@pytest.mark.parametrize("run_id", ["..", "../up", "a/b", "", "-x", "a" * 300])
def test_run_dir_refuses_ids_that_leave_the_root(run_id: str, tmp_path: Path) -> None:
    with pytest.raises(run_model.PipelineError, match="does not name a folder under"):
        run_folder.run_dir(tmp_path, run_id)
