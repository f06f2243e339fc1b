"""`spyre-ci run`: the main job on the embedded executor (no services, no network)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflows.cli.change_input import (
    add_budget_arguments,
    add_source_arguments,
    check_out_dir,
    check_specs,
    checked,
    read_impact_map,
    read_inventory,
    read_source,
    state_dir,
)
from workflows.cli.commands.select import COUNT_BUDGET_HELP, check_budget
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings
from workflows.stores.run_summary import RunResults

if TYPE_CHECKING:
    from workflows.run.run_model import EnvironmentUnderTest, FinishedRun


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


def impact_map_path(given: Path | None, settings: Settings) -> str | None:
    """`--impact-map`, else $SPYRE_CI_IMPACT_MAP, as an absolute path; it must exist and
    read as an impact map (checked here, before anything is recorded)."""
    path = given or settings.impact_map
    if path is None:
        return None
    if not path.exists():
        raise CommandError(
            f"{path}: no impact map there; record one with `spyre-ci impact-map --out {path}`"
        )
    read_impact_map(path)
    return str(path.resolve())


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


def under_test_lines(resolved: EnvironmentUnderTest | None) -> list[str]:
    """The terminal's first lines of a run: which torch and backend it ran on, what of the
    change was applied, and whether that tested the change (`resolved`: the planned run's
    `EnvironmentUnderTest`, None for a run planned before it was recorded)."""
    if resolved is None:
        return []
    torch, backend, change = resolved.torch, resolved.backend, resolved.change
    lines = [
        f"torch {torch.version} ({torch.git_sha[:12]}, {torch.source}); backend "
        f"{backend['package']} {backend['version']} on device {backend['device']!r}"
    ]
    for files, label in ((change.applied, "applied"), (change.not_applied, "NOT applied")):
        for entry in files[:10]:
            lines.append(f"  {label}: {entry.path} ({entry.why})")
        if len(files) > 10:
            lines.append(f"  {label}: ... and {len(files) - 10} more (see run.json)")
    verdict = resolved.tested
    head = {"tested": "TESTED", "partial": "TESTED IN PART", "not_tested": "NOT TESTED"}[verdict]
    lines.append(f"change {head}" + (":" if resolved.notes else ""))
    lines += [f"  {note}" for note in resolved.notes]
    return lines


def one_line(message: str, width: int = 120) -> str:
    """A failure's message as one terminal line: its first line naming an exception, else its
    first line that is no traceback frame, cut at a word with `...` past `width`."""
    import re

    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    raised = re.compile(r"^(E\s+)?[A-Za-z_][\w.]*(Error|Exception|Failure|Exit|Interrupt)\b")
    plain = [ln for ln in lines if not ln.startswith(("Traceback", "File ", "^"))]
    said = next((ln for ln in lines if raised.match(ln)), plain[0] if plain else "")
    if len(said) <= width:
        return said
    cut = said[: width - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > width // 2 else cut).rstrip(" ,;:") + "..."


def print_summary(finished: FinishedRun) -> None:
    plan, summary = finished.planned.plan, finished.summary
    results = summary.results or RunResults()
    print(f"\nrun {finished.planned.request.run_id}  ({summary.event})")
    for line in under_test_lines(finished.planned.environment):
        print(f"  {line}")
    if plan.fallback:
        unbounded = plan.budget.not_applied
        print(f"  full run: {plan.fallback}" + (f" ({unbounded})" if unbounded else ""))
    elif plan.decision == "none":
        print(f"  nothing to run: {results.why or 'no variant is affected'}")
    holdout = len(finished.planned.holdout)
    print(f"  selected {len(plan.selected)}, holdout {holdout}, ran {results.ran}")
    impact = finished.planned.notes.impact_map
    if impact is not None:
        print(
            f"  impact map: {impact.path} ({impact.inventory_variants_traced} of the "
            "inventory's variants traced)"
        )
    width = max((len(k) for k in results.counts), default=6)
    for status, count in sorted(results.counts.items(), key=lambda kv: -kv[1]):
        print(f"  {status:<{width}}  {count:>6}")
    new = finished.new_failures
    base = finished.base_outcomes
    side = f"on {finished.reference}" if finished.reference else "without the change"
    if new:
        print(f"  NEW FAILURES ({len(new)}):")
        for vid in new[:20]:
            read = finished.base_read.get(vid)
            how = f", read from run {read}" if read else ", run now"
            without = f" [{side}: {base[vid].status}{how}]" if vid in base else ""
            print(f"    {vid}{without}: {one_line(finished.outcomes[vid].message)}")
        if len(new) > 20:
            print(f"    ... and {len(new) - 20} more (see the report)")
    own = [v for v in finished.unattributed if v in finished.outcomes]
    if own:
        environment = finished.planned.environment
        torch = (
            f"torch {environment.torch.version} ({environment.torch.git_sha[:12]})"
            if environment is not None
            else "the torch under test"
        )
        why = (
            "the change was not applied"
            if finished.not_tested
            else "no run without the change showed them passing"
            if not finished.reference
            else f"not on {finished.reference}: new on this torch"
        )
        print(f"  FAILING ON {torch} ITSELF ({len(own)}; {why}; not blamed on anything):")
        for vid in own[:20]:
            print(f"    {vid}: {one_line(finished.outcomes[vid].message)}")
        if len(own) > 20:
            print(f"    ... and {len(own) - 20} more (see the report)")
    for fault in finished.faults:
        print(f"  INFRASTRUCTURE ERROR (not a test result): {fault.summary}")
        for line in fault.cause.splitlines()[-12:]:
            print(f"    | {line}")
    if finished.faults:
        print("  History learned nothing from this run; fix the cause and run it again.")
    if finished.held_back:
        run_id = finished.planned.request.run_id
        print(f"  HELD BACK from History: {finished.held_back}")
        print(
            f"    if these failures are real: `spyre-ci history confirm {run_id}`; if they "
            f"are the tool's: `spyre-ci history forget {run_id}`"
        )
    windows = summary.forensics.windows() if summary.forensics is not None else []
    if windows and not finished.faults:
        print(
            f"  next: `spyre-ci bisect --run {finished.planned.request.run_id}` names the "
            f"upstream commit in the window of {len(windows)} new failure(s), without a build"
        )
    out = finished.out_dir
    print(f"  report: {out / 'report.html'}  ({out / 'report.md'})")
    sys.stdout.flush()
