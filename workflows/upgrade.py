"""The version-upgrade run: one isolated environment per torch version, both Inventories, the
diff and selection (`selector.upgrade`), the selection run on both versions, and the report.

```
provision(2.13.0), provision(2.14.1)    <cache>/torch-<v>: python -m venv, pip install torch==<v>
                                        expecttest numpy pyyaml jsonschema, the project --no-deps
build_inventory(env) x 2                <venv>/bin/python -m workflows inventory --out ...
                                        <venv>/bin/python -m workflows.upgrade describe --out ...
selector.upgrade: diff, select          (pure)
run_ids(env, ids) x 2                   shard subprocesses with the venv's python
classify -> UpgradeDiff -> RunRecord    dashboard_export.layout.write_run (HUD files, report)
```

`python -m workflows.upgrade describe --out FILE.json.gz [--specs PATH]...` runs INSIDE an
environment: it writes the details the diff names changes with (per-subject field digests,
per-variant decorators and precision, template digests), using the suites' own fingerprint
functions.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suites.model import Inventory, Outcome
from workflows.pipeline import PipelineError
from workflows.shard_runner import InfrastructureError, Limits, ProgressCallback, run_shard

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MARKER = ".spyre-ci-env.json"
# pytest: the shard subprocesses are pytest runs of the suites plugin.
EXTRA_PACKAGES = ("expecttest", "numpy", "pyyaml", "jsonschema", "pytest")
DETAILS_FORMAT = 1

Log = Callable[[str], None]


class UpgradeError(PipelineError):
    """An upgrade run cannot go on; the message names the version, file or step."""


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$SPYRE_CI_ENV_CACHE`, else `$XDG_CACHE_HOME/spyre-ci/envs` (~/.cache/spyre-ci/envs)."""
    env = os.environ if environ is None else environ
    if env.get("SPYRE_CI_ENV_CACHE"):
        return Path(env["SPYRE_CI_ENV_CACHE"])
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "spyre-ci" / "envs"


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TorchEnv:
    """One provisioned environment: a venv with one torch version and the project."""

    version: str
    path: Path

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def installed_torch(self) -> str | None:
        """The torch version the venv has (read from its metadata, no import), or None."""
        if not Path(self.python).exists():
            return None
        probe = ("import importlib.metadata as m\ntry: print(m.version('torch'))\n"
                 "except m.PackageNotFoundError: print('')")
        done = subprocess.run([self.python, "-c", probe], capture_output=True, text=True,
                              check=False)
        return done.stdout.strip().split("+")[0] or None if done.returncode == 0 else None


def _run_logged(command: list[str], log_file: Path, log: Log, label: str) -> None:
    """Run a step, keep its whole output in `log_file`, show progress lines as they come."""
    started = time.monotonic()
    with open(log_file, "a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(command)}\n")
        fh.flush()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            words = line.strip()
            # pip's own milestones; the rest stays in the log.
            if words.startswith(("Collecting ", "Processing ", "Installing collected",
                                 "Successfully installed", "ERROR", "Obtaining ")):
                log(f"  [{label} {time.monotonic() - started:5.0f} s] {words[:150]}")
        code = proc.wait()
    if code != 0:
        tail = log_file.read_text(encoding="utf-8", errors="replace").strip()[-1500:]
        raise UpgradeError(f"{label}: `{' '.join(command)}` exited {code}; whole output in "
                           f"{log_file}:\n{tail}")


def provision(
    version: str,
    cache_dir: Path | None = None,
    *,
    project: Path = PROJECT_ROOT,
    log: Log = _stderr,
    base_python: str | None = None,
) -> TorchEnv:
    """The environment for `version`, created in `cache_dir/torch-<version>` unless present.

    Reused when its marker says it was completed for this torch version and project and its
    torch is still installed; a half-built one (no marker) is removed and built again.
    """
    cache = cache_dir or default_cache_dir()
    env = TorchEnv(version, cache / f"torch-{version}")
    marker = env.path / MARKER
    wanted = {"torch": version, "project": str(project)}
    if marker.exists():
        try:
            recorded = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            recorded = {}
        if {k: recorded.get(k) for k in wanted} == wanted and env.installed_torch() == version:
            missing = [p for p in EXTRA_PACKAGES if p not in recorded.get("packages", ())]
            if missing:  # made by an older spyre-ci: add what is new, keep the rest
                log(f"torch {version}: adding {', '.join(missing)} to {env.path}")
                _run_logged([env.python, "-m", "pip", "install", "--disable-pip-version-check",
                             *missing], cache / f"torch-{version}.log", log, f"{version} extras")
                marker.write_text(json.dumps({**recorded, "packages": list(EXTRA_PACKAGES)})
                                  + "\n", encoding="utf-8")
            log(f"torch {version}: reusing {env.path}")
            return env
    if env.path.exists():
        log(f"torch {version}: {env.path} is incomplete or for another project; rebuilding it")
        shutil.rmtree(env.path)
    cache.mkdir(parents=True, exist_ok=True)
    log_file = cache / f"torch-{version}.log"
    log_file.write_text("", encoding="utf-8")
    started = time.monotonic()
    log(f"torch {version}: creating {env.path} (log: {log_file}); the 2.14 wheels are CUDA "
        "builds of several GB that run on the CPU here")
    python = base_python or sys.executable
    _run_logged([python, "-m", "venv", str(env.path)], log_file, log, f"{version} venv")
    pip = [env.python, "-m", "pip", "install", "--disable-pip-version-check"]
    _run_logged([*pip, f"torch=={version}", *EXTRA_PACKAGES], log_file, log,
                f"{version} torch")
    # The project pins one torch; --no-deps keeps the version this environment is for.
    _run_logged([*pip, "--no-deps", "-e", str(project)], log_file, log, f"{version} project")
    got = env.installed_torch()
    if got != version:
        raise UpgradeError(f"torch {version}: the environment has torch {got!r} after install;"
                           f" see {log_file}")
    marker.write_text(json.dumps({**wanted, "packages": list(EXTRA_PACKAGES),
                                  "created_s": round(time.monotonic() - started, 1)})
                      + "\n", encoding="utf-8")
    log(f"torch {version}: ready in {time.monotonic() - started:.0f} s ({_size(env.path)})")
    return env


def _size(path: Path) -> str:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return f"{total / 1e9:.1f} GB"


def specs_key(specs: Sequence[str] = (), torch_version: str = "") -> str:
    """The Inventory cache key (`workflows.inventory_cache.cache_key`, the one every cache
    of Inventories uses) of `specs` for `torch_version`."""
    from workflows.inventory_cache import cache_key

    return cache_key(specs, torch_version=torch_version)


@dataclass(frozen=True)
class BuiltInventory:
    inventory: Inventory
    path: Path
    details: dict[str, Any] | None
    details_path: Path | None
    seconds: float


def build_inventory(env: TorchEnv, specs: Sequence[str] = (), *, log: Log = _stderr,
                    reuse: bool = True) -> BuiltInventory:
    """The Inventory (and details) of `env`, built by the environment's own python."""
    key = specs_key(specs, env.version)
    path = env.path / f"inventory-{key}.json.gz"
    details_path = env.path / f"inventory-{key}.details.json.gz"
    started = time.monotonic()
    spec_args = [a for s in specs for a in ("--specs", str(Path(s).resolve()))]
    if reuse and path.exists() and details_path.exists():
        from workflows.inventory_cache import read_cached

        try:
            load_details(details_path)
        except UpgradeError as exc:
            log(f"torch {env.version}: {exc}; building it again")
            reuse = False
        if read_cached(path) is None:  # says so on stderr
            reuse = False
    if not (reuse and path.exists() and details_path.exists()):
        log(f"torch {env.version}: building the Inventory ({env.python} -m workflows "
            "inventory)")
        for command in ([env.python, "-m", "workflows", "inventory", "--out", str(path),
                         *spec_args],
                        [env.python, "-m", "workflows.upgrade", "describe", "--out",
                         str(details_path), *spec_args]):
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  cwd=PROJECT_ROOT)
            if done.returncode != 0:
                raise UpgradeError(f"torch {env.version}: `{' '.join(command)}` exited "
                                   f"{done.returncode}:\n{done.stderr.strip()[-2000:]}")
            if done.stdout.strip():
                log(f"  {done.stdout.strip()}")
    else:
        log(f"torch {env.version}: reusing {path}")
    inventory = load_inventory(path)
    if inventory.torch_version != env.version:
        raise UpgradeError(f"{path}: built for torch {inventory.torch_version}, not "
                           f"{env.version}")
    return BuiltInventory(inventory, path, load_details(details_path), details_path,
                          time.monotonic() - started)


def load_inventory(path: str | Path) -> Inventory:
    """An Inventory file; a missing or unreadable one is an UpgradeError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UpgradeError(f"{path}: no inventory there; build one with `spyre-ci inventory "
                           f"--out {path}` in an environment with that torch")
    try:
        return Inventory.load(path)
    except (OSError, EOFError, UnicodeDecodeError, ValueError, KeyError, TypeError,
            AttributeError) as exc:
        raise UpgradeError(f"{path}: not a readable inventory ({type(exc).__name__}: {exc}); "
                           "build it again with `spyre-ci inventory --out FILE`") from None


def details_path_for(inventory_path: str | Path) -> Path:
    """Where an Inventory's details live: `X.json.gz` -> `X.details.json.gz`."""
    path = Path(inventory_path)
    name = path.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ".details.json.gz")
    return path.with_name(name + ".details.json.gz")


def load_details(path: str | Path | None) -> dict[str, Any] | None:
    """Details written by `describe`, or None when the file is absent."""
    if path is None or not Path(path).is_file():
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UpgradeError(f"{path}: not readable details ({exc}); delete it to diff on "
                           "fingerprints alone, or build it again") from None
    if not isinstance(data, dict):
        raise UpgradeError(f"{path}: details must be a JSON object")
    return data


def describe(specs: Sequence[str] = ()) -> dict[str, Any]:
    """Per-subject field digests, per-variant decorators and precision, template digests.

    Imports torch: run it in the environment being described. The texts come from the suites'
    fingerprint functions, so the diff compares exactly what the fingerprints hash, field by
    field.
    """
    import torch

    from suites.expand import expand, load_suites
    from suites.fingerprint import (
        applicable_decorators,
        callable_digest,
        definition_text,
        describe_decorator,
    )
    from suites.rules import TEMPLATE_UPSTREAM
    from suites.templates import get_template

    expansion = expand(load_suites(list(specs) or None))
    subjects: dict[str, dict[str, str]] = {}
    templates: dict[str, str] = {}
    variants: dict[str, dict[str, Any]] = {}
    for planned in expansion.planned:
        v = planned.variant
        if planned.kind != "opinfo" or planned.info is None:
            continue
        key = f"{planned.db}:{v.subject}"
        if key not in subjects:
            fields: dict[str, str] = {}
            for line in definition_text(planned.info).split("\n"):
                name, _, value = line.partition("=")
                fields[name] = hashlib.sha256(value.encode()).hexdigest()[:16]
            subjects[key] = fields
        if v.template not in templates:
            templates[v.template] = callable_digest(get_template(v.template))
        cls, test = TEMPLATE_UPSTREAM[v.template]
        decorators = applicable_decorators(planned.info, cls, test, "spyre", planned.dtype)
        variants[v.id] = {
            "subject": key,
            "decorators": sorted(describe_decorator(d) for d in decorators),
            "precision": repr(planned.precision),
        }
    return {"format": DETAILS_FORMAT, "torch_version": torch.__version__.split("+")[0],
            "subjects": subjects, "templates": templates, "variants": variants}


def run_ids(
    env: TorchEnv,
    ids: Sequence[str],
    work_dir: Path,
    *,
    specs: Sequence[str] = (),
    limits: Limits | None = None,
    jobs: int = 1,
    progress: ProgressCallback | None = None,
) -> tuple[dict[str, Outcome], list[Path], float]:
    """Run `ids` on `env` as `jobs` shards; outcomes by id, JUnit files, wall seconds."""
    started = time.monotonic()
    if not ids:
        return {}, [], 0.0
    n = max(1, min(jobs, len(ids)))
    shards = [list(ids[i::n]) for i in range(n)]
    spec_paths = [str(Path(s).resolve()) for s in specs]
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(run_shard, f"torch-{env.version}-{i}", shard,
                               work_dir / f"shard-{i}", limits=limits or Limits(), specs=spec_paths,
                               progress=progress, python=env.python, parallel=n)
                   for i, shard in enumerate(shards)]
        results = [f.result() for f in futures]
    faults = [r.fault for r in results if r.fault is not None]
    if faults:
        raise InfrastructureError(
            f"torch {env.version}: " + "; ".join(f"{f.summary}\n{f.cause}" for f in faults))
    outcomes = {o.id: o for r in results for o in r.outcomes}
    junit = [p for r in results for p in r.junit_paths]
    return outcomes, junit, time.monotonic() - started


def environment_of(env: TorchEnv, inventory: Inventory) -> Any:
    """The dashboard Environment of a run on `env`."""
    from dashboard_export.model import Environment

    return Environment(
        torch_version=inventory.torch_version, torch_git_version=inventory.torch_git_version,
        backend="backend_under_test (emulated IBM Spyre)", backend_version=_project_version(),
        device="spyre (emulated: 32 cores, 2 MB scratchpads, 128-byte sticks)",
        extra={"environment": str(env.path)},
    )


def _project_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("spyre-ci")
    except metadata.PackageNotFoundError:
        return "unknown"


UPGRADE_FORMAT = 1


def diff_and_select(
    old: Inventory,
    new: Inventory,
    details_old: Mapping[str, Any] | None = None,
    details_new: Mapping[str, Any] | None = None,
    *,
    holdout: float = 0.02,
    seed: str | None = None,
    canaries: bool = True,
) -> tuple[Any, Any]:
    """`selector.upgrade` diff and selection; selector errors become UpgradeErrors."""
    from selector import SelectorError
    from selector.upgrade import diff_inventories, select_upgrade

    try:
        diff = diff_inventories(old, new, details_old, details_new)
        return diff, select_upgrade(diff, old, new, holdout_rate=holdout, seed=seed,
                                    canaries=canaries)
    except SelectorError as exc:
        raise UpgradeError(str(exc)) from None


def upgrade_json(diff: Any, selection: Any, sources: Mapping[str, Any]) -> dict[str, Any]:
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
        },
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
        return {"version": self.version, "ran": len(self.outcomes), "wall_s": round(self.wall_s, 1),
                "counts": counts}


def run_version(
    env: TorchEnv,
    ids: Sequence[str],
    work_dir: Path,
    *,
    specs: Sequence[str] = (),
    limits: Limits | None = None,
    jobs: int = 1,
    show_progress: bool = True,
    log: Log = _stderr,
) -> VersionRun:
    """Run `ids` on one version with a progress line.

    Resumable: outcomes a stopped earlier attempt already recorded under `work_dir` are
    kept (the same command continues where it stopped), and `wall_s` adds up every
    attempt's time (`work_dir/wall.json`).
    """
    from workflows.progress import Progress

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
        outcomes, _junit, _wall = run_ids(env, todo, work_dir, specs=specs, limits=limits,
                                          jobs=jobs, progress=progress)
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
    from workflows.shard_runner import short_message

    done = read_outcomes(sorted(work_dir.rglob("*.jsonl")) if work_dir.is_dir() else ())
    return {vid: replace(o, message=short_message(o.message)) for vid, o in done.items()}


def moved_rows(diff: Any, old_run: VersionRun, new_run: VersionRun) -> list[Any]:
    """`selector.upgrade.classify` over what ran on both versions."""
    from selector.upgrade import classify

    return classify(old_run.ids, new_run.ids, old_run.outcomes, new_run.outcomes,
                    diff.removed, diff.added)


def run_section(moved: Sequence[Any], old_run: VersionRun, new_run: VersionRun) -> dict[str, Any]:
    """The `run` part of upgrade.json: per category counts and rows, both versions' figures."""
    from dashboard_export.model import DiffCategory

    categories = {str(c): 0 for c in DiffCategory}
    rows = []
    for m in moved:
        if m.category is None:
            continue
        categories[m.category] += 1
        rows.append({"id": m.id, "category": m.category,
                     "before": str(m.before) if m.before else None,
                     "after": str(m.after) if m.after else None, "message": m.message})
    return {"from": old_run.summary(), "to": new_run.summary(), "categories": categories,
            "unchanged_passing": sum(1 for m in moved if m.category is None),
            "rows": rows}


def expand_misses(
    diff: Any,
    selection: Any,
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
    extra = [run_version(envs[0], [v for v in grown if v in old_ids], work_dir / "expand-from",
                         **kw),
             run_version(envs[1], list(grown), work_dir / "expand-to", **kw)]
    merged = [VersionRun(r.version, [*r.ids, *e.ids], {**r.outcomes, **e.outcomes},
                         [*r.junit, *e.junit], r.wall_s + e.wall_s)
              for r, e in zip(runs, extra, strict=True)]
    return merged, moved_rows(diff, merged[0], merged[1]), {
        "ran": len(grown), "because": sorted(set(grown.values())),
        "wall_s": [round(e.wall_s, 1) for e in extra]}


def validate_full(
    diff: Any,
    selection: Any,
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
        fulls.append(VersionRun(env.version, [*ran.ids, *rest],
                                {**ran.outcomes, **extra.outcomes}, [*ran.junit, *extra.junit],
                                ran.wall_s + extra.wall_s))
    full_moved = moved_rows(diff, fulls[0], fulls[1])
    ran_ids = set(runs[0].ids) | set(runs[1].ids)
    result = validation(full_moved, ran_ids, selection.runnable_to)
    categories: dict[str, int] = {}
    for m in full_moved:
        if m.category is not None:
            categories[m.category] = categories.get(m.category, 0) + 1
    result.update({
        "full": [f.summary() for f in fulls],
        "full_categories": categories,
        "selected_wall_s": [round(r.wall_s, 1) for r in runs],
        "full_wall_s": [round(f.wall_s, 1) for f in fulls],
    })
    return result


def export_report(
    out_dir: Path,
    diff: Any,
    selection: Any,
    moved: Sequence[Any],
    old_inventory: Inventory,
    new_inventory: Inventory,
    new_env: TorchEnv,
    new_run: VersionRun,
    started_at: str,
    completed_at: str,
) -> dict[str, Path]:
    """HUD formats and the report of the run on the new version, with `RunRecord.upgrade`."""
    from contracts.event import TriggerEvent
    from dashboard_export.layout import write_run
    from dashboard_export.model import (
        Classification,
        DiffCategory,
        DiffRow,
        PlanSummary,
        RunRecord,
        UpgradeDiff,
        VariantResult,
    )

    category = {m.id: m.category for m in moved}
    holdout = set(selection.holdout)
    results = []
    for vid, outcome in sorted(new_run.outcomes.items()):
        cls: Classification | None = None
        if outcome.status.is_failure:
            cls = (Classification.PRE_EXISTING if category.get(vid) == "unchanged-failing"
                   else Classification.NEW)
        results.append(VariantResult.of(outcome, cls, vid in holdout and
                                        vid not in selection.reasons))
    rows = tuple(DiffRow(m.id, DiffCategory(m.category), m.before, m.after, m.message)
                 for m in moved if m.category is not None)
    first_reason: dict[str, int] = {}
    for reasons in selection.reasons.values():
        first = reasons[0] if reasons else "?"
        heuristic, _, text = first.partition(": ")
        if heuristic == "definition" and "): " in text:
            text = "changed " + text.split("): ", 1)[1]  # what changed, not the hashes
        key = f"{heuristic}: {text}"
        first_reason[key] = first_reason.get(key, 0) + 1
    misses = tuple(sorted(m.id for m in moved if m.id in holdout and m.id not in
                          selection.reasons and m.category in ("regressed", "new-failing")))
    summary = PlanSummary(
        selected=len(selection.reasons), inventory=len(new_inventory),
        top_reasons=tuple(sorted(first_reason.items(), key=lambda kv: -kv[1])[:10]),
        skipped={"not affected by the upgrade": max(
            0, selection.runnable_to - len(selection.reasons) - len(selection.holdout))},
        holdout=len(selection.holdout), holdout_misses=misses,
        canaries=len(selection.canary),
        metrics={"selection_ratio": selection.share, "affected": float(diff.affected),
                 "changed": float(len(diff.changed)), "added": float(len(diff.added)),
                 "removed": float(len(diff.removed)), "api_changes": float(len(diff.api))},
    )
    stamp = completed_at.replace("-", "").replace(":", "")
    run_id = f"upgrade-{diff.from_version}-{diff.to_version}-{stamp}"
    event = TriggerEvent(
        kind="periodic", delivery_id=run_id, repo="pytorch/pytorch",
        head_sha=new_inventory.torch_git_version, base_sha=old_inventory.torch_git_version,
        ref=f"v{diff.to_version}", source="cli", upstream_event="upgrade",
        commit_messages=(f"upgrade torch {diff.from_version} to {diff.to_version}",),
    )
    record = RunRecord(
        run_id=run_id, attempt=1, downstream_repo="torch-spyre/torch-spyre",
        workflow="spyre-ci", job="upgrade-diff", event=event,
        environment=environment_of(new_env, new_inventory), results=tuple(results),
        started_at=started_at, completed_at=completed_at, plan=summary,
        upgrade=UpgradeDiff(diff.from_version, diff.to_version, rows),
    )
    junit = out_dir / "junit"
    junit.mkdir(parents=True, exist_ok=True)
    for path in new_run.junit:
        shutil.copyfile(path, junit / path.name)
    return write_run(record, out_dir, junit)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflows.upgrade")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("describe", help="write the upgrade-diff details of this environment")
    d.add_argument("--out", required=True, type=Path)
    d.add_argument("--specs", action="append", default=[])
    args = parser.parse_args(argv)
    data = describe(args.specs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump(data, fh, separators=(",", ":"), sort_keys=True)
    tmp.replace(args.out)
    print(f"details: {len(data['subjects'])} subjects, {len(data['variants'])} variants -> "
          f"{args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
