"""`spyre-ci suites ...`: lint, expand, explain, schema, record and audit for the YAML suites."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import check_specs, read_text
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    """Add the `suites` command group."""
    parser = subparsers.add_parser("suites", help="YAML test-reuse suites: lint, expand, explain")
    sub = parser.add_subparsers(dest="suites_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda args, _settings: _help(parser))

    lint = sub.add_parser("lint", help="check spec files; prints file:line:col: message")
    lint.add_argument("paths", nargs="*", help="spec files or folders (default: bundled specs)")
    lint.add_argument(
        "--warnings",
        action="store_true",
        help="also print warnings (e.g. supported_ops names not in op_db)",
    )
    lint.set_defaults(func=cmd_lint)

    expand = sub.add_parser("expand", help="list the variants the suites expand to")
    expand.add_argument("--suite", help="only this suite")
    expand.add_argument(
        "--specs",
        action="append",
        metavar="PATH",
        help="spec file or folder (repeatable; default: bundled specs)",
    )
    expand.add_argument("--json", action="store_true", help="a JSON array of variant objects")
    expand.set_defaults(func=cmd_expand)

    explain = sub.add_parser("explain", help="the rules that decided one variant, with file:line")
    explain.add_argument("variant_id")
    explain.add_argument("--specs", action="append", metavar="PATH")
    explain.set_defaults(func=cmd_explain)

    schema = sub.add_parser("schema", help="print the JSON Schema of the spec format")
    schema.set_defaults(func=cmd_schema)

    record = sub.add_parser("record", help="write an expectations file from run results")
    record.add_argument("results", nargs="+", help="--spyre-results JSONL files")
    record.add_argument("--out", required=True, help="*.expectations.yaml to write")
    record.add_argument("--suite", help="only variants of this suite")
    record.set_defaults(func=cmd_record)

    from workflows.cli.audit import add_arguments

    audit = sub.add_parser(
        "audit", help="xfails that pass, stale skips, uncovered upstream tests, orphan rules"
    )
    add_arguments(audit)
    audit.set_defaults(func=cmd_audit)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return ExitCode.BAD_INPUT  # no subcommand: a usage error, as argparse's


def cmd_lint(args: argparse.Namespace, _settings: Settings) -> int:
    from suites.lint import lint_paths
    from suites.loader import spec_paths

    paths = spec_paths(args.paths or None)
    missing = [p for p in paths if not p.exists()]
    for p in missing:
        print(f"{p}:1:1: no such file or folder")
    problems = lint_paths([p for p in paths if p.exists()])
    errors = 0
    for problem in problems:
        if problem.severity == "error":
            errors += 1
            print(problem)
        elif args.warnings:
            print(problem)
    errors += len(missing)
    if errors:
        print(f"{errors} error(s) in {len(paths)} file(s)", file=sys.stderr)
        # The spec files cannot be used: bad input, as a spec error is everywhere.
        return ExitCode.BAD_INPUT
    warnings = len(problems)  # no errors here: every problem left is a warning
    shown = "" if args.warnings else ", --warnings shows them"
    print(
        f"{len(paths)} file(s) checked: no errors"
        + (f", {warnings} warning(s){shown}" if warnings else "")
    )
    return ExitCode.OK


def _expansion(
    specs: list[str] | None,
    suite: str | None = None,
    keep_trail: bool = False,
    subjects: Any = None,
) -> Any:
    from suites.expand import expand, load_suites
    from suites.loader import SpecError

    check_specs(specs or [])
    try:
        loaded = load_suites(specs)
    except SpecError as exc:
        raise CommandError(f"the suites do not lint:\n{exc}") from None
    if suite is not None and suite not in {s.suite_name for s in loaded}:
        names = ", ".join(sorted(s.suite_name for s in loaded))
        raise CommandError(f"no suite named {suite!r} (loaded: {names})")
    return expand(loaded, suite=suite, keep_trail=keep_trail, subjects=subjects)


def cmd_expand(args: argparse.Namespace, _settings: Settings) -> int:
    expansion = _expansion(args.specs, args.suite)
    for suite, why in sorted(expansion.unavailable.items()):
        print(f"suite {suite!r} unavailable: {why}", file=sys.stderr)
    if args.json:
        json.dump([v.to_json() for v in expansion.variants], sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
        return ExitCode.OK
    for v in expansion.variants:
        note = f"  [{v.expectation}: {v.reason}]" if str(v.expectation) != "pass" else ""
        print(f"{v.id}{note}")
    print(f"{len(expansion.variants)} variant(s)", file=sys.stderr)
    return ExitCode.OK


def cmd_explain(args: argparse.Namespace, _settings: Settings) -> int:
    from suites.model import split_variant_id

    try:
        suite, _template, subject, _dtype = split_variant_id(args.variant_id)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    # Its subject alone first (a few variants, not the whole database); the whole suite only
    # to name the nearest ids of one that is not there.
    expansion = _expansion(args.specs, suite, keep_trail=True, subjects={suite: {subject}})
    plan = expansion.by_id().get(args.variant_id)
    if plan is None and args.variant_id not in expansion.excluded:
        expansion = _expansion(args.specs, suite, keep_trail=True)
        plan = expansion.by_id().get(args.variant_id)
    if plan is None and args.variant_id in expansion.excluded:
        gone = expansion.excluded[args.variant_id]
        print(gone.id)
        print(f"  excluded:    {gone.reason} (not generated, as in torch-spyre)")
        print(f"  decided by:  {gone.rule}")
        return ExitCode.OK
    if plan is None:
        why = expansion.unavailable.get(suite)
        if why:
            raise CommandError(f"suite {suite!r} is unavailable here: {why}")
        import difflib

        close = difflib.get_close_matches(args.variant_id, list(expansion.by_id()), n=3)
        hint = f"; did you mean: {', '.join(close)}" if close else ""
        raise CommandError(f"no variant {args.variant_id!r}{hint}")
    v = plan.variant
    print(f"{v.id}")
    print(f"  expectation: {v.expectation}" + (f" ({v.reason})" if v.reason else ""))
    print(f"  decided by:  {v.rule}")
    if plan.precision is not None:
        print(f"  tolerance:   atol={plan.precision.atol} rtol={plan.precision.rtol}")
    if v.timeout_s:
        print(f"  timeout:     {v.timeout_s:g} s")
    print(f"  family:      {v.family}    fingerprint: {v.fingerprint}")
    if v.owners:
        print(f"  owners:      {', '.join(v.owners)}")
    if v.watch:
        print(f"  watch:       {', '.join(v.watch)}")
    if plan.matched:
        print("  matching rules, in order (the last one with a mode decides):")
        for rule in plan.matched:
            print(f"    {rule.describe()}")
    elif plan.kind == "file":
        print(f"  upstream:    {plan.file}::{plan.device_class}::{plan.method}")
    return ExitCode.OK


def cmd_schema(args: argparse.Namespace, _settings: Settings) -> int:
    from suites.loader import schema

    print(json.dumps(schema(), indent=2))
    return ExitCode.OK


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.cli.audit import run_audit

    return run_audit(args, settings)


def cmd_record(args: argparse.Namespace, _settings: Settings) -> int:
    from suites.record import expectation_entries, read_results, write_expectations

    for path in args.results:
        if not Path(path).exists():
            raise CommandError(f"{path}: no such results file")
        read_text(Path(path), "results file (JSON lines)")  # a directory or binary is named
    results = read_results(args.results)
    if args.suite:
        results = {k: v for k, v in results.items() if k.split("::", 1)[0] == args.suite}
    entries = expectation_entries(results)
    write_expectations(entries, Path(args.out))
    print(f"{len(entries)} expectation(s) written to {args.out}")
    return ExitCode.OK
