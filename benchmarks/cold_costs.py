"""What a test process started cold, and the selector reading Python files, cost in CPU.

    .venv/bin/python benchmarks/cold_costs.py                        # this checkout
    .venv/bin/python benchmarks/cold_costs.py --root OTHER_CHECKOUT  # another version

Three figures, each the process CPU time (user + system) of a child process that imports the
code of `--root` (this checkout by default), best of `--repeat`:
  cold_shard_s     `python -m pytest` with the suites plugin on 3 bundled variant ids (the
                   softsign ones): imports, expansion, collection and the 3 tests, as a shard
                   process started without the warm runner pays
  expansion_s      expanding the bundled specs in full, once torch and its test databases
                   are imported (what the warm runner's zygote pays before its first fork)
  python_spans_s   the selector's reading of the definitions of every Python file of the
                   installed torch (what `plan` pays for each Python file a change touches)
CPU time, not wall time: the machine is shared. Writes nothing; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IDS = [
    "compile::compile::nn.functional.softsign::float32",
    "ops::backward::nn.functional.softsign::bfloat16",
    "ops::backward::nn.functional.softsign::float16",
]

EXPANSION = """
import time
from suites.expand import expand, load_suites_each
import suites.databases as d
from suites.templates import tracking
tracking.install()
for db in ("op_db", "python_ref_db", "module_db"):
    d.load_db(db)
specs, _ = load_suites_each(None)
t = time.process_time()
for spec in specs:
    expand([spec])
print(time.process_time() - t)
"""

SPANS = """
import pathlib, time, torch
from selector import definitions
files = sorted(pathlib.Path(torch.__file__).parent.rglob("*.py"))
texts = [f.read_text(errors="replace") for f in files]
t = time.process_time()
for text in texts:
    definitions._python_spans(text)
print(time.process_time() - t)
"""


def _child_cpu(command: list[str], env: dict[str, str], cwd: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, env=env, cwd=cwd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _printed(code: str, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout to measure")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many (default 3)")
    args = parser.parse_args()
    root = args.root.resolve()
    env = {**os.environ, "PYTHONPATH": str(root), "SPYRE_CI_ZYGOTE": "off"}
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "ids.txt").write_text("\n".join(IDS) + "\n")
        shard = [
            sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", ".",
            "-p", "suites.pytest_plugin", "-p", "no:cacheprovider", "-q",
            "--spyre-ids", "ids.txt", "--spyre-results", "results.jsonl",
        ]  # fmt: skip
        cold = min(_child_cpu(shard, env, work) for _ in range(args.repeat))
    expansion = min(_printed(EXPANSION, env) for _ in range(args.repeat))
    spans = min(_printed(SPANS, env) for _ in range(args.repeat))
    print(
        json.dumps(
            {
                "root": str(root),
                "cold_shard_s": round(cold, 2),
                "expansion_s": round(expansion, 2),
                "python_spans_s": round(spans, 2),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
