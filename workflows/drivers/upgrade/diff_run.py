"""The diff run: the variants `planning.plan_upgrade` selected run on both versions (shards
through the pipeline's executor, with each environment's python), the results compared per
variant, the holdout's misses expanded and an optional full validation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suites.model import Inventory, Outcome
from workflows.drivers.upgrade.environments import Log, TorchEnv, stderr_log
from workflows.errors import InfrastructureError
from workflows.run.layout import shard_name
from workflows.run.pipeline import execute_ids
from workflows.runner.scheduling import InOrder, Pool, Work, slices
from workflows.runner.shard_runner import Limits, ProgressCallback, ShardRun

if TYPE_CHECKING:
    from selector.upgrade import InventoryDiff, UpgradeSelection


def run_ids(
    env: TorchEnv,
    ids: Sequence[str],
    work_dir: Path,
    *,
    specs: Sequence[str] = (),
    limits: Limits | None = None,
    jobs: int = 1,
    progress: ProgressCallback | None = None,
    warm: bool = True,
) -> tuple[dict[str, Outcome], list[Path], float]:
    """Run `ids` on `env` as `jobs` shards; outcomes by id, JUnit files, wall seconds.
    `warm`: `Settings.zygote` (a zygote serves only this interpreter's environment, so an
    upgrade environment's test processes start cold either way)."""
    started = time.monotonic()
    if not ids:
        return {}, [], 0.0
    works = slices(f"torch-{env.version}", ids, jobs)
    spec_paths = [str(Path(s).resolve()) for s in specs]
    folder = {work.token: work_dir / shard_name(i) for i, work in enumerate(works)}

    def execute(work: Work) -> ShardRun:
        return execute_ids(
            work.shard,
            work.ids,
            folder[work.token],
            limits=limits or Limits(),
            specs=spec_paths,
            progress=progress,
            python=env.python,
            parallel=len(works),
            warm=warm,
        )

    pool: Pool[ShardRun] = Pool(InOrder(works), len(works))
    finished = pool.run(execute)
    results = [result for _work, result in sorted(finished, key=lambda pair: pair[0].token)]
    faults = [r.fault for r in results if r.fault is not None]
    if faults:
        raise InfrastructureError(
            f"torch {env.version}: " + "; ".join(f"{f.summary}\n{f.cause}" for f in faults)
        )
    outcomes = {o.id: o for r in results for o in r.outcomes}
    junit = [p for r in results for p in r.junit_paths]
    return outcomes, junit, time.monotonic() - started


UPGRADE_FORMAT = 1


def upgrade_json(
    diff: InventoryDiff, selection: UpgradeSelection, sources: Mapping[str, Any]
) -> dict[str, Any]:
    """The `upgrade.json` document: the diff, the selection and where they came from."""
    data = diff.to_json()
    sel = selection.to_json()
    return {
        "format": UPGRADE_FORMAT,
        **sources,
        **data,
        "selected": sel["selected"],
        "holdout": sel["holdout"],
        "canary": sel["canary"],
        "selection": {
            "selected": len(sel["selected"]),
            "holdout": len(sel["holdout"]),
            "canary": len(sel["canary"]),
            "removed_run_on_old": len(sel["removed"]),
            "runnable_to": sel["runnable_to"],
            "share": sel["share"],
            "seed": sel["seed"],
            "api_ops": sel["api_ops"],
            "by_heuristic": sel["by_heuristic"],
            "skipped": sel["skipped"],
        },
        "held": sel["held"],
    }


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


@dataclass
class VersionRun:
    """The selection (or more) run on one version."""

    version: str
    ids: list[str]
    outcomes: dict[str, Outcome]
    junit: list[Path]
    wall_s: float

    def summary(self) -> dict[str, Any]:
        from suites.model import count_statuses

        counts = {k: n for k, n in count_statuses(self.outcomes.values()).items() if n}
        return {
            "version": self.version,
            "ran": len(self.outcomes),
            "wall_s": round(self.wall_s, 1),
            "counts": counts,
        }


def run_version(
    env: TorchEnv,
    ids: Sequence[str],
    work_dir: Path,
    *,
    specs: Sequence[str] = (),
    limits: Limits | None = None,
    jobs: int = 1,
    show_progress: bool = True,
    log: Log = stderr_log,
    warm: bool = True,
) -> VersionRun:
    """Run `ids` on one version with a progress line.

    Resumable: outcomes a stopped earlier attempt already recorded under `work_dir` are
    kept (the same command continues where it stopped), and `wall_s` adds up every
    attempt's time (`work_dir/wall.json`).
    """
    from workflows.drivers.progress import Progress

    wanted = set(ids)
    kept = {vid: o for vid, o in recorded_outcomes(work_dir).items() if vid in wanted}
    todo = [vid for vid in ids if vid not in kept]
    shards = max(1, min(jobs, len(todo)))
    resumed = f" ({len(kept)} kept from a stopped attempt)" if kept else ""
    log(f"torch {env.version}: running {len(todo)} variants in {shards} shard(s){resumed}")
    progress = Progress(len(todo)) if show_progress and todo else None
    wall_file = work_dir / "wall.json"
    try:
        before_s = float(json.loads(wall_file.read_text(encoding="utf-8"))["wall_s"])
    except (OSError, ValueError, KeyError, TypeError):
        before_s = 0.0
    started = time.monotonic()

    def save_wall() -> float:
        total = before_s + time.monotonic() - started
        work_dir.mkdir(parents=True, exist_ok=True)
        wall_file.write_text(json.dumps({"wall_s": round(total, 3)}) + "\n", encoding="utf-8")
        return total

    try:
        outcomes, _junit, _wall = run_ids(
            env,
            todo,
            work_dir,
            specs=specs,
            limits=limits,
            jobs=jobs,
            progress=progress,
            warm=warm,
        )
    finally:
        total_s = save_wall()
    if progress is not None:
        progress.finish()
    junit = sorted(work_dir.rglob("*.xml"))
    return VersionRun(env.version, list(ids), {**kept, **outcomes}, junit, total_s)


def recorded_outcomes(work_dir: Path) -> dict[str, Outcome]:
    """Outcomes earlier shard subprocesses wrote under `work_dir` (ended tests only)."""
    from dataclasses import replace

    from suites.results_file import read_outcomes
    from workflows.runner.shard_runner import short_message

    done = read_outcomes(sorted(work_dir.rglob("*.jsonl")) if work_dir.is_dir() else ())
    return {vid: replace(o, message=short_message(o.message)) for vid, o in done.items()}


def moved_rows(diff: Any, old_run: VersionRun, new_run: VersionRun) -> list[Any]:
    """`selector.upgrade.classify` over what ran on both versions."""
    from selector.upgrade import classify

    return classify(
        old_run.ids,
        new_run.ids,
        old_run.outcomes,
        new_run.outcomes,
        diff.removed,
        diff.added,
        diff.carried,
    )


def run_section(moved: Sequence[Any], old_run: VersionRun, new_run: VersionRun) -> dict[str, Any]:
    """The `run` part of upgrade.json: per category counts and rows, both versions' figures."""
    from dashboard_export.model import DiffCategory

    categories = {str(c): 0 for c in DiffCategory}
    rows = []
    for m in moved:
        if m.category is None:
            continue
        categories[m.category] += 1
        rows.append(
            {
                "id": m.id,
                "category": m.category,
                "before": str(m.before) if m.before else None,
                "after": str(m.after) if m.after else None,
                "message": m.message,
                **({"renamed_from": m.renamed_from} if m.renamed_from else {}),
            }
        )
    return {
        "from": old_run.summary(),
        "to": new_run.summary(),
        "categories": categories,
        "unchanged_passing": sum(1 for m in moved if m.category is None),
        "rows": rows,
    }


def expand_misses(
    diff: InventoryDiff,
    selection: UpgradeSelection,
    old: Inventory,
    new: Inventory,
    envs: Sequence[TorchEnv],
    runs: Sequence[VersionRun],
    moved: list[Any],
    work_dir: Path,
    **kw: Any,
) -> tuple[list[VersionRun], list[Any], dict[str, Any]]:
    """Holdout variants that regressed or fail new are selector misses: run their neighbours
    (`selector.upgrade.expansion`) on both versions, and classify again."""
    from selector.upgrade import expansion

    grown = expansion(moved, selection, new, already=runs[1].ids)
    if not grown:
        return list(runs), moved, {"ran": 0, "because": []}
    old_ids = {v.id for v in old.variants}
    extra = [
        run_version(envs[0], [v for v in grown if v in old_ids], work_dir / "expand-from", **kw),
        run_version(envs[1], list(grown), work_dir / "expand-to", **kw),
    ]
    merged = [
        VersionRun(
            r.version,
            [*r.ids, *e.ids],
            {**r.outcomes, **e.outcomes},
            [*r.junit, *e.junit],
            r.wall_s + e.wall_s,
        )
        for r, e in zip(runs, extra, strict=True)
    ]
    return (
        merged,
        moved_rows(diff, merged[0], merged[1]),
        {
            "ran": len(grown),
            "because": sorted(set(grown.values())),
            "wall_s": [round(e.wall_s, 1) for e in extra],
        },
    )


def validate_full(
    diff: InventoryDiff,
    selection: UpgradeSelection,
    envs: Sequence[TorchEnv],
    inventories: tuple[Inventory, Inventory],
    runs: Sequence[VersionRun],
    work_dir: Path,
    **kw: Any,
) -> dict[str, Any]:
    """Run every runnable variant on both versions once; what did the selection catch?

    The full run reuses the selection's outcomes and runs the rest, so its wall time is the
    selection's plus the rest's (`full_wall_s`).
    """
    from selector.upgrade import validation
    from suites.model import Expectation

    fulls: list[VersionRun] = []
    for env, inventory, ran, name in zip(envs, inventories, runs, ("from", "to"), strict=True):
        runnable = [v.id for v in inventory.variants if v.expectation is not Expectation.SKIP]
        rest = [vid for vid in runnable if vid not in ran.outcomes]
        extra = run_version(env, rest, work_dir / f"validate-{name}", **kw)
        fulls.append(
            VersionRun(
                env.version,
                [*ran.ids, *rest],
                {**ran.outcomes, **extra.outcomes},
                [*ran.junit, *extra.junit],
                ran.wall_s + extra.wall_s,
            )
        )
    full_moved = moved_rows(diff, fulls[0], fulls[1])
    ran_ids = set(runs[0].ids) | set(runs[1].ids)
    result = validation(full_moved, ran_ids, selection.runnable_to)
    categories: dict[str, int] = {}
    for m in full_moved:
        if m.category is not None:
            categories[m.category] = categories.get(m.category, 0) + 1
    result.update(
        {
            "full": [f.summary() for f in fulls],
            "full_categories": categories,
            "selected_wall_s": [round(r.wall_s, 1) for r in runs],
            "full_wall_s": [round(f.wall_s, 1) for f in fulls],
        }
    )
    return result
