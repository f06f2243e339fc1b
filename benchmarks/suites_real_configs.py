"""Counts per torch-spyre config over a TORCH_ROOT: test entries listed, entries naming a test
present in the upstream file, variants expanded, variants excluded, and (with --run) outcomes.

    TORCH_ROOT=/tmp/torch_root python benchmarks/suites_real_configs.py \
        ../shared/reference/torch-spyre-configs [--run] [--out benchmarks/results/X.json]

All configs are expanded in one process, in sorted order (several files per process), then
all together in one Inventory in the reverse order, which must give the same ids
(`one_inventory_reversed_differs` lists the suites where it does not). `present_but_lost`
lists each entry naming a test the upstream file defines (or instantiates) none of whose
tests became a variant or an exclusion with its rule: each would be a bug.
With --run --sample N, at most N variants a config run (every k-th id, a spread sample).
The TORCH_ROOT is assembled outside the repository from public copies of PyTorch's test/
files (see the result's `notes`); upstream files never go into the repository.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", type=Path)
    parser.add_argument("--run", action="store_true", help="also run the variants (pytest)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--sample", type=int, default=0, help="with --run: at most this many variants a config"
    )
    parser.add_argument("--ids-reversed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ids_reversed:
        return _ids_reversed(args.configs.resolve())

    from suites.expand import expand, file_suite_unavailable, load_suites_each
    from suites.model import variant_id
    from suites.rules import _entry_matches, file_widening
    from suites.upstream import UpstreamError, enumerate_tests

    args.configs = args.configs.resolve()
    files = sorted(args.configs.rglob("*.yaml"))
    specs, refused = load_suites_each(files)
    rows: dict[str, Any] = {}
    each: dict[str, set[str]] = {}
    for spec in specs:
        expansion = expand([spec])
        planned = {p.variant.id for p in expansion.planned}
        each[spec.suite_name] = planned | set(expansion.excluded)
        listed = present = 0
        lost: list[str] = []
        unimportable: list[str] = []
        for fi, entry in enumerate(spec.get(("test_suite_config", "files")) or ()):
            where = ("test_suite_config", "files", fi)
            path, _ = file_suite_unavailable(spec, where)
            tests = []
            defined: set[str] = set()
            imported = True
            if path is not None:
                defined = _defined_tests(path)
                try:
                    tests = list(enumerate_tests(path, file_widening(spec, where)))
                except UpstreamError:
                    imported = False
            known = (
                defined
                | {t.base_name for t in tests}
                | {t.written_name for t in tests if t.written_name}
            )
            for test in entry.get("tests") or ():
                names = test.get("names")
                for name in [names] if isinstance(names, str) else names or ():
                    listed += 1
                    if not any(any(_entry_matches({"names": [name]}, b)) for b in known):
                        continue
                    present += 1
                    # Each test it names must be a variant or excluded by a rule.
                    ids = [
                        variant_id(
                            spec.suite_name,
                            path.stem if path else "",
                            t.subject,
                            t.dtype or "none",
                        )
                        for t in tests
                        if any(_entry_matches({"names": [name]}, t.base_name))
                        or (
                            t.written_name
                            and any(_entry_matches({"names": [name]}, t.written_name))
                        )
                    ]
                    if not imported:
                        unimportable.append(name)
                    elif not ids or any(i not in each[spec.suite_name] for i in ids):
                        lost.append(name)
        rows[str(spec.path.relative_to(args.configs))] = {
            "entries_listed": listed,
            "entries_present_upstream": present,
            "variants": len(expansion.planned),
            "excluded": len(expansion.excluded),
            "present_but_lost": lost,
            # Named tests of a file that does not import on this torch (see `unavailable`).
            "present_in_unimportable_file": len(unimportable),
            "unavailable": expansion.unavailable.get(spec.suite_name, ""),
        }
        if args.run and expansion.planned:
            rows[str(spec.path.relative_to(args.configs))]["outcomes"] = _run(
                spec.path, sorted(planned), args.sample
            )
    # Every config in one Inventory, in the reverse order, in a fresh process (every file
    # imported anew, in another order): the same variants and exclusions as each alone.
    fresh = subprocess.run(
        [sys.executable, __file__, str(args.configs), "--ids-reversed"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    by_suite: dict[str, set[str]] = {}
    for vid in json.loads(fresh.stdout.splitlines()[-1]):
        by_suite.setdefault(vid.split("::", 1)[0], set()).add(vid)
    differ = sorted(s for s in each if each[s] != by_suite.get(s, set()))
    result = {
        "name": "suites_real_configs",
        "value": sum(r["variants"] for r in rows.values()),
        "unit": "variants expanded over all configs",
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": (
            f"{platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}"
        ),
        "torch_root": os.environ.get("TORCH_ROOT", ""),
        # Configs whose test file is not in this TORCH_ROOT do not lint: the first error each.
        "refused": {
            str(Path(k).relative_to(args.configs.resolve()) if Path(k).is_absolute() else k): (
                v.splitlines()[0].split(": ", 1)[-1]
            )
            for k, v in refused.items()
        },
        "torch_root_files": _assembled(os.environ.get("TORCH_ROOT", "")),
        "configs": rows,
        "one_inventory_reversed_differs": differ,
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


def _ids_reversed(configs: Path) -> int:
    """Print, as one JSON line, the ids (variants and exclusions) of every config expanded
    together in one Inventory, in the reverse order."""
    from suites.expand import expand, load_suites_each

    specs, _ = load_suites_each(sorted(configs.rglob("*.yaml")))
    together = expand(list(reversed(specs)))
    print(json.dumps(sorted([p.variant.id for p in together.planned] + list(together.excluded))))
    return 0


def _assembled(root: str) -> list[str]:
    """`path commit characters` of each file of the TORCH_ROOT, from its ASSEMBLED.txt (the
    public copy's repository path and commit, to fetch it again), when there is one."""
    listing = Path(root) / "ASSEMBLED.txt" if root else None
    if listing is None or not listing.exists():
        return []
    return [" ".join(line.split()[:3]) for line in listing.read_text().splitlines() if line]


def _defined_tests(path: Path) -> set[str]:
    """Names of the test methods the file defines in its classes (as written)."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    return {
        node.name
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def _run(spec: Path, ids: list[str], sample: int) -> dict[str, int]:
    """Outcomes of the config's variants; with a sample, every n-th id (a spread sample)."""
    if sample and len(ids) > sample:
        step = len(ids) / sample
        ids = [ids[int(i * step)] for i in range(sample)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.jsonl"
        ids_file = Path(tmp) / "ids.txt"
        ids_file.write_text("\n".join(ids) + "\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "suites.pytest_plugin",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                "--spyre-specs",
                str(spec),
                "--spyre-ids",
                str(ids_file),
                "-o",
                "addopts=",
                "--spyre-results",
                str(out),
                "-q",
                "--spyre-timeout",
                "120",
            ],
            capture_output=True,
            text=True,
            check=False,
            # This checkout's code, whatever the installed package points at.
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        counts: dict[str, int] = {}
        for line in out.read_text().splitlines() if out.exists() else ():
            data = json.loads(line)
            if data.get("event") == "end":
                counts[data["status"]] = counts.get(data["status"], 0) + 1
        return counts


if __name__ == "__main__":
    raise SystemExit(main())
