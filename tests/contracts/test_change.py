"""The change under test as planned.json and run.json carry it: one record, the same text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.change import ChangeNote, ChangeState, FileNote

RECORDS = Path(__file__).parents[1] / "workflows" / "data" / "records"


def _recorded() -> dict[str, object]:
    change: dict[str, object] = json.loads((RECORDS / "planned.json").read_text())["environment"][
        "change"
    ]
    return change


def test_a_recorded_change_reads_typed_and_writes_the_same_text() -> None:
    data = _recorded()
    change = ChangeNote.from_json(data)
    assert change.state == ChangeState.NOT_APPLIED and change.applied == ()
    assert [f.path for f in change.files] == [
        "aten/src/ATen/native/SoftMax.cpp",
        "aten/src/ATen/native/cpu/SoftMaxKernel.cpp",
        "test/test_nn.py",
    ]
    assert json.dumps(change.to_json()) == json.dumps(data)


@pytest.mark.parametrize(
    "data",
    [
        {},  # an environment without its change
        {"state": "applied", "applied": [{"path": "torch/a.py", "status": "added", "why": "ok"}]},
        {"id": "x", "state": "partial", "from_a_newer_version": {"k": [1]}},
    ],
)
def test_a_change_missing_keys_or_with_unknown_ones_writes_back_unchanged(
    data: dict[str, object],
) -> None:
    assert json.dumps(ChangeNote.from_json(data).to_json()) == json.dumps(data)


def test_a_file_writes_only_what_it_has() -> None:
    moved = FileNote("torch/b.py", "renamed", "applied", "torch.b", "torch/a.py", "")
    assert moved.to_json() == {
        "path": "torch/b.py",
        "status": "renamed",
        "why": "applied",
        "module": "torch.b",
        "previous_path": "torch/a.py",
    }
    assert FileNote.from_json(moved.to_json()) == moved
