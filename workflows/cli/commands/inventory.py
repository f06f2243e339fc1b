"""`spyre-ci inventory`: write the Inventory of the suites for the installed torch."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import check_specs
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    """Add the `inventory` command."""
    parser = subparsers.add_parser(
        "inventory", help="build the Inventory (every variant) for the installed torch"
    )
    parser.add_argument(
        "--out",
        type=absolute_path,
        metavar="FILE.json.gz",
        help="write here (gzip when the name ends in .gz); default: a summary",
    )
    add_options(parser, "specs")
    parser.set_defaults(func=cmd_inventory)


def cmd_inventory(args: argparse.Namespace, _settings: Settings) -> int:
    from suites.inventory import build_inventory
    from suites.loader import SpecError

    check_specs(args.specs or [])
    if args.out is not None and args.out.is_dir():
        raise CommandError(f"{args.out}: is a directory (--out names the Inventory file)")
    try:
        inventory = build_inventory(args.specs)
    except SpecError as exc:
        raise CommandError(f"the suites do not lint:\n{exc}") from None
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            inventory.save(args.out)
        except OSError as exc:
            raise CommandError(f"{args.out}: cannot write the Inventory: {exc.strerror}") from None
    counts: dict[str, int] = {}
    for v in inventory.variants:
        counts[v.suite] = counts.get(v.suite, 0) + 1
    per_suite = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
    print(
        f"torch {inventory.torch_version} ({inventory.torch_git_version[:12]}): "
        f"{len(inventory)} variants ({per_suite}); {len(inventory.api_surface)} aten overloads"
        + (f"; written to {args.out}" if args.out else "")
    )
    for suite, why in inventory.unavailable_suites.items():
        print(f"suite {suite!r} unavailable: {why}", file=sys.stderr)
    return ExitCode.OK
