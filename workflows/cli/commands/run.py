"""`spyre-ci run`: the main job on the embedded executor (no services, no network)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from workflows.cli.change_input import (
    COUNT_BUDGET_HELP,
    add_budget_arguments,
    add_source_arguments,
    check_budget,
    check_out_dir,
    check_specs,
    checked,
    impact_map_path,
    read_inventory,
    read_source,
    state_dir,
)
from workflows.cli.options import absolute_path, add_options
from workflows.cli.summary import print_summary
from workflows.errors import CommandError
from workflows.settings import Settings

if TYPE_CHECKING:
    pass


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="select, run and report the variant tests an upstream change needs",
        description="Plan with the selector, run the shards as pytest subprocesses on the "
        "spyre device, verify (reruns, baseline, expansion), update History and export.",
    )
    add_source_arguments(parser)
    add_options(
        parser,
        "inventory",
        "specs",
        "impact_map",
        "no_trace",
        help={
            "impact_map": "per-variant torch functions and aten ops from `spyre-ci impact-map`: "
            "the selector also picks the variants that run a changed function or dispatch a "
            "touched op (default $SPYRE_CI_IMPACT_MAP, else the shipped trace)"
        },
    )
    add_options(parser, "full", help={"full": "run every variant, no selection"})
    add_budget_arguments(parser, COUNT_BUDGET_HELP)
    parser.add_argument(
        "--out",
        type=absolute_path,
        default="out",
        metavar="DIR",
        help="where results, reports and HUD files go (default ./out)",
    )
    add_options(parser, "jobs", "test_timeout", "memory_mb")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not record the results as the upstream baseline; by default pushes and "
        "nightlies set it, pull requests do not, and a run that applied a diff given with "
        "--diff never does (a tried patch is not upstream)",
    )
    parser.add_argument(
        "--no-apply",
        action="store_true",
        help="run on the torch as installed, without applying the change's Python files "
        "(the verdict then says the change was not tested)",
    )
    add_options(parser, "no_progress")
    parser.set_defaults(func=checked(run))


def build_request(args: argparse.Namespace, settings: Settings) -> Any:
    """The RunRequest for `run`: reads the event or diff; every path in it is absolute."""
    from contracts.event import TriggerEvent
    from workflows.run import run_folder, run_model

    check_budget(args)
    check_out_dir(args.out)
    state_dir(settings)  # one that cannot be used is refused as by every command (exit 2)
    check_specs(args.specs)
    if args.inventory is not None:
        read_inventory(args.inventory)  # refused here, before History is opened
    given = read_source(args)
    event, diff_text = given.event, given.diff_text
    diff_source = given.diff_source if diff_text else ""
    if event is not None and diff_text is None:
        event, diff_text, diff_source = compare_diff(event, settings)
    if event is None:  # a bare diff is run as a change that landed on the upstream branch
        event = TriggerEvent(
            kind="push",
            delivery_id=f"diff:{args.diff.name}",
            repo="pytorch/pytorch",
            head_sha="",
            source="cli",
        )
    run_id = run_folder.run_id_for(event, started=str(time.time_ns()))
    change = run_model.RunRequest(
        run_id=run_id,
        event=event,
        out_dir=str(args.out),
        inventory="",
        diff_text=diff_text,
        diff_source=diff_source,
        # A diff the user gave must apply whole (exit 2 naming the hunk); an event's diff is
        # upstream's, made against its base: what does not apply is named in the verdict.
        change_strict=args.diff is not None,
        apply_change=not args.no_apply,
        specs=tuple(args.specs),  # the upstream test files they reuse take the change too
    )
    check_change(change, settings)  # refused before the Inventory is built or anything is recorded
    if not args.specs:
        # The bundled suites load: the zygotes' imports overlap the Inventory's build (specs
        # given are first read by that build, and the run warms up after it, as they load).
        from workflows.run import pipeline

        pipeline.warm_up(change, settings)
    inventory = args.inventory
    if inventory is None:
        from workflows.run.on_build import inventory_for

        inventory = inventory_for(change, settings, args.specs or ())
    if inventory is None:
        from suites.loader import SpecError
        from workflows.stores.inventory_cache import default_inventory

        try:
            inventory = default_inventory(state_dir(settings), args.specs)
        except SpecError as exc:
            which = "the specs given (--specs)" if args.specs else "the bundled suites"
            raise CommandError(f"{which} do not load: {exc}") from exc
    return replace(
        change,
        inventory=str(inventory),
        full=args.full,
        budget_count=args.budget,
        budget_time_s=args.budget_time,
        holdout=args.holdout,
        test_timeout_s=args.test_timeout,
        memory_mb=args.memory_mb,
        shards=max(1, args.jobs),
        baseline=False if args.no_baseline else None,
        specs=tuple(args.specs),  # absolute (argparse type): shards run elsewhere
        impact_map=None if args.no_trace else impact_map_path(args.impact_map, settings),
        default_trace=not args.no_trace,
        record_traces=settings.record_traces,
        trace_share=settings.trace_share,
        mass_failure_share=settings.mass_failure_share,
    )


def check_change(request: Any, settings: Settings) -> Any:
    """The request's change prepared over the installed torch: a diff that does not apply
    is refused here (exit 2, naming the file and hunk), before anything is recorded."""
    from workflows.run.under_test import ChangeNotApplicable, applied_change

    try:
        return applied_change(request, settings)
    except ChangeNotApplicable as exc:
        raise CommandError(f"the change cannot be applied: {exc}") from exc


def compare_diff(event: Any, settings: Settings) -> tuple[Any, str | None, str]:
    """The event's diff from GitHub's compare (`base...head`, through the GitHub client the
    Scout uses) when a GitHub is configured (`SPYRE_CI_GITHUB_URL`, `SPYRE_CI_GITHUB_TOKEN`);
    an answer GitHub refuses (a 404) leaves the event without a diff, which the verdict then
    names. (event, diff text or None, where it came from)"""
    if event.diff_text is not None:
        return event, event.diff_text, "the event's diff"
    if not (event.base_sha and event.head_sha and settings.github_token):
        return event, None, ""
    from relay.changes import complete_files
    from relay.github import GitHubAdapter, GitHubRefused, GitHubUnavailable

    adapter = GitHubAdapter(base_url=settings.github_url, token=settings.github_token)
    try:
        completed = complete_files(event, adapter)
    except (GitHubRefused, GitHubUnavailable) as exc:
        print(f"spyre-ci: no diff for the event from GitHub: {exc}", file=sys.stderr)
        return event, None, ""
    source = f"GitHub compare {event.base_sha[:12]}...{event.head_sha[:12]}"
    return completed, completed.diff_text, source if completed.diff_text else ""


def run(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.drivers import embedded
    from workflows.run.context import RunContext

    request = build_request(args, settings)
    try:
        ctx = RunContext.open(settings)  # the run's services, built once here
        finished = embedded.run(request, ctx, jobs=args.jobs, show_progress=not args.no_progress)
    except KeyboardInterrupt:
        print(
            f"\nrun {request.run_id} stopped; the tests that finished are kept: "
            f"`spyre-ci runs resume {request.run_id}` continues it",
            file=sys.stderr,
        )
        raise
    print_summary(finished)
    from workflows.drivers import pending_check

    waiting = pending_check.waiting_after(request, settings)
    if waiting:
        print(
            f"  {waiting} deferred change(s) wait for a build that holds them: "
            "`spyre-ci pending check` judges them on the builds now in the source "
            "(a worker does it after every scheduled run)"
        )
    return int(finished.exit_code)  # the run's verdict (`FinishedRun.exit_code`)
