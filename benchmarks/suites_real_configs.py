"""Counts per torch-spyre config over a TORCH_ROOT: test entries listed, entries naming a test
present in the upstream file, variants expanded, variants excluded, and (with --run) outcomes.

    TORCH_ROOT=/tmp/torch_root python benchmarks/suites_real_configs.py \
        ../shared/reference/torch-spyre-configs [--run] [--out benchmarks/results/X.json]

All configs are expanded in one process, in sorted order (several files per process).
The TORCH_ROOT is assembled outside the repository from public copies of PyTorch's test/
files (see the result's `notes`); upstream files never go into the repository.
"""

from __future__ import annotations

import argparse
import contextlib
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
    args = parser.parse_args(argv)

    from suites.expand import expand, load_suites_each
    from suites.rules import _entry_matches
    from suites.upstream import UpstreamError, enumerate_tests

    args.configs = args.configs.resolve()
    files = sorted(args.configs.rglob("*.yaml"))
    specs, refused = load_suites_each(files)
    rows: dict[str, Any] = {}
    for spec in specs:
        expansion = expand([spec])
        listed = present = 0
        for fi, entry in enumerate(spec.get(("test_suite_config", "files")) or ()):
            where = ("test_suite_config", "files", fi)
            from suites.expand import file_suite_unavailable

            path, _ = file_suite_unavailable(spec, where)
            bases: set[str] = set()
            if path is not None:
                with contextlib.suppress(UpstreamError):
                    bases = {t.base_name for t in enumerate_tests(path)}
            for test in entry.get("tests") or ():
                names = test.get("names")
                for name in [names] if isinstance(names, str) else names or ():
                    listed += 1
                    if any(any(_entry_matches({"names": [name]}, b)) for b in bases):
                        present += 1
        rows[str(spec.path.relative_to(args.configs))] = {
            "entries_listed": listed,
            "entries_present_upstream": present,
            "variants": len(expansion.planned),
            "excluded": len(expansion.excluded),
            "unavailable": expansion.unavailable.get(spec.suite_name, ""),
        }
        if args.run and expansion.planned:
            rows[str(spec.path.relative_to(args.configs))]["outcomes"] = _run(spec.path)
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
        "configs": rows,
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


def _run(spec: Path) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.jsonl"
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
                "--spyre-results",
                str(out),
                "-q",
                "--spyre-timeout",
                "120",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        counts: dict[str, int] = {}
        for line in out.read_text().splitlines() if out.exists() else ():
            data = json.loads(line)
            if data.get("event") == "end":
                counts[data["status"]] = counts.get(data["status"], 0) + 1
        return counts


if __name__ == "__main__":
    raise SystemExit(main())
