"""Does an edit to a reused upstream test file select exactly the variants of the tests it
touches? Checked on real files: for every config over a TORCH_ROOT, every definition of the
file that some variant's sources name (a test, an in-file helper function, a helper method of
a test class) is edited in turn (one statement added at the end of its body), and each file at
its module level (reaching every variant of the file); the diff goes
through the Scout and the `upstream_test` heuristic, and what it selects is compared with the
variants whose sources name that definition.

    PYTHONPATH=. TORCH_ROOT=/tmp/torch_root python benchmarks/suites_real_selection.py \
        ../shared/reference/torch-spyre-configs [--out benchmarks/results/X.json]

`exact` counts the edits that selected exactly those variants; `over` and `under` list the
others (an edit selecting variants it does not reach, or missing some it does).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from selector.changeset import ChangeSet
    from selector.heuristics import REGISTRY
    from selector.heuristics.base import RetrieveContext
    from selector.history import History
    from selector.index import InventoryIndex
    from selector.scout import scout
    from suites.expand import expand, load_suites_each
    from suites.model import Inventory

    specs, _ = load_suites_each(sorted(args.configs.resolve().rglob("*.yaml")))
    expansion = expand(specs)
    inventory = Inventory("2.13.0", "real", tuple(expansion.variants))
    index = InventoryIndex.build(inventory)
    root = Path(os.environ["TORCH_ROOT"])
    by_source: dict[str, set[str]] = {}
    for variant in inventory.variants:
        for source in variant.sources:
            by_source.setdefault(source, set()).add(variant.id)
    rows: dict[str, Any] = {}
    over: list[str] = []
    under: list[str] = []
    exact = 0
    # A module-level edit (a name defined at import time) reaches every variant of its file.
    files = sorted({s.partition(":")[0] for s in by_source})
    edits = [(s, s.partition(":")[0], s.partition(":")[2]) for s in sorted(by_source)]
    edits += [(f"{path}:<module>", path, "") for path in files]
    for path in files:
        by_source[f"{path}:<module>"] = {
            v for s, ids in by_source.items() if s.startswith(path + ":") for v in ids
        }
    for source, path, qualname in edits:
        old = (root / path).read_text(encoding="utf-8", errors="replace")
        new = old + "\n_edited = None  # a module-level edit\n" if not qualname else None
        new = new or _edited(old, qualname)
        if new is None:
            continue
        diff = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"a/{path}",
                f"b/{path}",
            )
        )
        changes = ChangeSet.from_diff(diff).with_sources({path: old})
        facts = scout(changes, index)
        ctx = RetrieveContext(facts=facts, index=index, history=History())
        got = set(REGISTRY["upstream_test"].score(ctx))
        want = by_source[source]
        file_row = rows.setdefault(path, {"edits": 0, "exact": 0, "variants_reached": 0})
        file_row["edits"] += 1
        file_row["variants_reached"] += len(want)
        if got == want:
            exact += 1
            file_row["exact"] += 1
        else:
            if got - want:
                over.append(f"{source}: {len(got - want)} extra, e.g. {sorted(got - want)[0]}")
            if want - got:
                under.append(f"{source}: {len(want - got)} missed, e.g. {sorted(want - got)[0]}")
    result = {
        "name": "suites_real_selection",
        "value": exact,
        "unit": "edits of real upstream test files that selected exactly their variants",
        "edits": sum(r["edits"] for r in rows.values()),
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": (
            f"{platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}"
        ),
        "torch_root": str(root),
        "variants": len(inventory.variants),
        "files": rows,
        "over": over,
        "under": under,
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


def _edited(text: str, qualname: str) -> str | None:
    """The file with one statement added at the end of the body of `qualname`
    (`Class.method` or `function`), or None when the file does not define it."""
    node: Any = ast.parse(text)
    for part in qualname.split("."):
        node = next(
            (
                child
                for child in getattr(node, "body", ())
                if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and child.name == part
            ),
            None,
        )
        if node is None:
            return None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    lines = text.splitlines(keepends=True)
    indent = " " * node.body[0].col_offset
    end = node.body[-1].end_lineno or node.body[-1].lineno
    lines.insert(end, f"{indent}_edited = None  # an edit of this definition only\n")
    return "".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
