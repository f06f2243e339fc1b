"""The runner's speed on this machine, spyre-ci against `pytest -n 2` with the plugin (xdist).

    .venv/bin/python benchmarks/speed.py [--repeat 3] [--jobs 2] [--skip-main-job]
        [--slice 1000] [--full] [--before REV]

* shard start: time from the `run_shard` call to the first test result of a one-variant
  shard (`ops::compare_cpu::softmax::float32`, bundled specs), cold (`warm=False`) and
  warm (forked from a zygote built beforehand; its build is recorded on its own); medians.
* main job: `spyre-ci run --event examples/events/push_softmax_kernel.json --jobs 2` with
  `SPYRE_CI_ZYGOTE=1` and `=0`, alternated, each with a fresh History and the Inventory
  built beforehand and shared (as `benchmarks/workflows_main_job.py`); medians.
* failing vs passing: wall time of a warm one-variant shard of a failing variant and of a
  passing one (tests/workflows/data/tiny.yaml: `pow` fails on spyre, `softmax` passes).
* against xdist: the ids the main job ran, run by `pytest -n JOBS -p suites.pytest_plugin`
  (what a user would do without spyre-ci), alternated with the spyre-ci main job.
* a slice: every k-th variant of the bundled Inventory (`--slice N` of them, so it has its
  share of expected failures and skips) as an Inventory of its own: `spyre-ci run --full`
  with 2 jobs and with 1 (scaling efficiency t1 / (2 t2)), and xdist over the same ids.
* `--full`: every variant, spyre-ci against xdist (about half an hour here). `--before REV`:
  also the full run of the code at git revision REV (a worktree of it, cold), for today's
  ratio and a variant-by-variant comparison of the outcomes.

The load average is recorded with every figure: the machine is shared, timings are noisy.
Writes `benchmarks/results/speed.json`; the default run takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace as replace_inventory
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from suites.model import Inventory  # noqa: E402
from suites.results_file import read_outcomes  # noqa: E402
from workflows.runner import zygote  # noqa: E402
from workflows.runner.shard_runner import PLUGIN, run_shard  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "speed.json"
TINY = REPO / "tests" / "workflows" / "data" / "tiny.yaml"
EVENT = REPO / "examples" / "events" / "push_softmax_kernel.json"
ONE = "ops::compare_cpu::softmax::float32"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def first_result_s(work: Path, ids: list[str], warm: bool, specs: list[str]) -> dict[str, Any]:
    """Seconds from the run_shard call to its first outcome, and to its end."""
    started = time.perf_counter()
    first: list[float] = []
    result = run_shard(
        "bench",
        ids,
        work,
        specs=specs,
        warm=warm,
        progress=lambda _: first.append(time.perf_counter() - started),
    )
    return {
        "first_result_s": round(first[0], 3) if first else None,
        "wall_s": round(time.perf_counter() - started, 3),
        "warm": result.warm_processes,
        "status": [o.status.value for o in result.outcomes],
        "test_s": [round(o.duration_s, 4) for o in result.outcomes],
        "load": load(),
    }


def shard_start(work: Path, repeat: int) -> dict[str, Any]:
    cold = [first_result_s(work / f"cold{i}", [ONE], False, []) for i in range(repeat)]
    built = time.perf_counter()
    zygote.prestart(PLUGIN, [])
    # The first warm shard waits for the zygote: what a worker's first shard pays.
    first_warm = first_result_s(work / "warm-first", [ONE], True, [])
    build_s = time.perf_counter() - built
    warm = [first_result_s(work / f"warm{i}", [ONE], True, []) for i in range(repeat)]
    cold_s = statistics.median(float(r["first_result_s"]) for r in cold)
    warm_s = statistics.median(float(r["first_result_s"]) for r in warm)
    return {
        "cold_first_result_s": cold_s,
        "warm_first_result_s": warm_s,
        "ratio_cold_over_warm": round(cold_s / warm_s, 1),
        "zygote_build_and_first_shard_s": round(build_s, 2),
        "runs": {"cold": cold, "first_warm": first_warm, "warm": warm},
    }


def failing_vs_passing(work: Path, repeat: int) -> dict[str, Any]:
    specs = [str(TINY)]
    zygote.prestart(PLUGIN, specs)
    first_result_s(work / "fp-warmup", ["tiny::compare_cpu::softmax::float32"], True, specs)
    runs: dict[str, list[dict[str, Any]]] = {"failing": [], "passing": []}
    ids = {
        "failing": "tiny::compare_cpu::pow::float32",
        "passing": "tiny::compare_cpu::softmax::float32",
    }
    for i in range(repeat):
        for kind, vid in ids.items():
            runs[kind].append(first_result_s(work / f"fp-{kind}{i}", [vid], True, specs))
    fail_s = statistics.median(float(r["wall_s"]) for r in runs["failing"])
    pass_s = statistics.median(float(r["wall_s"]) for r in runs["passing"])
    return {
        "failing_shard_wall_s": fail_s,
        "passing_shard_wall_s": pass_s,
        "ratio_failing_over_passing": round(fail_s / pass_s, 2),
        "ids": ids,
        "runs": runs,
    }


def main_job(work: Path, inventories: Path, repeat: int, jobs: int) -> dict[str, Any]:
    """The README's main job with the zygote and without, and xdist over the ids it ran;
    alternated, medians."""
    runs: dict[str, list[dict[str, Any]]] = {"zygote": [], "no_zygote": [], "xdist": []}
    args = ["--event", str(EVENT), "--jobs", str(jobs)]
    for i in range(repeat):
        for name, flag in (("zygote", "1"), ("no_zygote", "0")):
            run = spyre_ci(work, f"{name}{i}", args, inventories, env={"SPYRE_CI_ZYGOTE": flag})
            runs[name].append(run)
        runs["xdist"].append(xdist(work, f"main{i}", sorted(runs["zygote"][0]["outcomes"]), jobs))
    with_s = statistics.median(float(r["wall_s"]) for r in runs["zygote"])
    without_s = statistics.median(float(r["wall_s"]) for r in runs["no_zygote"])
    xdist_s = statistics.median(float(r["wall_s"]) for r in runs["xdist"])
    return {
        "with_zygote_s": with_s,
        "without_zygote_s": without_s,
        "xdist_s": xdist_s,
        "ratio_without_over_with": round(without_s / with_s, 2),
        "ratio_spyre_ci_over_xdist": round(with_s / xdist_s, 3),
        "variants": runs["zygote"][-1]["ran"],
        "command": f"spyre-ci run --event {EVENT.relative_to(REPO)} --jobs {jobs} "
        f"--no-progress (SPYRE_CI_ZYGOTE=1 vs 0) against pytest -n {jobs} -p {PLUGIN} "
        "--spyre-ids (the ids the run ran)",
        "runs": {k: [_brief(r) for r in v] for k, v in runs.items()},
    }


NIGHTLY = REPO / "examples" / "events" / "nightly.json"


def _state(work: Path, name: str, inventories: Path) -> Path:
    """A fresh state directory (History empty) sharing the built Inventories."""
    folder = work / f"state-{name}"
    folder.mkdir()
    (folder / "inventories").symlink_to(inventories)
    return folder


def build_inventory(work: Path) -> tuple[Path, Path]:
    """The bundled Inventory, built once for every run of the benchmark: (its folder, file)."""
    inventories = work / "shared-inventories"
    inventories.mkdir(exist_ok=True)
    built = work / "state-build"
    if not built.exists():
        built.mkdir()
        (built / "inventories").symlink_to(inventories)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pathlib import Path\n"
            "from workflows.stores.inventory_cache import default_inventory\n"
            f"print(default_inventory(Path({str(built)!r})))",
        ],
        cwd=REPO,
        env={**os.environ, "SPYRE_CI_STATE_DIR": str(built)},
        check=True,
        capture_output=True,
        text=True,
    )
    return inventories, Path(done.stdout.strip().splitlines()[-1])


def spyre_ci(
    work: Path,
    name: str,
    args: list[str],
    inventories: Path,
    *,
    code: Path = REPO,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One `spyre-ci run` (fresh History) of the code in `code`: wall time and outcomes."""
    folder = _state(work, name, inventories)
    out = work / f"out-{name}"
    environ = {**os.environ, "SPYRE_CI_STATE_DIR": str(folder), **(env or {})}
    if code != REPO:  # another revision's code, shards included
        environ["PYTHONPATH"] = str(code)
    command = [sys.executable, "-m", "workflows", "run", *args, "--out", str(out), "--no-progress"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=code, env=environ, capture_output=True, text=True)
    wall = time.perf_counter() - started
    report = out / "run.json"
    summary = json.loads(report.read_text()) if report.exists() else {}
    results = summary.get("results", [])
    return {
        "wall_s": round(wall, 2),
        "exit_code": done.returncode,
        "ran": len(results),
        "statuses": dict(Counter(r.get("status") for r in results)),
        "outcomes": {r["id"]: r.get("status") for r in results if "id" in r},
        "stderr_tail": done.stderr[-600:] if done.returncode not in (0, 1) else "",
        "load": load(),
    }


def xdist(work: Path, name: str, ids: list[str], jobs: int) -> dict[str, Any]:
    """`pytest -n JOBS` with the plugin over `ids`, as a user without spyre-ci would run
    them: wall time and outcomes (the plugin's results file, one line per test)."""
    folder = work / f"xdist-{name}"
    folder.mkdir()
    (folder / "ids.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    command = [
        sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(folder),
        "-p", PLUGIN, "-p", "no:cacheprovider", "-q", "-n", str(jobs),
        "--spyre-ids", str(folder / "ids.txt"), "--spyre-results", str(folder / "results.jsonl"),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - started
    outcomes = read_outcomes([folder / "results.jsonl"])
    return {
        "wall_s": round(wall, 2),
        "exit_code": done.returncode,
        "ran": len(outcomes),
        "statuses": dict(Counter(o.status.value for o in outcomes.values())),
        "outcomes": {vid: o.status.value for vid, o in outcomes.items()},
        "stdout_tail": done.stdout[-600:] if done.returncode not in (0, 1) else "",
        "load": load(),
    }


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k != "outcomes"}


def against_xdist(
    work: Path, inventories: Path, repeat: int, jobs: int, name: str, args: list[str]
) -> dict[str, Any]:
    """spyre-ci `run ARGS` alternated with xdist over the ids spyre-ci ran; medians."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for i in range(repeat):
        ours.append(spyre_ci(work, f"{name}{i}", [*args, "--jobs", str(jobs)], inventories))
        ids = sorted(ours[0]["outcomes"])
        theirs.append(xdist(work, f"{name}{i}", ids, jobs))
    ours_s = statistics.median(r["wall_s"] for r in ours)
    theirs_s = statistics.median(r["wall_s"] for r in theirs)
    differ = sorted(
        vid
        for vid, status in ours[-1]["outcomes"].items()
        if theirs[-1]["outcomes"].get(vid) not in (status, None)
    )
    return {
        "spyre_ci_s": ours_s,
        "xdist_s": theirs_s,
        "ratio_spyre_ci_over_xdist": round(ours_s / theirs_s, 3),
        "variants": ours[-1]["ran"],
        "outcomes_that_differ": {
            v: [ours[-1]["outcomes"][v], theirs[-1]["outcomes"][v]] for v in differ[:50]
        },
        "command": f"spyre-ci run {' '.join(args)} --jobs {jobs} against "
        f"pytest -n {jobs} -p {PLUGIN} --spyre-ids (the same ids)",
        "runs": {"spyre_ci": [_brief(r) for r in ours], "xdist": [_brief(r) for r in theirs]},
    }


def slice_inventory(inventory: Path, count: int, out: Path) -> Path:
    """Every k-th variant (by id) of `inventory`: `count` of them, in their share of kinds."""
    full = Inventory.load(inventory)
    ordered = sorted(full.variants, key=lambda v: v.id)
    step = max(1, len(ordered) // count)
    chosen = tuple(ordered[::step][:count])
    replace_inventory(full, variants=chosen).save(out)
    return out


def scaling(work: Path, inventories: Path, inventory: Path, repeat: int) -> dict[str, Any]:
    """The slice with 1 job and with 2, alternated: efficiency t1 / (2 t2)."""
    runs: dict[str, list[dict[str, Any]]] = {"1": [], "2": []}
    args = ["--event", str(NIGHTLY), "--full", "--inventory", str(inventory)]
    for i in range(repeat):
        for jobs in ("1", "2"):
            runs[jobs].append(
                spyre_ci(work, f"scale{jobs}-{i}", [*args, "--jobs", jobs], inventories)
            )
    one = statistics.median(r["wall_s"] for r in runs["1"])
    two = statistics.median(r["wall_s"] for r in runs["2"])
    return {
        "one_job_s": one,
        "two_jobs_s": two,
        "efficiency": round(one / (2 * two), 3),
        "runs": {k: [_brief(r) for r in v] for k, v in runs.items()},
    }


def before_full(work: Path, inventories: Path, rev: str, jobs: int) -> dict[str, Any]:
    """The full run of revision `rev` (a worktree of it): its wall time and outcomes."""
    tree = work / f"rev-{rev}"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(tree), rev], cwd=REPO, check=True,
        capture_output=True,
    )  # fmt: skip
    try:
        return spyre_ci(
            work, f"before-{rev}", ["--event", str(NIGHTLY), "--full", "--jobs", str(jobs)],
            inventories, code=tree, env={"SPYRE_CI_ZYGOTE": "0"},
        )  # fmt: skip
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO,
                       capture_output=True)  # fmt: skip


def compare_outcomes(now: dict[str, str], before: dict[str, str]) -> dict[str, Any]:
    both = set(now) & set(before)
    changed = sorted(v for v in both if now[v] != before[v])
    return {
        "compared": len(both),
        "only_now": len(set(now) - set(before)),
        "only_before": len(set(before) - set(now)),
        "changed": len(changed),
        "changed_ids": {v: [before[v], now[v]] for v in changed[:100]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-main-job", action="store_true")
    parser.add_argument("--slice", type=int, default=1000, help="variants in the slice (0: none)")
    parser.add_argument("--full", action="store_true", help="also the full run against xdist")
    parser.add_argument("--before", metavar="REV", help="also the full run of revision REV")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-speed-"))
    load_before = load()
    started = time.perf_counter()
    try:
        start = shard_start(work, args.repeat)
        failing = failing_vs_passing(work, max(args.repeat, 5))
    finally:
        zygote.stop_all()
    inventories, inventory = build_inventory(work)
    repeat = max(1, args.repeat - 1)
    job = None if args.skip_main_job else main_job(work, inventories, repeat, args.jobs)
    sliced = scaled = None
    if args.slice:
        part = slice_inventory(inventory, args.slice, work / "slice.json.gz")
        sliced = against_xdist(
            work, inventories, repeat, args.jobs, "slice",
            ["--event", str(NIGHTLY), "--full", "--inventory", str(part)],
        )  # fmt: skip
        scaled = scaling(work, inventories, part, repeat)
    full = before = None
    if args.full or args.before:
        full = against_xdist(work, inventories, 1, args.jobs, "full",
                             ["--event", str(NIGHTLY), "--full"])  # fmt: skip
    if args.before:
        try:
            ran = before_full(work, inventories, args.before, args.jobs)
        except (OSError, subprocess.CalledProcessError) as exc:  # recorded, not fatal
            ran = {"wall_s": None, "exit_code": None, "outcomes": {}, "error": str(exc)}
        ours = full["runs"]["spyre_ci"][0]["wall_s"] if full else None
        before = {
            "revision": args.before,
            "wall_s": ran["wall_s"],
            "exit_code": ran["exit_code"],
            "ratio_now_over_before": round(ours / ran["wall_s"], 3)
            if ours and ran["wall_s"]
            else None,
            "outcomes": compare_outcomes(_full_outcomes(work), ran["outcomes"]),
            "run": _brief(ran),
        }
    measurements: list[dict[str, Any]] = [
        {"name": "shard_start_cold", "value": start["cold_first_result_s"], "unit": "s",
         "aim": "< 8"},
        {"name": "shard_start_warm", "value": start["warm_first_result_s"], "unit": "s",
         "aim": "< 1.5"},
        {"name": "shard_start_ratio", "value": start["ratio_cold_over_warm"], "unit": "x"},
        {"name": "failing_over_passing_warm_shard",
         "value": failing["ratio_failing_over_passing"], "unit": "x", "aim": "<= 1.5"},
    ]  # fmt: skip
    if job is not None:
        measurements += [
            {"name": "main_job_with_zygote", "value": job["with_zygote_s"], "unit": "s"},
            {"name": "main_job_without_zygote", "value": job["without_zygote_s"], "unit": "s"},
            {"name": "main_job_xdist", "value": job["xdist_s"], "unit": "s"},
            {"name": "main_job_over_xdist", "value": job["ratio_spyre_ci_over_xdist"],
             "unit": "x", "aim": "<= 0.25"},
        ]  # fmt: skip
    if sliced is not None and scaled is not None:
        measurements += [
            {"name": "slice_over_xdist", "value": sliced["ratio_spyre_ci_over_xdist"],
             "unit": "x", "variants": sliced["variants"]},
            {"name": "scaling_efficiency_1_to_2", "value": scaled["efficiency"], "unit": "",
             "aim": ">= 0.95"},
        ]  # fmt: skip
    if full is not None:
        measurements.append(
            {"name": "full_over_xdist", "value": full["ratio_spyre_ci_over_xdist"], "unit": "x"}
        )
    if before is not None:
        measurements.append(
            {"name": "full_now_over_before", "value": before["ratio_now_over_before"],
             "unit": "x", "aim": "<= 0.4", "revision": args.before},
        )  # fmt: skip
    command = f".venv/bin/python benchmarks/speed.py --repeat {args.repeat} --jobs {args.jobs}"
    command += "" if args.slice == 1000 else f" --slice {args.slice}"
    command += " --skip-main-job" if args.skip_main_job else ""
    command += " --full" if args.full else ""
    command += f" --before {args.before}" if args.before else ""
    record: dict[str, Any] = {
        "name": "speed",
        "value": job["ratio_spyre_ci_over_xdist"] if job else start["ratio_cold_over_warm"],
        "unit": "x (main job wall time, spyre-ci / pytest -n 2 with the plugin)"
        if job
        else "x (shard start to first result, cold / warm)",
        "command": command,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}",
        "measurements": measurements,
        "shard_start": start,
        "failing_vs_passing": failing,
        "main_job": job,
        "slice": sliced,
        "scaling": scaled,
        "full": full,
        "before": before,
        "notes": (
            f"load average (1, 5, 15 min) {load_before} before, {load()} after; "
            f"{time.perf_counter() - started:.0f} s in all; medians; wall times of whole "
            "commands (spyre-ci: plan, shards, verify, History, exports; xdist: pytest alone)"
        ),
    }
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("measurements", "notes")}, indent=2))
    return 0


def _full_outcomes(work: Path) -> dict[str, str]:
    report = work / "out-full0" / "run.json"
    if not report.exists():
        return {}
    results = json.loads(report.read_text()).get("results", [])
    return {r["id"]: r.get("status") for r in results if "id" in r}


if __name__ == "__main__":
    raise SystemExit(main())
