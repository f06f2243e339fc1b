"""The upgrade run's exports: a RunRecord with `upgrade` (the per-variant diff rows) written
by `dashboard_export` like the main job's, with the environment of the new version, and the
command's exit code from that record's conclusion.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from contracts.exit_codes import ExitCode
from dashboard_export.model import Environment, RunRecord
from suites.model import Inventory
from workflows.drivers.upgrade.diff_run import VersionRun
from workflows.drivers.upgrade.environments import TorchEnv
from workflows.run.exporting import counted, environment
from workflows.run.layout import junit_dir

if TYPE_CHECKING:
    from selector.plan import Reason
    from selector.upgrade import InventoryDiff, Moved, UpgradeSelection


def environment_of(env: TorchEnv, inventory: Inventory) -> Environment:
    """The dashboard Environment of a run on `env` (the main job's, with that torch)."""
    return environment(
        inventory.torch_version, inventory.torch_git_version, {"environment": str(env.path)}
    )


def upgrade_record(
    diff: InventoryDiff,
    selection: UpgradeSelection,
    moved: Sequence[Moved],
    old_inventory: Inventory,
    new_inventory: Inventory,
    new_env: TorchEnv,
    new_run: VersionRun,
    started_at: str,
    completed_at: str,
) -> RunRecord:
    """The RunRecord of the run on the new version: a failure on it is `new` unless it
    failed on the old version too (`unchanged-failing`)."""
    from contracts.classification import Classification
    from contracts.event import TriggerEvent
    from dashboard_export.model import (
        DiffCategory,
        DiffRow,
        PlanSummary,
        UpgradeDiff,
        VariantResult,
    )

    category = {m.id: m.category for m in moved}
    holdout = set(selection.holdout)
    results = []
    for vid, outcome in sorted(new_run.outcomes.items()):
        cls: Classification | None = None
        if outcome.status.is_failure:
            cls = (
                Classification.PRE_EXISTING
                if category.get(vid) == "unchanged-failing"
                else Classification.NEW
            )
        results.append(
            VariantResult.of(outcome, cls, vid in holdout and vid not in selection.reasons)
        )
    rows = tuple(
        DiffRow(m.id, DiffCategory(m.category), m.before, m.after, m.message)
        for m in moved
        if m.category is not None
    )
    changed = {c.id: c.what for c in diff.changed}

    def first(vid: str, reason: Reason) -> str:
        """A changed definition by what changed, not by its hashes."""
        if reason.heuristic == "definition" and vid in changed:
            return f"definition: changed {'; '.join(changed[vid])}"
        return f"{reason.heuristic}: {reason.reason}"

    misses = tuple(
        sorted(
            m.id
            for m in moved
            if m.id in holdout
            and m.id not in selection.reasons
            and m.category in ("regressed", "new-failing")
        )
    )
    summary = PlanSummary(
        selected=len(selection.reasons),
        inventory=len(new_inventory),
        top_reasons=counted(first(vid, rs[0]) for vid, rs in selection.reasons.items() if rs),
        skipped=dict(selection.skipped),
        holdout=len(selection.holdout),
        holdout_misses=misses,
        canaries=len(selection.canary),
        metrics={
            "selection_ratio": selection.share,
            "affected": float(diff.affected),
            "changed": float(len(diff.changed)),
            "added": float(len(diff.added)),
            "removed": float(len(diff.removed)),
            "api_changes": float(len(diff.api)),
        },
    )
    stamp = completed_at.replace("-", "").replace(":", "")
    run_id = f"upgrade-{diff.from_version}-{diff.to_version}-{stamp}"
    event = TriggerEvent(
        kind="periodic",
        delivery_id=run_id,
        repo="pytorch/pytorch",
        head_sha=new_inventory.torch_git_version,
        base_sha=old_inventory.torch_git_version,
        ref=f"v{diff.to_version}",
        source="cli",
        upstream_event="upgrade",
        commit_messages=(f"upgrade torch {diff.from_version} to {diff.to_version}",),
    )
    return RunRecord(
        run_id=run_id,
        attempt=1,
        downstream_repo="torch-spyre/torch-spyre",
        workflow="spyre-ci",
        job="upgrade-diff",
        event=event,
        environment=environment_of(new_env, new_inventory),
        results=tuple(results),
        started_at=started_at,
        completed_at=completed_at,
        plan=summary,
        upgrade=UpgradeDiff(diff.from_version, diff.to_version, rows),
    )


def write_report(out_dir: Path, record: RunRecord, new_run: VersionRun) -> dict[str, Path]:
    """Write `record` (`upgrade_record`) as every run is written, with the new version's
    JUnit files; the paths written, by kind."""
    from dashboard_export.layout import write_run

    junit = junit_dir(out_dir)
    junit.mkdir(parents=True, exist_ok=True)
    for path in new_run.junit:
        shutil.copyfile(path, junit / path.name)
    return write_run(record, out_dir, junit)


def exit_code(record: RunRecord) -> ExitCode:
    """The upgrade run's exit code, from the conclusion its report and callback carry
    (`RunRecord.effective_conclusion`): 1 when that is `failure` (a variant failing new on the
    new version: regressed, or new and failing), 3 when its tests could not run, else 0."""
    if record.infrastructure:
        return ExitCode.INFRASTRUCTURE
    return ExitCode.NEW_FAILURES if record.effective_conclusion == "failure" else ExitCode.OK
