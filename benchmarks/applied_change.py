"""What applying a change costs: the README's main job with its change applied against the
same plan without it, both in one run of this script.

    .venv/bin/python benchmarks/applied_change.py [--repeat 3] [--jobs 2]

Two changes of `torch.nn.functional.glu`, each run both ways on the default path (bundled
Inventory, shipped trace, warm runner on, `--jobs`): the shipped example
(`examples/changes/glu_batch_check.patch`, which breaks 11 variants: with the change applied
the run also reruns them and runs them on the base torch, the A/B comparison) and a
behaviour-preserving edit of the same lines (same selection, nothing fails: the overlay's own
cost). "Without" is `--no-apply`: the same diff, so the same plan, on the torch as installed.
Every run is a whole `spyre-ci run` command in a fresh state directory that shares only the
Inventory cache (each builds its zygote). Runs alternate with and without; the medians are
recorded in `benchmarks/results/applied_change.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "applied_change.json"
BREAKING = REPO / "examples" / "changes" / "glu_batch_check.patch"


def same_behaviour_patch(work: Path) -> Path:
    """The shipped example's lines, edited without changing what glu does."""
    text = BREAKING.read_text()
    head = text.split("@@ -1802")[0]
    body = (
        "@@ -1802,7 +1802,7 @@ def glu(input: Tensor, dim: int = -1) -> Tensor:\n"
        '     """\n'
        "     if has_torch_function_unary(input):\n"
        "         return handle_torch_function(glu, (input,), input, dim=dim)\n"
        "-    if input.dim() == 0:\n"
        "+    if not input.dim():\n"
        "         raise RuntimeError(\n"
        '             "glu does not support scalars because halving size must be even"\n'
        "         )\n"
    )
    path = work / "glu_same_behaviour.patch"
    path.write_text(head + body)
    return path


def run(patch: Path, apply: bool, work: Path, inventories: Path, jobs: int) -> dict[str, object]:
    state = Path(tempfile.mkdtemp(prefix="state-", dir=work))
    (state / "inventories").symlink_to(inventories)
    out = Path(tempfile.mkdtemp(prefix="out-", dir=work))
    command = [sys.executable, "-m", "workflows", "run", "--diff", str(patch), "--out", str(out)]
    command += ["--jobs", str(jobs), "--no-progress"] + ([] if apply else ["--no-apply"])
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    env.pop("SPYRE_CI_ZYGOTE", None)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    record = json.loads((out / "run.json").read_text())
    new = sum(1 for r in record["results"] if r["classification"] == "new")
    shutil.rmtree(out, ignore_errors=True)
    return {
        "wall_s": round(wall, 2),
        "exit": done.returncode,
        "ran": len(record["results"]),
        "new_failures": new,
        "tested": record["environment"].get("tested"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spyre-ci-applied-"))
    inventories = work / "inventories"
    inventories.mkdir()
    cases = {"breaking": BREAKING, "same_behaviour": same_behaviour_patch(work)}
    # A first run builds the shared Inventory cache; it is not measured.
    run(cases["same_behaviour"], False, work, inventories, args.jobs)
    runs: dict[str, dict[str, list[dict[str, object]]]] = {
        name: {"applied": [], "not_applied": []} for name in cases
    }
    for _ in range(args.repeat):
        for name, patch in cases.items():
            for apply in (True, False):
                result = run(patch, apply, work, inventories, args.jobs)
                runs[name]["applied" if apply else "not_applied"].append(result)
                print(name, "applied" if apply else "not applied", result, flush=True)
    figures = {}
    for name, sides in runs.items():
        medians = {
            side: statistics.median(float(str(r["wall_s"])) for r in results)
            for side, results in sides.items()
        }
        figures[name] = {
            "value": round(medians["applied"] / medians["not_applied"], 3),
            "unit": "x (median wall time, change applied / same plan not applied)",
            "applied_median_s": medians["applied"],
            "not_applied_median_s": medians["not_applied"],
            "runs": sides,
        }
    record = {
        "what": "the main job with its change applied vs the same plan without it",
        "command": f"python benchmarks/applied_change.py --repeat {args.repeat} --jobs {args.jobs}",
        "date": dt.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "notes": "2-core shared machine; every run a whole command with its own zygote",
        },
        "aim": "<= 1.2x",
        **figures,
    }
    RESULT.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v["value"] for k, v in figures.items()}, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
