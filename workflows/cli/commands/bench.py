"""`spyre-ci bench selection`: the mutation replay benchmark (docs/selection-benchmark.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from workflows.cli.change_input import absolute_path, checked
from workflows.cli.main import CommandError
from workflows.cli.options import add_options

# Same defaults as workflows.bench.selection, without importing it (the CLI starts cheaply).
_REPO = Path(__file__).resolve().parents[3]
DEFAULT_MUTATIONS = _REPO / "benchmarks" / "selection" / "mutations.yaml"
DEFAULT_SPECS = _REPO / "benchmarks" / "selection" / "specs"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmarks of the test selection",
        description="Benchmarks that measure the selector by running tests.",
    )
    kinds = parser.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    sel = kinds.add_parser(
        "selection",
        help="replay mutations of PyTorch: recall and selection ratio",
        description="For every mutation of the set: plan from its diff, run the benchmark "
        "inventory with the mutation applied (test subprocesses only), and compare the "
        "selection with the variants whose outcome changed.",
    )
    sel.add_argument(
        "--mutations",
        type=absolute_path,
        default=DEFAULT_MUTATIONS,
        metavar="FILE",
        help="mutation set YAML (default: the shipped set)",
    )
    sel.add_argument(
        "--out",
        type=absolute_path,
        default="out/bench-selection",
        metavar="DIR",
        help="where the record, the baseline, the impact map and the test "
        "artifacts go (default out/bench-selection)",
    )
    add_options(
        sel,
        "specs",
        help={
            "specs": "benchmark inventory specs (repeatable; default benchmarks/selection/specs)"
        },
    )
    sel.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="ID",
        help="replay only this mutation (repeatable)",
    )
    sel.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",  # mutations, not test processes
        help="mutations replayed at the same time (default 1)",
    )
    sel.add_argument(
        "--no-restrict",
        action="store_true",
        help="ground truth on every variant, not only those the impact map "
        "says the mutation can reach",
    )
    sel.add_argument(
        "--check-restriction",
        action="append",
        default=[],
        metavar="ID",
        help="also run this mutation unrestricted and record whether the "
        "restricted ground truth was the same (repeatable)",
    )
    add_options(
        sel,
        "impact_map",
        help={"impact_map": "a trace from `spyre-ci impact-map` (default: record one)"},
    )
    sel.add_argument(
        "--check-sample",
        type=int,
        default=0,
        metavar="N",
        help="with --check-restriction: run the restricted variants and N others drawn at "
        "random instead of every variant (a change among them refutes the restriction)",
    )
    sel.add_argument(
        "--diff-form",
        choices=("plain", "git", "github"),
        default="plain",
        help="how the selector sees each diff: plain `diff -u` (default), git with "
        "function context, or GitHub compare patches",
    )
    sel.add_argument(
        "--no-trace",
        action="store_true",
        help="plans join no trace (the alternative plan then joins it)",
    )
    sel.add_argument(
        "--record",
        type=absolute_path,
        metavar="FILE.json",
        help="also write the record here (benchmarks/results/selection.json)",
    )
    add_options(
        sel,
        "test_timeout",
        default={"test_timeout": 120.0},
        help={"test_timeout": "per-test time limit (default 120)"},
    )
    sel.add_argument(
        "--rescore",
        action="store_true",
        help="run no tests: judge the selector again against the ground truth "
        "recorded in --out by an earlier run (after a selector change)",
    )
    sel.set_defaults(func=checked(bench_selection))


def bench_selection(args: argparse.Namespace) -> int:
    from workflows.bench.selection import (
        BenchConfig,
        BenchError,
        command_line,
        rescore,
        run_benchmark,
        summary_lines,
    )

    if args.jobs < 1:
        raise CommandError("--jobs: give at least 1")
    config = BenchConfig(
        mutations=args.mutations,
        out=args.out,
        specs=tuple(args.specs or [str(DEFAULT_SPECS)]),
        only=tuple(args.only),
        restrict=not args.no_restrict,
        check_restriction=tuple(args.check_restriction),
        impact_map=args.impact_map,
        jobs=args.jobs,
        test_timeout_s=args.test_timeout,
        command=command_line(),
        diff_form=args.diff_form,
        check_sample=max(0, args.check_sample),
        trace=not args.no_trace,
    )

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        record = rescore(config, log) if args.rescore else run_benchmark(config, log)
    except BenchError as exc:
        raise CommandError(str(exc)) from exc
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for line in summary_lines(record):
        print(line)
    print(f"record: {args.out / 'selection.json'}" + (f", {args.record}" if args.record else ""))
    return 0
