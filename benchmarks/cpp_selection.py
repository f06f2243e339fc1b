"""How many variants a C++ kernel change selects, before the kernel map and with it.

The Inventory is the one `spyre-ci select` uses by default (the cached Inventory of the
installed torch and the bundled specs, built on first use: about half a minute), or
`--inventory FILE`. "before" is that Inventory without its kernel map (as built before the
Inventory carried one, so the Scout falls back to kernel-name folding), "after" with it (an
Inventory without one gets the map of the installed torch's native_functions.yaml, what
`spyre-ci inventory` now adds). The changes are edits of stand-ins for upstream's C++ files
(`tests/selector/cpp_sources.py`: upstream's definitions, bodies of our own), planned
  source   with the old text of the file at hand (GitHub configured: `located: source`);
  hunks    from the diff alone, with git's default function context after `@@`;
each with the shipped trace (what `spyre-ci select` joins by default) and without
(`--no-trace`). Figures are counts of selected variants (the holdout runs on top, apart).
Writes benchmarks/results/cpp_selection.json.
Run: .venv/bin/python benchmarks/cpp_selection.py [--inventory FILE.json.gz]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from selector import ImpactMap, InventoryIndex, plan  # noqa: E402
from suites.model import Inventory  # noqa: E402
from tests.selector import cpp_sources as cs  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "cpp_selection.json"
COMMAND = ".venv/bin/python benchmarks/cpp_selection.py"

# (name, path, old text, the one text replaced, its replacement); the first two are the
# headline: a Distance.cpp edit and a UnaryOps.cpp edit.
EDITS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "Distance.cpp: inside _euclidean_dist (a kernel no variant tests by name)",
        cs.DISTANCE,
        cs.DISTANCE_CPP,
        "Tensor x1_norm = x1.pow(2).sum(-1, true);",
        "Tensor x1_norm = x1.square().sum(-1, true);",
    ),
    (
        "UnaryOps.cpp: inside TORCH_IMPL_FUNC(special_ndtri_out)",
        cs.UNARY_OPS,
        cs.UNARY_OPS_CPP,
        "  special_ndtri_stub(device_type(), *this);",
        "  special_ndtri_stub(device_type(), *this);\n  TORCH_INTERNAL_ASSERT(is_ok());",
    ),
    (
        "UnaryOps.cpp: a file-local helper (unary_op_impl_with_complex_to_float_out)",
        cs.UNARY_OPS,
        cs.UNARY_OPS_CPP,
        "auto iter = TensorIterator::unary_op(complex_result, self);",
        "auto iter = TensorIterator::unary_op(complex_result, self, /*check=*/true);",
    ),
    (
        "UnaryOps.cpp: the CREATE_UNARY_FLOAT_META_FUNC macro",
        cs.UNARY_OPS,
        cs.UNARY_OPS_CPP,
        "    build_borrowing_unary_float_op(maybe_get_output(), self); \\",
        "    build_unary_float_op(maybe_get_output(), self);           \\",
    ),
    (
        "cpu/UnaryOpsKernel.cpp: sigmoid_kernel (REGISTER_DISPATCH(sigmoid_stub, ...))",
        cs.UNARY_KERNEL,
        cs.UNARY_KERNEL_CPP,
        "return 1 / (1 + std::exp(-a));",
        "return scalar_t(1) / (1 + std::exp(-a));",
    ),
    (
        "cpu/DistanceOpsKernel.cpp: Dist::run_parallel_cdist (a struct method)",
        cs.DISTANCE_KERNEL,
        cs.DISTANCE_KERNEL_CPP,
        "out[i * cols + j] = std::pow(sum, 1 / p);",
        "out[i * cols + j] = std::pow(sum, scalar_t(1) / p);",
    ),
)


def _inventory(given: str | None) -> tuple[Inventory, str]:
    if given:
        return Inventory.load(given), given
    from workflows.settings import Settings
    from workflows.stores.inventory_cache import default_inventory

    path = default_inventory(Settings.from_env().state_dir)
    return Inventory.load(path), f"{path} (the cached Inventory `spyre-ci select` uses)"


def _one(
    index: InventoryIndex, path: str, old: str, before: str, after: str, form: str, trace: Any
) -> dict[str, Any]:
    change = cs.cpp_change(path, old, before, after, form=form)
    start = time.perf_counter()
    p = plan(change, index, impact=trace)
    took = time.perf_counter() - start
    fact = p.facts.paths[0]
    return {
        "decision": p.decision,
        "selected": p.totals.selected,
        "holdout": p.totals.holdout,
        "ops": list(p.facts.op_names),
        "why": p.fallback or (p.facts.ops[0].evidence[0] if p.facts.ops else ""),
        "unnamed": list(fact.unnamed),
        "plan_s": round(took, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", help="the Inventory (default: the cached one)")
    args = parser.parse_args(argv)
    inventory, source = _inventory(args.inventory)
    kernels_from = "the Inventory"
    if not inventory.kernels:
        inventory = replace(inventory, kernels=cs.installed_kernels())
        kernels_from = "the installed torch's native_functions.yaml (the Inventory had none)"
    before = InventoryIndex.build(replace(inventory, kernels={}))
    after = InventoryIndex.build(inventory)
    from workflows.tracing.traces import shipped_trace

    shipped: ImpactMap | None = shipped_trace(inventory.torch_version)
    traces = {"none": None, "shipped": shipped} if shipped is not None else {"none": None}
    rows = []
    for name, path, old, was, now in EDITS:
        for form in ("source", "hunks"):
            for trace_name, trace in traces.items():
                row: dict[str, Any] = {
                    "edit": name,
                    "path": path,
                    "located": form,
                    "trace": trace_name,
                }
                diff_form = "source" if form == "source" else "git"
                for label, index in (("before", before), ("after", after)):
                    row[label] = _one(index, path, old, was, now, diff_form, trace)
                rows.append(row)
                print(
                    f"{name[:60]:60} {form:6} trace={trace_name:7} "
                    f"{row['before']['selected']:>6} -> {row['after']['selected']:>6} "
                    f"({row['after']['decision']})",
                    file=sys.stderr,
                )
    eligible = len(before.runnable)
    headline = [
        {
            "edit": r["edit"],
            "before": r["before"]["selected"],
            "after": r["after"]["selected"],
            "after_ops": r["after"]["ops"],
        }
        for r in rows
        if r["edit"] in (EDITS[0][0], EDITS[1][0])
        and r["located"] == "source"
        and r["trace"] == ("shipped" if shipped is not None else "none")
    ]
    data = {
        "name": "cpp_selection",
        "value": headline[0]["after"],
        "unit": (
            f"variants selected for the Distance.cpp edit (before the kernel map: "
            f"{headline[0]['before']:,}, a full run), old source at hand, shipped trace"
        ),
        "command": COMMAND,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}; shared, load average "
        f"{os.getloadavg()[0]:.1f} while measured",
        "notes": (
            "before = the same Inventory without its kernel map (the Scout as it was: a C++ "
            "definition named only by folding its name), after = with the map. 'source': the "
            "old text of the file at hand (GitHub configured); 'hunks': the diff alone with "
            "git's default function context. The C++ files are stand-ins with upstream's "
            "definitions (tests/selector/cpp_sources.py). The holdout runs on top of "
            "'selected', apart."
        ),
        "inventory": source,
        "kernel_map_from": kernels_from,
        "torch_version": inventory.torch_version,
        "variants": len(inventory.variants),
        "eligible": eligible,
        "kernels": len(inventory.kernels),
        "headline": headline,
        "rows": rows,
    }
    RESULT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(headline, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
