"""`python -m benchmarks.selection`: the mutation replay benchmark (docs/selection-benchmark.md).

Run from the checkout's root (the folder holding `benchmarks/`). Exit codes as the CLI's: 0
done, 2 bad input (an option out of range, a mutation set or spec that does not load), 130
interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.selection.results import DEFAULT_MUTATIONS, DEFAULT_SPECS


def _path(text: str) -> Path:
    """The path as given, absolute against the current directory."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: not a path")
    return Path(os.path.abspath(os.path.expanduser(text)))


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give at least 1")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: give a number of seconds more than 0")
    return value


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="python -m benchmarks.selection",
        allow_abbrev=False,
        description="For every mutation of the set: plan from its diff, run the benchmark "
        "inventory with the mutation applied (test subprocesses only), and compare the "
        "selection with the variants whose outcome changed.",
    )
    add = parse.add_argument
    add(
        "--mutations",
        type=_path,
        default=DEFAULT_MUTATIONS,
        metavar="FILE",
        help="mutation set YAML (default: the shipped set)",
    )
    add(
        "--out",
        type=_path,
        default="out/bench-selection",
        metavar="DIR",
        help="where the record, the baseline, the impact map and the test artifacts go "
        "(default out/bench-selection)",
    )
    add(
        "--specs",
        type=lambda text: str(_path(text)),
        action="append",
        default=[],
        metavar="PATH",
        help="benchmark inventory specs (repeatable; default benchmarks/selection/specs)",
    )
    add(
        "--only",
        action="append",
        default=[],
        metavar="ID",
        help="replay only this mutation (repeatable)",
    )
    add(
        "--jobs",
        type=_at_least_one,
        default=1,
        metavar="N",  # mutations, not test processes
        help="mutations replayed at the same time (default 1)",
    )
    add(
        "--no-restrict",
        action="store_true",
        help="ground truth on every variant, not only those the impact map says the "
        "mutation can reach",
    )
    add(
        "--check-restriction",
        action="append",
        default=[],
        metavar="ID",
        help="also run this mutation unrestricted and record whether the restricted "
        "ground truth was the same (repeatable)",
    )
    add(
        "--impact-map",
        type=_path,
        metavar="FILE.json[.gz]",
        help="a trace from `spyre-ci impact-map` (default: record one)",
    )
    add(
        "--check-sample",
        type=int,
        default=0,
        metavar="N",
        help="with --check-restriction: run the restricted variants and N others drawn at "
        "random instead of every variant (a change among them refutes the restriction)",
    )
    add(
        "--diff-form",
        choices=("plain", "git", "github"),
        default="plain",
        help="how the selector sees each diff: plain `diff -u` (default), git with "
        "function context, or GitHub compare patches",
    )
    add(
        "--no-trace",
        action="store_true",
        help="plans join no trace (the alternative plan then joins it)",
    )
    add(
        "--record",
        type=_path,
        metavar="FILE.json",
        help="also write the record here (benchmarks/results/selection.json)",
    )
    add(
        "--test-timeout",
        type=_seconds,
        default=120.0,
        metavar="SECONDS",
        help="per-test time limit (default 120)",
    )
    add(
        "--rescore",
        action="store_true",
        help="run no tests: judge the selector again against the ground truth recorded in "
        "--out by an earlier run (after a selector change)",
    )
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from benchmarks.selection.engine import (
        BenchConfig,
        BenchError,
        command_line,
        rescore,
        run_benchmark,
        summary_lines,
    )

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
        command=command_line(argv),
        diff_form=args.diff_form,
        check_sample=max(0, args.check_sample),
        trace=not args.no_trace,
    )

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        record = rescore(config, log) if args.rescore else run_benchmark(config, log)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for line in summary_lines(record):
        print(line)
    print(f"record: {args.out / 'selection.json'}" + (f", {args.record}" if args.record else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
