"""The default test run and CI's whole run, timed in a fresh clone as CI runs them.

    .venv/bin/python benchmarks/test_suite.py [--in-place] [--out FILE] [--durations FILE]

By default: `git clone` of this checkout's HEAD into a temporary folder, then `bash .ci/run`
there (a new venv from the repository's own files, lint, types, the README's test command,
then the `long` tier), with fresh `XDG_STATE_HOME` and `XDG_CACHE_HOME`. `--in-place`: the two
pytest runs only, in this checkout with its venv (no install, no lint). Parsed from pytest's
own summary lines: each tier's test count and seconds, and its 20 slowest tests.

Records `benchmarks/results/test_suite.json` (the record it replaces is kept whole under
`before`) and the slowest tests in `benchmarks/results/test_durations.txt`, with the machine's
speed probe (`benchmarks/machine.py`): a record is read beside the machine it ran on.
Exits 1 when a tier failed (nothing recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import machine  # noqa: E402 - run as a script from the checkout

RESULT = REPO / "benchmarks" / "results" / "test_suite.json"
DURATIONS = REPO / "benchmarks" / "results" / "test_durations.txt"
AIM_S = 300.0  # the default run, on a quiet 2-core machine
# pytest's last line: "==== 1847 passed, 1 warning in 153.68s (0:02:33) ====" (no "=" with -q).
_SUMMARY = re.compile(
    r"^(?:=+ )?(?P<counts>\d+ (?:passed|failed|error|skipped|deselected)[^\n]*?) "
    r"in (?P<seconds>[\d.]+)s\b[^\n]*$",
    re.M,
)
_SLOW_HEADER = re.compile(r"^=+ slowest \d+ durations =+$")
_SLOW_LINE = re.compile(r"^\d+\.\d+s (?:call|setup|teardown) ")


def tiers(output: str) -> list[dict[str, Any]]:
    """Each pytest run in `output`, in order: its counts, seconds and slowest tests."""
    slowest: list[list[str]] = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if _SLOW_HEADER.match(line):
            block = []
            for later in lines[i + 1 :]:
                if not _SLOW_LINE.match(later):
                    break
                block.append(later)
            slowest.append(block)
    found = []
    for i, match in enumerate(_SUMMARY.finditer(output)):
        found.append(
            {
                "counts": match.group("counts"),
                "seconds": float(match.group("seconds")),
                "slowest": slowest[i] if i < len(slowest) else [],
            }
        )
    return found


def run(in_place: bool) -> tuple[str, float, int, str]:
    """(output, wall seconds, exit code, the command as a user would type it)."""
    env = {**os.environ}
    env.pop("PYTEST_ADDOPTS", None)
    if in_place:
        python = str(REPO / ".venv" / "bin" / "python")
        commands = [
            [python, "-m", "pytest", "--durations=20"],
            [python, "-m", "pytest", "--durations=20", "-m", "long"],
        ]
        where, shown = REPO, ".venv/bin/python -m pytest --durations=20 [-m long]"
    else:
        where = Path(tempfile.mkdtemp(prefix="spyre-ci-suite-")) / "ci"
        subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True)
        env["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="state-")
        env["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="cache-")
        commands = [["bash", ".ci/run"]]
        shown = (
            f"git clone {REPO} /tmp/ci && cd /tmp/ci && XDG_STATE_HOME=$(mktemp -d) "
            "XDG_CACHE_HOME=$(mktemp -d) bash .ci/run"
        )
    output, code = "", 0
    started = time.perf_counter()
    for command in commands:
        done = subprocess.run(
            command, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        output += done.stdout
        code = code or done.returncode
    wall = time.perf_counter() - started
    if not in_place:
        shutil.rmtree(where.parent, ignore_errors=True)
    return output, wall, code, shown


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--in-place", action="store_true", help="this checkout, no clone")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--durations", type=Path, default=DURATIONS)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    before = machine.describe()
    print(f"machine: {json.dumps(before)}", file=sys.stderr)
    output, wall, code, shown = run(args.in_place)
    found = tiers(output)
    if code != 0 or len(found) < 2:
        sys.stderr.write(output[-5000:])
        print(f"\nthe run exited {code} with {len(found)} pytest summaries: not recorded",
              file=sys.stderr)  # fmt: skip
        return 1
    default, long = found[0], found[1]
    probe = before["probe_s"]
    record: dict[str, Any] = {
        "name": "test_suite",
        "what": "the default test run (the README's test command) and the `long` tier CI "
        "runs after it" + ("" if args.in_place else ", in a fresh clone through `bash .ci/run`"),
        "command": ".venv/bin/python benchmarks/test_suite.py" + (" --in-place" * args.in_place),
        "runs": shown,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        # The probe again after: a shared machine's speed moves within the hour.
        "machine": {**before, "load_after": machine.load(), "probe_after_s": machine.probe_s()},
        "value": default["seconds"],
        "unit": f"s of pytest for the README's test command ({default['counts']})",
        "aim": f"under {AIM_S:.0f} s on a quiet 2-core machine",
        "in_probes": machine.relative(default["seconds"], probe),
        "long_tier_s": long["seconds"],
        "long_tier": long["counts"],
        "total_s": round(wall, 1),
    }
    if args.out.exists():
        replaced = json.loads(args.out.read_text(encoding="utf-8"))  # git keeps older ones
        record["before"] = {k: v for k, v in replaced.items() if k != "before"}
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    lines = [
        f"# The 20 slowest tests of each tier ({record['command']}).",
        f"# runs: {shown}",
        f"# date: {record['date']}, commit {commit}, {json.dumps(before)}",
        f"# default run: {default['counts']} in {default['seconds']}s",
        *default["slowest"],
        "",
        f"# long tier (-m long): {long['counts']} in {long['seconds']}s",
        *long["slowest"],
    ]
    args.durations.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in record.items() if k != "before"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
