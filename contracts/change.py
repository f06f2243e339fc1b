"""The change under test as the run's records carry it: how much of it was applied.

`workflows.runner.change_overlay` applies a change's Python files to the torch under test;
`workflows.run.under_test` judges what that tested (`contracts.tested.Tested`) from its state.
"""

from __future__ import annotations

from enum import StrEnum


class ChangeState(StrEnum):
    """How much of a change was applied: the `state` planned.json and run.json hold."""

    APPLIED = "applied"  # every file of it that changes torch
    PARTIAL = "partial"  # some of those files, not all
    NOT_APPLIED = "not_applied"  # none of them could be
    NONE = "none"  # nothing in the change touches the torch under test
