"""A change applied in part on a build: what runs now is what its applied files need; the
files that wait for a build (C++) keep their selection in the pending record, for the first
build that holds them (`pipeline.plan`, `under_test.deferred`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contracts.event import TriggerEvent
from tests.testing.paths import REPO_ROOT
from tests.workflows.run_context import run_context
from workflows.run import pipeline, planning, under_test
from workflows.run.run_model import RunRequest
from workflows.stores import pending
from workflows.stores.history import SQLiteHistory

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "inventory-2.13.0.json.gz"
GLU = (REPO_ROOT / "examples" / "changes" / "glu_batch_check.patch").read_text()
KERNEL = "".join(  # the softmax push's two kernel files, no test file
    part
    for part in re.split(
        r"(?=^diff --git )",
        (REPO_ROOT / "examples" / "events" / "push_softmax_kernel.patch").read_text(),
        flags=re.M,
    )
    if part.startswith("diff --git a/aten/")
)


def _request(diff: str, out: Path) -> RunRequest:
    event = TriggerEvent("push", "d-mixed", "pytorch/pytorch", "c" * 40, base_sha="b" * 40)
    return RunRequest("push-mixed", event, str(out), str(FIXTURE), diff_text=diff)


def test_a_change_applied_in_part_on_a_build_runs_what_its_applied_files_need(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # On a build of the source the kernel files would wait for a later build (no build here:
    # the decision is the one `under_test.deferred` makes there).
    monkeypatch.setattr(under_test, "deferred", lambda *args: True)
    history = SQLiteHistory(tmp_path / "state" / "history.sqlite3")
    ctx = run_context(history)
    mixed = _request(GLU + KERNEL, tmp_path / "out")
    change = under_test.applied_change(mixed, ctx.settings)
    assert change.state == "partial"
    assert {f.path for f in under_test.needs_build(change)} == {
        "aten/src/ATen/native/SoftMax.cpp",
        "aten/src/ATen/native/cpu/SoftMaxKernel.cpp",
    }
    planned = pipeline.plan(mixed, ctx)

    inventory = pipeline.load_inventory(FIXTURE)
    snapshot = history.snapshot(())
    whole = planning.make_plan(mixed, inventory, snapshot)
    alone = planning.make_plan(_request(GLU, tmp_path / "alone"), inventory, snapshot)
    kernel_only = set(whole.selected_ids) - set(alone.selected_ids)
    assert any("softmax" in v for v in kernel_only)  # what the kernel files select
    ran = {v for shard in planned.shards for v in shard}
    assert ran == {v for shard in alone.shards for v in shard}  # the glu edit's own
    selected = set(planned.plan.selected_ids)  # the holdout is a sample of everything
    assert any("glu" in v for v in selected) and not selected & kernel_only

    (waiting,) = pending.open_entries(ctx.settings.state_dir)
    assert set(waiting.files) == {f.path for f in under_test.needs_build(change)}
    assert set(waiting.selected) == set(whole.selected_ids)  # judged there, whole
