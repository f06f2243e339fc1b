"""`spyre-ci upgrade-diff`: what a torch upgrade can affect, run on both versions.

spyre-ci upgrade-diff --from 2.13.0 --to 2.14.1 [--run] [--validate] [--out DIR]
spyre-ci upgrade-diff --from-inventory A.json.gz --to-inventory B.json.gz [--out DIR]

Exit codes as every command's (contracts/exit_codes.py): with --run, 1 when the report's
conclusion is failure (a variant failing on the new version that did not on the old:
regressed, or new and failing), else 0; 3 when an environment or the tests could not run; 2
for input it cannot use. Without --run there is no conclusion: 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import (
    check_out_dir,
    check_specs,
    checked,
    env_cache,
    stderr_log,
)
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    """Add the `upgrade-diff` command."""
    parser = subparsers.add_parser(
        "upgrade-diff",
        help="diff two torch versions' Inventories, select what the upgrade can affect, "
        "and (--run) run it on both",
        description="Provision one environment per torch version (cached), build both "
        "Inventories, diff them (named changes, aten API diff), select changed, new and "
        "removed variants plus what the API diff reaches, one canary per op and a holdout; "
        "with --run run the selection on both versions and report regressed / fixed / new / "
        "removed variants, exiting 1 when the new version fails variants new (the report's "
        "conclusion: failure). "
        "The offline form diffs two Inventory files (diff and selection only).",
    )
    parser.add_argument(
        "--from",
        dest="from_version",
        metavar="VERSION",
        help="the torch version upgraded from (e.g. 2.13.0)",
    )
    parser.add_argument(
        "--to",
        dest="to_version",
        metavar="VERSION",
        help="the torch version upgraded to (e.g. 2.14.1)",
    )
    parser.add_argument(
        "--from-inventory",
        type=absolute_path,
        metavar="A.json.gz",
        help="offline: the old version's Inventory (a sibling "
        "A.details.json.gz, when present, names changes field by field)",
    )
    parser.add_argument(
        "--to-inventory",
        type=absolute_path,
        metavar="B.json.gz",
        help="offline: the new version's Inventory",
    )
    parser.add_argument(
        "--out",
        type=absolute_path,
        default="out-upgrade",
        metavar="DIR",
        help="where upgrade.json (and with --run the report and HUD files) "
        "go (default ./out-upgrade)",
    )
    parser.add_argument(
        "--run",
        action="store_true",
        help="run the selection on both versions and report the differences; exit 1 when "
        "the new version fails a variant that did not fail on the old one",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="also run every runnable variant on both versions and report "
        "what the selection caught and missed (implies --run)",
    )
    add_options(parser, "specs")
    add_options(parser, "env_cache")
    parser.add_argument(
        "--rebuild-inventories",
        action="store_true",
        help="build both Inventories again even when cached",
    )
    add_options(
        parser,
        "holdout",
        "seed",
        help={
            "holdout": "share of unaffected variants run as a holdout, within [0, 1] "
            "(default 0.02)",
            "seed": "holdout seed (default 'FROM->TO')",
        },
    )
    parser.add_argument(
        "--no-canary",
        action="store_true",
        help="do not run one canary variant per op (kernel changes that no "
        "definition shows then go unseen unless the holdout samples them)",
    )
    add_options(
        parser,
        "jobs",
        "test_timeout",
        "memory_mb",
        "no_progress",
        help={
            "jobs": "pytest subprocesses at a time per version, at least 1 (default: CPU count)",
            "no_progress": "no progress lines",
        },
    )
    parser.set_defaults(func=checked(cmd_upgrade_diff))


def cmd_upgrade_diff(args: argparse.Namespace, settings: Settings) -> int:

    offline = args.from_inventory is not None or args.to_inventory is not None
    online = args.from_version is not None or args.to_version is not None
    if offline and online:
        raise CommandError(
            "give --from/--to (versions) or --from-inventory/--to-inventory (files), not both"
        )
    if not offline and not online:
        raise CommandError(
            "give --from VERSION --to VERSION, or --from-inventory A.json.gz "
            "--to-inventory B.json.gz"
        )
    check_out_dir(args.out)
    check_specs(args.specs)
    if args.cache_dir is None:  # $SPYRE_CI_ENV_CACHE, made absolute where it was read
        args.cache_dir = settings.env_cache_dir
    if offline:
        return _offline(args)
    return _online(args, settings)


def _offline(args: argparse.Namespace) -> int:
    from workflows.drivers import upgrade

    if args.from_inventory is None or args.to_inventory is None:
        raise CommandError("the offline form needs both --from-inventory and --to-inventory")
    if args.run or args.validate:
        raise CommandError(
            "--run and --validate need environments: use --from VERSION --to VERSION"
        )
    old = upgrade.load_inventory(args.from_inventory)
    new = upgrade.load_inventory(args.to_inventory)
    d_old = upgrade.load_details(upgrade.details_path_for(args.from_inventory))
    d_new = upgrade.load_details(upgrade.details_path_for(args.to_inventory))
    diff, selection = upgrade.diff_and_select(
        old, new, d_old, d_new, holdout=args.holdout, seed=args.seed, canaries=not args.no_canary
    )
    sources = {"from_inventory": str(args.from_inventory), "to_inventory": str(args.to_inventory)}
    data = upgrade.upgrade_json(diff, selection, sources)
    patch_line = ""
    if data.get("renamed"):  # renames need no run: their entries follow them
        from workflows.drivers.upgrade.patch import write_upgrade_patch

        data["patch"] = str(args.out / "upgrade.patch")
        args.out.mkdir(parents=True, exist_ok=True)
        patch_line = write_upgrade_patch(data, args.specs, args.out / "upgrade.patch")
    upgrade.write_json(args.out / "upgrade.json", data)
    _print_summary(data, args.out / "upgrade.json")
    if patch_line:
        print(patch_line)
    return ExitCode.OK


def _online(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.drivers.upgrade.job import run_upgrade

    result = run_upgrade(upgrade_options(args, settings), stderr_log(args.no_progress))
    _print_summary(result.data, result.path)
    if result.patch_line:
        print(result.patch_line)
    if result.conclusion:
        print(result.conclusion)
    return result.code


def upgrade_options(args: argparse.Namespace, settings: Settings) -> Any:
    """The command line's upgrade run as the job's options (`UpgradeOptions`)."""
    from workflows.drivers.upgrade.job import UpgradeOptions

    if not args.from_version or not args.to_version:
        raise CommandError("give both --from VERSION and --to VERSION")
    if args.from_version == args.to_version:
        raise CommandError(f"--from and --to are the same version ({args.from_version})")
    return UpgradeOptions(
        from_version=args.from_version,
        to_version=args.to_version,
        out=args.out,
        cache_dir=env_cache(args, settings),
        specs=tuple(args.specs or ()),
        run=args.run or args.validate,
        validate=args.validate,
        rebuild_inventories=args.rebuild_inventories,
        holdout=args.holdout,
        seed=args.seed,
        canaries=not args.no_canary,
        jobs=args.jobs,
        test_timeout_s=args.test_timeout,
        memory_mb=args.memory_mb,
        show_progress=not args.no_progress,
        warm=settings.zygote,
    )


def _print_summary(data: dict[str, Any], path: Path) -> None:
    sel = data["selection"]
    api = data["api"]
    print(
        f"torch {data['from_version']} -> {data['to_version']}: "
        f"{data['variants_from']} -> {data['variants_to']} variants; "
        f"{len(data['changed'])} changed, {len(data['added'])} added, "
        f"{len(data['removed'])} removed"
        + (f", {len(data['renamed'])} renamed" if data.get("renamed") else "")
        + f"; aten API: {len(api['added'])} added, "
        f"{len(api['removed'])} removed, {len(api['signature_changed'])} re-signed"
    )
    if data["changed_by_what"]:
        top = ", ".join(f"{k} {n}" for k, n in list(data["changed_by_what"].items())[:6])
        print(f"changed variants name: {top}")
    print(
        f"selected {sel['selected']} + canaries {sel.get('canary', 0)} + holdout "
        f"{sel['holdout'] - sel.get('canary', 0)} of {sel['runnable_to']} "
        f"runnable ({sel['share']:.1%}); {sel['removed_run_on_old']} removed run on "
        f"{data['from_version']} only"
    )
    firsts = ", ".join(f"{k} {n}" for k, n in sel["by_heuristic"].items())
    skipped = ", ".join(f"{k} {n}" for k, n in sel["skipped"].items())
    print(f"selected by: {firsts or 'nothing'}; not run: {skipped or 'nothing'}")
    for item in data.get("renamed", ())[:20]:
        print(f"  {item['line']}")
    for item in data.get("ambiguous", ())[:10]:
        print(f"  {item['line']}")
    exposed = data.get("new_exposed") or ()
    if exposed:
        proposed: dict[str, int] = {}
        for item in exposed:
            proposed[item["proposed"]] = proposed.get(item["proposed"], 0) + 1
        print(
            f"new-exposed (never regressions): {len(exposed)}, proposed "
            + ", ".join(f"{k} {n}" for k, n in sorted(proposed.items()))
        )
    for note in data["notes"]:
        print(f"note: {note}")
    run = data.get("run")
    if run:
        cats = ", ".join(f"{k} {n}" for k, n in run["categories"].items())
        print(
            f"ran {run['from']['ran']} on {data['from_version']} in {run['from']['wall_s']} s,"
            f" {run['to']['ran']} on {data['to_version']} in {run['to']['wall_s']} s: {cats}"
        )
        for category in ("regressed", "new-failing", "fixed"):
            rows = [r for r in run["rows"] if r["category"] == category]
            for row in rows[:10]:
                first = (row["message"] or "").strip().splitlines()[:1]
                print(
                    f"  {category}: {row['id']} ({row['before']} -> {row['after']})"
                    + (f": {first[0][:120]}" if first else "")
                )
            if len(rows) > 10:
                print(f"  ... and {len(rows) - 10} more {category} in upgrade.json")
    val = data.get("validate")
    if val:
        print(
            f"validate: {val['outcome_changes']} outcome changes in the full run, "
            f"{val['caught']} caught, {val['missed']} missed; the selection ran "
            f"{val['share_ran']:.1%} of the variants"
        )
    if data.get("report"):
        print(f"report: {data['report'].get('report_html', '')}")
    print(f"written: {path}")
