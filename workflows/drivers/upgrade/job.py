"""The upgrade run as one job: provision both torches, build both Inventories, diff and
select, and (when asked) run the selection on both and write the report and the patch.

`spyre-ci upgrade-diff --from A --to B [--run] [--validate]` parses into `UpgradeOptions` and
calls `run_upgrade`; `spyre-ci bump` calls it too, then records what the new torch needs.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.drivers.upgrade.diff_run import (
    expand_misses,
    moved_rows,
    run_section,
    run_version,
    upgrade_json,
    validate_full,
)
from workflows.drivers.upgrade.environments import TorchEnv, provision
from workflows.drivers.upgrade.export import exit_code, upgrade_record, write_report
from workflows.drivers.upgrade.inventories import build_inventory
from workflows.drivers.upgrade.patch import write_upgrade_patch
from workflows.run.layout import work_root
from workflows.run.planning import plan_upgrade as diff_and_select
from workflows.runner.shard_runner import Limits


@dataclass(frozen=True)
class UpgradeOptions:
    """What one upgrade run is asked for (the command line's, parsed)."""

    from_version: str
    to_version: str
    out: Path
    cache_dir: Path
    specs: Sequence[str] = ()
    run: bool = False
    validate: bool = False
    rebuild_inventories: bool = False
    holdout: float | None = None  # None: the selector's default rate
    seed: str | None = None
    canaries: bool = True
    jobs: int = 1
    test_timeout_s: float = 300.0
    memory_mb: int | None = 8192
    show_progress: bool = True
    warm: bool = True


@dataclass
class UpgradeResult:
    """What the run wrote: `upgrade.json`'s data, its path, the environments, the patch line
    (`DIR/upgrade.patch: ...`, "" without a run) and the exit code (1: the new torch fails
    variants the old one did not; 0 otherwise, also without a run)."""

    data: dict[str, Any]
    path: Path
    envs: list[TorchEnv]
    code: int = ExitCode.OK
    conclusion: str = ""
    patch_line: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def patch(self) -> Path | None:
        found = self.data.get("patch")
        return Path(found) if found else None


def run_upgrade(options: UpgradeOptions, log: Callable[[str], None]) -> UpgradeResult:
    """The upgrade run `options` asks for; `upgrade.json` (and with a run the report, HUD
    files and `upgrade.patch`) written under `options.out`."""
    from workflows.drivers.upgrade.diff_run import write_json

    started_at = _now()
    timings: dict[str, float] = {}
    t = time.monotonic()
    # The new version first: a version pip's index does not have (a typo) is refused before
    # the old one's environment is made.
    new_env = provision(options.to_version, options.cache_dir, log=log)
    envs = [provision(options.from_version, options.cache_dir, log=log), new_env]
    timings["provision_s"] = time.monotonic() - t
    built = [
        build_inventory(e, options.specs, log=log, reuse=not options.rebuild_inventories)
        for e in envs
    ]
    timings["inventories_s"] = sum(b.seconds for b in built)
    old, new = built[0].inventory, built[1].inventory
    t = time.monotonic()
    diff, selection = diff_and_select(
        old,
        new,
        built[0].details,
        built[1].details,
        holdout=options.holdout,
        seed=options.seed,
        canaries=options.canaries,
    )
    timings["diff_select_s"] = time.monotonic() - t
    sources = {
        "from_inventory": str(built[0].path),
        "to_inventory": str(built[1].path),
        "environments": {e.version: str(e.path) for e in envs},
        "specs": list(options.specs),
    }
    data = upgrade_json(diff, selection, sources)
    out = options.out
    result = UpgradeResult(data, out / "upgrade.json", envs, timings=timings)
    if options.run or options.validate:
        limits = Limits(options.test_timeout_s, 3 * 3600.0, options.memory_mb)
        kw: dict[str, Any] = {
            "specs": options.specs,
            "limits": limits,
            "jobs": options.jobs,
            "show_progress": options.show_progress,
            "log": log,
            "warm": options.warm,
        }
        work = work_root(out)
        runs = [
            run_version(envs[0], selection.run_on_old(old), work / "from", **kw),
            run_version(envs[1], selection.run_on_new(), work / "to", **kw),
        ]
        moved = moved_rows(diff, runs[0], runs[1])
        runs, moved, grown = expand_misses(diff, selection, old, new, envs, runs, moved, work, **kw)
        data["run"] = run_section(moved, runs[0], runs[1])
        if data.get("new_exposed"):
            from suites.renames import proposals_after

            data["new_exposed"] = proposals_after(data["new_exposed"], runs[1].outcomes)
        data["run"]["expansion"] = grown
        if options.validate:
            data["validate"] = validate_full(diff, selection, envs, (old, new), runs, work, **kw)
        record = upgrade_record(
            diff, selection, moved, old, new, envs[1], runs[1], started_at, _now()
        )
        written = write_report(out, record, runs[1])
        data["report"] = {k: str(v) for k, v in sorted(written.items())}
        result.code = exit_code(record)  # the report's and callback's conclusion decides
        result.conclusion = f"conclusion: {record.effective_conclusion} (exit {result.code})"
        data["patch"] = str(out / "upgrade.patch")
        result.patch_line = write_upgrade_patch(
            data, options.specs, out / "upgrade.patch", record.run_id
        )
    data["timings"] = {k: round(v, 1) for k, v in timings.items()}
    write_json(result.path, data)
    return result


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
