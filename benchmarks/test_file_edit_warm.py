"""A change to a reused upstream test file, run as a user runs it: first run and again, warm
runner on (the default) and off, side by side in one run.

    .venv/bin/python benchmarks/test_file_edit_warm.py [--repeat 3] [--out FILE]
        [--also NAME=PYTHONPATH ...]

The change is a one-line edit of `test/test_tiny_ops.py` in the upstream-like tree
(`tests/suites/upstream_like`, TORCH_ROOT), which breaks `TestTiny::test_ones`: every run must
exit 1 with that one new failure. For each mode, in a fresh state directory: run 1 (no
zygote yet), then the same change again `--repeat` times, each a new `spyre-ci` process (what
a second push of it costs). Modes: `warm` (the defaults), `cold` (`SPYRE_CI_ZYGOTE=0`), and
each `--also NAME=DIR` (the same command with `PYTHONPATH=DIR`: an older checkout of the
project, to compare code side by side). Wall time of the whole command; medians of the
repeats; the load average with every run. Records `benchmarks/results/test_file_edit_warm.json`.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "test_file_edit_warm.json"
TREE = REPO / "tests" / "suites" / "upstream_like"
SPEC = TREE / "tiny.yaml"
FILE = "test/test_tiny_ops.py"
LINE = "self.assertEqual(torch.ones(3, device=device).sum().item(), 3.0)"
BROKEN = "tiny::test_tiny_ops::TestTiny::test_ones::none"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def spyre_ci(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m workflows ARGS`, started in the checkout it should import (`-m` puts the
    working folder first on sys.path): $PYTHONPATH's when set, else this one."""
    command = [sys.executable, "-m", "workflows", *args]
    where = env.get("PYTHONPATH") or str(REPO)
    return subprocess.run(command, env=env, cwd=where, capture_output=True, text=True, timeout=900)


def one_run(diff: Path, inventory: Path, env: dict[str, str], out: Path) -> dict[str, Any]:
    began = time.monotonic()
    done = spyre_ci(
        ["run", "--diff", str(diff), "--inventory", str(inventory), "--specs", str(SPEC),
         "--holdout", "0", "--jobs", "1", "--no-progress", "--out", str(out)],
        env,
    )  # fmt: skip
    wall = time.monotonic() - began
    record = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    new = sorted(r["id"] for r in record.get("results", []) if r.get("classification") == "new")
    if done.returncode != 1 or new != [BROKEN]:
        raise SystemExit(f"unexpected verdict (exit {done.returncode}, new {new}):\n{done.stdout}")
    return {"wall_s": round(wall, 2), "exit": done.returncode, "load": load()}


def mode(
    name: str, base_env: dict[str, str], diff: Path, inventory: Path, repeat: int, work: Path
) -> dict[str, Any]:
    env = {**base_env, "SPYRE_CI_STATE_DIR": str(work / name / "state")}
    runs = [one_run(diff, inventory, env, work / name / f"out{i}") for i in range(repeat + 1)]
    again = [r["wall_s"] for r in runs[1:]]
    print(f"{name}: first {runs[0]['wall_s']} s, again {again}", file=sys.stderr)
    return {"first_s": runs[0]["wall_s"], "again_s": statistics.median(again), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs after the first (3)")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument(
        "--also", action="append", default=[], metavar="NAME=DIR",
        help="another mode: the same runs with PYTHONPATH=DIR (an older checkout)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="test-file-edit-"))
    text = (TREE / FILE).read_text()
    diff = work / "edit.diff"
    diff.write_text(
        "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                text.replace(LINE, LINE.replace("3.0", "4.0"), 1).splitlines(keepends=True),
                f"a/{FILE}",
                f"b/{FILE}",
            )
        )
    )
    env = {**os.environ, "TORCH_ROOT": str(TREE)}
    env.pop("SPYRE_CI_ZYGOTE", None)
    inventory = work / "inventory.json.gz"
    built = spyre_ci(["inventory", "--specs", str(SPEC), "--out", str(inventory)], env)
    if built.returncode != 0:
        raise SystemExit(built.stderr)
    modes = {
        "warm": mode("warm", env, diff, inventory, args.repeat, work),
        "cold": mode("cold", {**env, "SPYRE_CI_ZYGOTE": "0"}, diff, inventory, args.repeat, work),
    }
    for also in args.also:
        name, _, path = also.partition("=")
        modes[name] = mode(name, {**env, "PYTHONPATH": path}, diff, inventory, args.repeat, work)
    result = {
        "name": "test_file_edit_warm",
        "value": modes["warm"]["again_s"],
        "unit": "s, wall, a second run of a one-line edit of a reused upstream test file "
        "(1 selected variant, exit 1 with its new failure), warm runner on",
        "modes": modes,
        "command": " ".join(["python benchmarks/test_file_edit_warm.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_after": load(),
        },
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "modes"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
