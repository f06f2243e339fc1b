"""What tracing costs a run: the same ids run untraced and traced, in alternation.

Modes: `off` (no tracer), `fast` (the default recorder: cProfile and the profiler's raw
events, every variant traced), `setprofile` (the reference recorder, every variant traced),
`refresh` (what a production run does on a machine with a fresh trace: the default share,
5 %, traced). Figures are the test processes' CPU seconds (user + system, which a loaded
machine disturbs less than wall time) and the summed test durations, as ratios to `off`.

    .venv/bin/python benchmarks/trace_cost.py --count 200 --rounds 2 \
        --record benchmarks/results/trace_cost.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from suites.model import Expectation, Inventory  # noqa: E402
from workflows.runner.impact_tracer import IDS_VAR, MODE_VAR, OUT_VAR  # noqa: E402
from workflows.runner.shard_runner import Limits, run_shard  # noqa: E402
from workflows.tracing.trace_store import TRACE_PLUGIN, refresh_ids  # noqa: E402

MODES = ("off", "fast", "setprofile", "refresh")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="variants (default 200)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations (default 2)")
    parser.add_argument("--inventory", type=Path, default=None, help="an Inventory file")
    parser.add_argument("--record", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    if args.inventory is not None:
        inventory = Inventory.load(args.inventory)
    else:
        from suites.inventory import build_inventory

        inventory = build_inventory(None)
    runnable = [v.id for v in inventory.variants if v.expectation is not Expectation.SKIP]
    ids = sorted(random.Random(1).sample(runnable, min(args.count, len(runnable))))
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="trace-cost-") as tmp:
        for rnd in range(args.rounds):
            for mode in MODES:
                work = Path(tmp) / f"{mode}{rnd}"
                work.mkdir()
                env: dict[str, str] | None = None
                traced = 0
                if mode != "off":
                    env = {"PYTEST_PLUGINS": TRACE_PLUGIN, OUT_VAR: str(work / "t.jsonl")}
                    if mode == "refresh":
                        chosen = refresh_ids(ids, _all_traced(ids), {}, 0.05, f"round-{rnd}")
                        (work / "ids.txt").write_text("\n".join(chosen) + "\n")
                        env[IDS_VAR] = str(work / "ids.txt")
                        traced = len(chosen)
                    else:
                        env[MODE_VAR] = mode
                        traced = len(ids)
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                began = time.monotonic()
                # Cold (warm=False): a process forked from the warm zygote is not this
                # process's child, and its CPU would not be counted.
                result = run_shard(
                    mode, ids, work, limits=Limits(test_timeout_s=120), env=env, warm=False
                )
                wall = time.monotonic() - began
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                row = {
                    "mode": mode,
                    "round": rnd,
                    "traced": traced,
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "test_s": round(sum(o.duration_s for o in result.outcomes), 2),
                    "outcomes": len(result.outcomes),
                    "load_1min": round(os.getloadavg()[0], 2),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    figures = _figures(rows)
    print(json.dumps(figures, indent=1))
    if args.record is not None:
        record = {
            "name": "trace_cost",
            "value": figures["refresh"]["test_time_ratio"],
            "unit": "summed test time with tracing as production does it (untraced and "
            "stale variants plus a 5 % rotating share) / untraced, same ids",
            "command": "python benchmarks/trace_cost.py " + " ".join(sys.argv[1:]),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
            f"{platform.python_version()}; load average during the run in each row "
            "(other work shared the machine)",
            "variants": len(ids),
            "ratios": figures,
            "rows": rows,
            "notes": "`fast` and `setprofile` trace every variant (what `spyre-ci impact-map` "
            "does); a production run traces only what lacks a fresh trace and a rotating "
            "share, which is `refresh` here.",
        }
        args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


def _all_traced(ids: list[str]) -> object:
    """A trace that knows every id (so only the rotating share is traced)."""
    import selector

    return selector.ImpactMap(
        functions=dict.fromkeys(ids, frozenset()), aten_ops=dict.fromkeys(ids, frozenset())
    )


def _figures(rows: list[dict[str, object]]) -> dict[str, dict[str, float]]:
    def total(mode: str, key: str) -> float:
        return sum(float(r[key]) for r in rows if r["mode"] == mode)  # type: ignore[arg-type]

    base_cpu, base_test = total("off", "cpu_s"), total("off", "test_s")
    return {
        mode: {
            "cpu_ratio": round(total(mode, "cpu_s") / base_cpu, 3) if base_cpu else 0.0,
            "test_time_ratio": round(total(mode, "test_s") / base_test, 3) if base_test else 0.0,
        }
        for mode in MODES
    }


if __name__ == "__main__":
    raise SystemExit(main())
