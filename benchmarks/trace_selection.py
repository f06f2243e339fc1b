"""How many variants an edit of a `Tensor` method in torch/_tensor.py selects, by the trace.

torch/_tensor.py is in a blind area (`core`: every op may depend on it). An edit confined to
function bodies is narrowed through the trace (the variants that ran the edited function);
this measures how often that works in the forms a diff arrives in. The Inventory is the one
`spyre-ci select` uses by default (the cached Inventory of the installed torch and the
bundled specs, or `--inventory FILE`), the trace the shipped one of its torch, the old
source the installed torch's file (as `workflows.stores.sources` finds it). Forms:

  source       the patch applies to the old source at hand (git's form);
  drift-edges  the patch was made against a newer file than the wheel: the first and last
               context line of its hunk differ from the wheel's (an earlier upstream commit
               edited them), so it does not apply as it is;
  drift-inner  the same with the context line next to the change differing;
  hunks        no old source at hand (no installed torch of the Inventory's version, no
               GitHub): git's form with its default function context after `@@`;
  plain        no old source, `diff -u` (no function context).

Each edit changes one line of the installed file (`EDITS`); figures are selected variants
(the holdout runs apart) and the plan's decision. `--label` names the run in the output
(`before` on the selector before a change, `after` on the one after); `--merge FILE` adds
an earlier run's rows as its label. Writes benchmarks/results/trace_selection.json.
Run: .venv/bin/python benchmarks/trace_selection.py [--inventory FILE.json.gz]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from selector import ChangeSet, ImpactMap, InventoryIndex, PlanConfig, plan  # noqa: E402
from suites.model import Inventory  # noqa: E402
from tests.selector.cpp_sources import cpp_change  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "trace_selection.json"
COMMAND = ".venv/bin/python benchmarks/trace_selection.py"
PATH = "torch/_tensor.py"

# (what, the one line of the installed file replaced, its replacement)
EDITS: tuple[tuple[str, str, str], ...] = (
    (
        "Tensor.__rpow__ body",
        "        return torch.pow(other, self)\n",
        "        return torch.pow(other, self, out=None)\n",
    ),
    (
        "Tensor.stft body (the call at its end, 40 lines below the def)",
        "            align_to_window=align_to_window,\n        )\n\n    def istft(",
        "            align_to_window=bool(align_to_window),\n        )\n\n    def istft(",
    ),
    (
        "Tensor.__rdiv__ body",
        "        return self.reciprocal() * other\n",
        "        return other * self.reciprocal()\n",
    ),
    (
        "Tensor.__hash__ body",
        "        return id(self)\n\n    def __dir__",
        "        return hash(id(self))\n\n    def __dir__",
    ),
    (
        "Tensor._typed_storage body",
        "            wrap_storage=untyped_storage, dtype=self.dtype, _internal=True\n",
        "            wrap_storage=untyped_storage, _internal=True, dtype=self.dtype\n",
    ),
    (
        "Tensor.split body",
        "                split_size = int(split_size)\n",
        "                split_size = int(split_size.item())\n",
    ),
    (
        "Tensor.norm body",
        "        return torch.norm(self, p, dim, keepdim, dtype=dtype)\n",
        "        return torch.norm(self, p, dim, keepdim=keepdim, dtype=dtype)\n",
    ),
    (
        "Tensor.__repr__ body",
        "        return torch._tensor_str._str(self, tensor_contents=tensor_contents)\n",
        "        return str(torch._tensor_str._str(self, tensor_contents=tensor_contents))\n",
    ),
    (
        "the wrapper every binary dunder goes through (`wrapped`, nested in the decorator)",
        "            return f(self, *args, **kwargs)\n",
        "            return f(self, *args, **dict(kwargs))\n",
    ),
    (
        "the decorator itself (runs at import, once per method it wraps)",
        "    return wrapped\n\n\n# Should not be used",
        "    return functools.update_wrapper(wrapped, f)\n\n\n# Should not be used",
    ),
    (
        "a class-body line (`__rtruediv__ = __rdiv__`: runs at import)",
        "    __rtruediv__ = __rdiv__\n",
        "    __rtruediv__ = __rdiv__  # noqa\n    __rtruediv__ = __rdiv__\n",
    ),
)
FORMS = ("source", "drift-edges", "drift-inner", "hunks", "plain")


def bundled_inventory(given: str | None) -> tuple[Inventory, str]:
    """The Inventory `given`, else the cached one `spyre-ci select` uses (built on first use)."""
    if given:
        return Inventory.load(given), given
    from workflows.settings import Settings
    from workflows.stores.inventory_cache import default_inventory

    path = default_inventory(Settings.from_env().state_dir)
    return Inventory.load(path), f"{path} (the cached Inventory `spyre-ci select` uses)"


def _drifted(wheel: str, was: str, which: str) -> str:
    """The file a newer upstream has: the wheel with context lines of the edit's hunk changed
    by an earlier commit (`edges`: the first and the last of the three lines above and below
    the edited one; `inner`: the line right above it). A blank line drifts to a comment."""
    lines = wheel.splitlines(True)
    at = len(wheel[: wheel.index(was)].splitlines())  # 0-based index of the edited line
    targets = (
        (at - 3, at + len(was.rstrip("\n").splitlines()) + 2) if which == "edges" else (at - 1,)
    )
    for i in targets:
        text = lines[i].rstrip("\n")
        lines[i] = (text + "  # drift\n") if text.strip() else "# drift\n"
    return "".join(lines)


def change_for(wheel: str, was: str, now: str, form: str) -> ChangeSet:
    """The ChangeSet the selector sees for one edit in one form."""
    if form == "source":
        return cpp_change(PATH, wheel, was, now, form="source")
    if form.startswith("drift-"):
        upstream = _drifted(wheel, was, form.split("-", 1)[1])
        return cpp_change(PATH, upstream, was, now, form="git").with_sources({PATH: wheel})
    return cpp_change(PATH, wheel, was, now, form="git" if form == "hunks" else "plain")


def _one(index: InventoryIndex, change: ChangeSet, trace: ImpactMap | None) -> dict[str, Any]:
    p = plan(change, index, config=PlanConfig(holdout_rate=0.0), impact=trace)
    fact = p.facts.paths[0]
    return {
        "decision": p.decision,
        "selected": p.totals.selected,
        "functions": list(p.facts.functions),
        "fallback": p.fallback,
        "why": next((r for r in p.facts.reasons if r.startswith(PATH)), ""),
        "located": fact.located,
    }


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "selector/"], cwd=REPO, capture_output=True, text=True
    )
    return done.stdout.strip() + (" + uncommitted selector/ changes" if dirty.stdout else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", help="the Inventory (default: the cached one)")
    parser.add_argument("--label", default="after", help="this run's name in the rows")
    parser.add_argument("--merge", help="an earlier run's output whose rows are added")
    parser.add_argument("--out", default=str(RESULT), help="where the figures go")
    args = parser.parse_args(argv)
    inventory, source = bundled_inventory(args.inventory)
    from workflows.stores.sources import installed_source, installed_torch
    from workflows.tracing.traces import shipped_trace

    root, version = installed_torch()
    wheel = installed_source(PATH, root) if root is not None else None
    if wheel is None or version != inventory.torch_version:
        raise SystemExit(f"needs the installed torch {inventory.torch_version} ({PATH})")
    trace = shipped_trace(inventory.torch_version)
    index = InventoryIndex.build(inventory)
    earlier: dict[tuple[str, str], dict[str, Any]] = {}
    runs: dict[str, Any] = {}
    if args.merge:
        merged = json.loads(Path(args.merge).read_text(encoding="utf-8"))
        runs.update(merged.get("runs", {}))
        for row in merged["rows"]:
            earlier[(row["edit"], row["form"])] = row
    runs[args.label] = {
        "selector": _commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    rows = []
    for what, was, now in EDITS:
        if wheel.count(was) != 1:
            raise SystemExit(f"{PATH} of torch {version}: {was!r} is not there exactly once")
        for form in FORMS:
            row = dict(earlier.get((what, form), {"edit": what, "form": form}))
            row[args.label] = _one(index, change_for(wheel, was, now, form), trace)
            rows.append(row)
            shown = " ".join(
                f"{label}={row[label]['selected']:>5} {row[label]['decision'][:4]}"
                for label in runs
                if label in row
            )
            print(f"{what[:50]:50} {form:12} {shown}", file=sys.stderr)
    eligible = len(index.runnable)
    data = {
        "name": "trace_selection",
        "value": sum(1 for r in rows if r[args.label]["decision"] == "full"),
        "unit": f"edits x forms planned as a full run ({args.label}), of {len(rows)}",
        "command": COMMAND,
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python "
        f"{platform.python_version()}, {platform.system()}",
        "notes": (
            "Selected variants (no holdout) for one-line edits of torch/_tensor.py, the "
            "bundled Inventory and the shipped trace, as `spyre-ci select --diff` plans them. "
            "A full run selects every runnable variant. Forms: see the script's docstring."
        ),
        "inventory": source,
        "torch_version": inventory.torch_version,
        "eligible": eligible,
        "trace_variants": len(trace.functions) if trace is not None else 0,
        "runs": runs,
        "full_runs": {
            label: sum(1 for r in rows if label in r and r[label]["decision"] == "full")
            for label in runs
        },
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
