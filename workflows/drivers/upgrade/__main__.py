"""`python -m workflows.drivers.upgrade describe --out FILE.json.gz [--specs PATH]...`: run INSIDE
an
environment, writes the details the upgrade diff names changes with (`inventories.describe`).
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Sequence
from pathlib import Path

from workflows.drivers.upgrade.inventories import describe


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflows.drivers.upgrade")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("describe", help="write the upgrade-diff details of this environment")
    d.add_argument("--out", required=True, type=Path)
    d.add_argument("--specs", action="append", default=[])
    args = parser.parse_args(argv)
    data = describe(args.specs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump(data, fh, separators=(",", ":"), sort_keys=True)
    tmp.replace(args.out)
    print(
        f"details: {len(data['subjects'])} subjects, {len(data['variants'])} variants -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
