"""Runner overhead per variant: the pytest plugin against calling the templates directly.

    python benchmarks/suites_overhead.py [--variants 300] [--rounds 2]

In one process (imports warm): time the templates called directly over N passing variants,
then `pytest.main` with the plugin over the same ids, minus its `--collect-only` time.
Overhead = (plugin run - collection - direct) / direct. Best of `--rounds` for each figure.
Writes benchmarks/results/suites_overhead.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variants", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from suites.expand import expand, load_suites
    from suites.model import Expectation
    from suites.pytest_plugin import DEVICE
    from suites.templates import Context, get_template

    planned = [
        p
        for p in expand(load_suites()).planned
        if p.variant.suite == "ops" and p.variant.expectation is Expectation.PASS
    ]
    # Every n-th variant: a spread of templates and ops, not just the first op's family.
    step = max(1, len(planned) // args.variants)
    chosen = planned[::step][: args.variants]

    def direct() -> float:
        start = time.perf_counter()
        for plan in chosen:
            ctx = Context(
                atol=plan.precision.atol if plan.precision else None,
                rtol=plan.precision.rtol if plan.precision else None,
                max_samples=plan.max_samples,
                template=plan.variant.template,
            )
            # A failing variant costs the same both ways.
            with contextlib.suppress(Exception):
                get_template(plan.variant.template)(plan.info, plan.dtype, DEVICE, ctx)
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory() as work:
        ids = Path(work) / "ids.txt"
        ids.write_text("\n".join(p.variant.id for p in chosen) + "\n")
        base = [
            "-p",
            "suites.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            "-o",
            "addopts=",
            "--spyre-ids",
            str(ids),
            "--rootdir",
            work,
        ]

        def plugin(*extra: str) -> float:
            start = time.perf_counter()
            pytest.main([*base, *extra])
            return time.perf_counter() - start

        direct()  # warm-up: lazy initialisation of kernels and sample functions
        d_runs, p_runs, c_runs = [], [], []
        for _ in range(args.rounds):
            d_runs.append(direct())
            p_runs.append(
                plugin(
                    "--spyre-results",
                    str(Path(work) / "r.jsonl"),
                    "--junitxml",
                    str(Path(work) / "r.xml"),
                )
            )
            c_runs.append(plugin("--collect-only"))
    d, p, c = min(d_runs), min(p_runs), min(c_runs)
    overhead = (p - c - d) / d
    result = {
        "name": "suites_overhead",
        "value": round(100 * overhead, 1),
        "unit": "% per variant",
        "command": f"python benchmarks/suites_overhead.py --variants {args.variants} "
        f"--rounds {args.rounds}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus (shared), python "
        f"{platform.python_version()}",
        "notes": "plugin run (with --spyre-results and --junitxml) minus its collection, "
        "against direct template calls on the same passing ops variants; aim < 10 %",
        "variants": len(chosen),
        "direct_s": round(d, 3),
        "plugin_run_s": round(p, 3),
        "plugin_collect_s": round(c, 3),
        "per_variant_direct_ms": round(1000 * d / len(chosen), 2),
        "per_variant_overhead_ms": round(1000 * (p - c - d) / len(chosen), 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    out = REPO / "benchmarks" / "results" / "suites_overhead.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
