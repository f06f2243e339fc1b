"""`spyre-ci impact-map`: trace which torch functions and aten ops each variant runs.

The output is the ImpactMap JSON `selector.ImpactMap.from_json` reads (`spyre-ci select
--impact-map`), plus `session` (what ran outside any test) and `untraced` (variants that
crashed or hung, whose trace is incomplete). `python -m benchmarks.selection` uses it to restrict
ground-truth runs (docs/selection-benchmark.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import check_specs, checked, read_text
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "impact-map",
        help="record per variant the torch functions and aten ops it runs",
        description="Run the variants once under a tracer (sys.setprofile over torch's "
        "Python files, the torch profiler for aten ops) and write the impact map. An --out "
        "ending in .json.gz writes the compact form that ships as "
        "workflows/data/trace-<torch>.json.gz (rebuild it with "
        "`spyre-ci impact-map --out workflows/data/trace-2.13.0.json.gz`).",
    )
    parser.add_argument("--out", type=absolute_path, required=True, metavar="FILE.json[.gz]")
    add_options(parser, "specs")
    parser.add_argument(
        "--ids", type=absolute_path, metavar="FILE", help="only these variant ids (one per line)"
    )
    parser.add_argument(
        "--work", type=absolute_path, metavar="DIR", help="test artifacts (default: next to --out)"
    )
    add_options(parser, "jobs", "test_timeout", "no_progress")
    parser.set_defaults(func=checked(impact_map))


def impact_map(args: argparse.Namespace, settings: Settings) -> int:
    from suites.inventory import build_inventory
    from suites.loader import SpecError
    from suites.model import Expectation
    from suites.pytest_plugin import read_ids
    from workflows.drivers.progress import Progress
    from workflows.runner.shard_runner import Limits
    from workflows.tracing.impact_recorder import record_impact_map
    from workflows.tracing.traces import write_trace

    specs = list(args.specs or [])  # absolute (argparse type)
    check_specs(specs)
    if args.out.is_dir():
        raise CommandError(f"{args.out}: is a directory (--out names the impact map file)")
    if args.ids:
        read_text(args.ids, "list of variant ids")  # before the half-minute Inventory build
    try:
        inventory = build_inventory(specs or None)
    except SpecError as exc:
        raise CommandError(f"the specs do not lint:\n{exc}") from exc
    ids = [v.id for v in inventory.variants if v.expectation is not Expectation.SKIP]
    if args.ids:
        try:
            wanted = read_ids(args.ids)
        except OSError as exc:
            raise CommandError(f"{args.ids}: cannot read the ids: {exc.strerror}") from exc
        unknown = sorted(set(wanted) - set(ids))
        if unknown:
            raise CommandError(
                f"{args.ids}: not runnable variants of the specs: {', '.join(unknown[:10])}"
            )
        ids = wanted
    work = (args.work or args.out.with_name(args.out.stem + ".work")).resolve()
    progress = None if args.no_progress else Progress(len(ids))
    data = record_impact_map(
        ids,
        work,
        specs,
        Limits(test_timeout_s=args.test_timeout),
        warm=settings.zygote,
        progress=progress,
        parallel=args.jobs,
    )
    if progress is not None:
        progress.finish()
    # Each trace is valid for the definition it ran: a later edit of the variant's spec
    # makes it stale (`ImpactMap.stale`).
    data["fingerprints"] = {
        v.id: v.fingerprint for v in inventory.variants if v.id in data["variants"]
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(args.out, data)
    print(
        f"{args.out}: {len(data['variants'])} variants traced"
        + (f", {len(data['untraced'])} untraced (crashed or hung)" if data["untraced"] else "")
    )
    return ExitCode.OK
