"""Where the default test run's CPU goes, by kind of process.

    .venv/bin/python benchmarks/test_suite_cpu.py [--out FILE] [-- PYTEST_ARGS...]

Runs the README's test command (`python -m pytest`, this checkout, its venv) while it reads
every process's CPU time from /proc four times a second, then sums it by kind: the xdist
workers (in-process tests and their collection), zygotes (warm-ups: `zygote_process`), the
test processes forked from them, cold pytest processes, `spyre-ci` subprocesses by command,
other `python -c` subprocesses, servers (redis, the relay's `serve`). A process that lives less
than a quarter of a second may be missed; the sum is a floor, and the share of each kind is what
to read. Also: how many zygotes warmed up and the keys (folders) warmed more than once.

Records `benchmarks/results/test_suite_cpu.json` with the command, the machine
(`benchmarks/machine.py`) and the run's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import machine  # noqa: E402 - run as a script from the checkout

RESULT = REPO / "benchmarks" / "results" / "test_suite_cpu.json"
_TICK = os.sysconf("SC_CLK_TCK")
_ZYGOTE_FOLDER = re.compile(r"/([0-9a-f]{16})/socket ")


def _processes() -> dict[tuple[int, int], tuple[float, str]]:
    """(pid, start tick) -> (CPU seconds so far, command line) of every readable process."""
    seen: dict[tuple[int, int], tuple[float, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            raw = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        seen[(int(name), int(fields[19]))] = (
            cpu,
            raw.replace(b"\0", b" ").decode(errors="replace"),
        )
    return seen


def kind(command: str) -> str:
    """The kind of process a command line is (see the module's docstring)."""
    if "workflows.runner.zygote_process" in command:
        return "zygotes (warm-ups, keepers)"
    if "workflows.cli.warm_process" in command:
        return "warm spyre-ci processes and their forks (runs)"
    if "exec(eval(sys.stdin.readline()))" in command:
        return "xdist workers (in-process tests, collection)"
    if " -m pytest " in command + " " and "--spyre-ids" in command:
        return "test processes (forked or cold)"
    if " -m pytest" in command:
        return "other pytest processes"
    words = command.split()
    for i, word in enumerate(words):
        if word.endswith(("spyre-ci", "workflows/__main__.py")) or (
            word == "workflows" and i and words[i - 1] == "-m"
        ):
            sub = next((w for w in words[i + 1 :] if not w.startswith("-")), "?")
            return f"spyre-ci {sub}"
    if "redis-server" in command:
        return "redis-server"
    if " -c " in command:
        return "python -c subprocesses"
    return "other"


def sample(stop: threading.Event, every: float) -> dict[tuple[int, int], tuple[float, str]]:
    last: dict[tuple[int, int], tuple[float, str]] = {}
    mine = os.getpid()
    while not stop.is_set():
        for key, (cpu, command) in _processes().items():
            if key[0] == mine:
                continue
            before = last.get(key)
            last[key] = (max(cpu, before[0] if before else 0.0), command or (before or (0, ""))[1])
        stop.wait(every)
    return last


def summarize(seen: dict[tuple[int, int], tuple[float, str]]) -> dict[str, Any]:
    by_kind: Counter[str] = Counter()
    count: Counter[str] = Counter()
    warmed: Counter[str] = Counter()
    what_warmed: dict[str, str] = {}
    other: Counter[str] = Counter()
    for cpu, command in seen.values():
        what = kind(command)
        by_kind[what] += cpu
        count[what] += 1
        folder = _ZYGOTE_FOLDER.search(command)
        if what.startswith("zygotes") and folder and cpu > 1.0:  # a warm-up, not a keeper
            warmed[folder.group(1)] += 1
            # Where (its place) and what (plugin, specs): the command less its padding.
            what_warmed[folder.group(1)] = command.split(" --pad=")[0].split(" -m ", 1)[-1]
        if what == "other":
            other[" ".join(command.split()[:3])[:120]] += cpu
    total = sum(by_kind.values())
    return {
        "cpu_s": round(total, 1),
        "by_kind": {
            k: {"cpu_s": round(v, 1), "share": round(v / total, 3), "processes": count[k]}
            for k, v in by_kind.most_common()
        },
        "zygote_warm_ups": sum(warmed.values()),
        "zygote_keys_warmed_again": {
            k: {"times": n, "zygote": what_warmed[k]} for k, n in warmed.items() if n > 1
        },
        "other_top": {k: round(v, 1) for k, v in other.most_common(8)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    args = parser.parse_args(argv)
    command = [str(REPO / ".venv" / "bin" / "python"), "-m", "pytest", "-q", *args.pytest_args]
    before = machine.describe()
    stop = threading.Event()
    result: dict[str, Any] = {}
    sampler = threading.Thread(target=lambda: result.update(seen=sample(stop, 0.25)))
    sampler.start()
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    finally:
        stop.set()
        sampler.join()
    wall = time.monotonic() - started
    summary_line = (done.stdout.strip().splitlines() or [""])[-1]
    print(summary_line)
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-2000:], file=sys.stderr)
        return 1
    summary = summarize(result["seen"])
    record = {
        "name": "test_suite_cpu",
        "what": "the default test run's CPU by kind of process (sampled from /proc; a floor)",
        "command": ".venv/bin/python benchmarks/test_suite_cpu.py",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip(),
        "machine": {**before, "probe_after_s": machine.describe()["probe_s"]},
        "wall_s": round(wall, 1),
        "pytest": summary_line,
        **summary,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
