"""`spyre-ci bump --to VERSION`: move the project's pinned torch in one reviewed step.

    spyre-ci bump --to 2.14.1 [--out DIR] [--jobs N] [--test-timeout S]

Runs the upgrade from the pinned torch (`pyproject.toml`'s `torch==X`) to VERSION, applies
its expectations patch, records the new torch's shipped trace and a full run of it, and
moves the pin (`workflows/drivers/upgrade/bump.py`). Everything lands in the checkout as
uncommitted changes, for `git diff` to review. Exit codes as `upgrade-diff --run`: 1 when
the new torch fails variants the old one did not (each is an xfail entry in the patch,
proposed, to review), 0 otherwise; 2 for a checkout or version it cannot use; 3 when an
environment or the tests could not run.
"""

from __future__ import annotations

import argparse
from typing import Any

from workflows.cli.change_input import check_out_dir, checked, env_cache, stderr_log
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    """Add the `bump` command."""
    parser = subparsers.add_parser(
        "bump",
        help="move the pinned torch to a new version: upgrade run, expectations patch "
        "applied, trace and full run of the new torch recorded, pin moved",
        description="Move the project's pinned torch (pyproject.toml's torch==X) to VERSION in "
        "one step whose changes land uncommitted in this checkout for review: the upgrade run "
        "X -> VERSION and its expectations patch (applied), the shipped trace of VERSION "
        "(workflows/data/trace-VERSION.json.gz), a full run of VERSION recorded for the "
        "bundled-expectations test, and the pin. Needs a clean git work tree.",
    )
    parser.add_argument(
        "--to",
        dest="to_version",
        metavar="VERSION",
        required=True,
        help="the torch version to pin (e.g. 2.14.1)",
    )
    parser.add_argument(
        "--out",
        type=absolute_path,
        default="out-bump",
        metavar="DIR",
        help="the upgrade run, the trace's and the full run's work (default ./out-bump)",
    )
    add_options(parser, "env_cache")
    add_options(
        parser,
        "jobs",
        "test_timeout",
        "memory_mb",
        "no_progress",
        help={"no_progress": "no progress lines"},
    )
    parser.set_defaults(func=checked(cmd_bump))


def cmd_bump(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.drivers.upgrade.bump import bump, pinned_torch
    from workflows.drivers.upgrade.job import UpgradeOptions

    check_out_dir(args.out)
    old = pinned_torch()
    if old == args.to_version:
        raise CommandError(f"torch is pinned at {old} already")
    options = UpgradeOptions(
        from_version=old,
        to_version=args.to_version,
        out=args.out,
        cache_dir=env_cache(args, settings),
        run=True,
        jobs=args.jobs,
        test_timeout_s=args.test_timeout,
        memory_mb=args.memory_mb,
        show_progress=not args.no_progress,
        warm=settings.zygote,
    )
    result = bump(options, stderr_log(args.no_progress))
    print(f"torch {old} -> {args.to_version}:")
    for line in result.steps:
        print(f"  {line}")
    print("changed in the checkout (review with `git diff`, then commit):")
    for line in result.written:
        print(f"  {line}")
    if result.still_naming_old:
        print(f"still naming {old} (docs and tests to read again; nothing edited):")
        for line in result.still_naming_old:
            print(f"  {line}")
    print(
        "then, in a fresh venv with the new pin: "
        "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest"
    )
    return result.code
