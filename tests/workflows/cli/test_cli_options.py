"""Options shared by commands are declared once (workflows/cli/options.py), with their
environment variable, default and range; the help of every command that takes one names its
variable, and a number out of range is refused the same way everywhere."""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testing.cli import cli
from tests.testing.paths import REPO_ROOT
from workflows.cli.main import build_parser
from workflows.cli.options import OPTION_NAME, OPTIONS, RANGES

# Flags that commands also declare with a meaning of their own: `--out` is a different
# folder for each (OPTIONS["runs_dir"] is the run browser's).
OWN_MEANING = {"--out"}
# Modules not yet on OPTIONS: the benchmark command (moving to benchmarks/ with its engine),
# and `suites`/`suites audit`, whose --specs are kept as given, not made absolute (their
# messages name spec files as the user typed them).
NOT_YET = {"bench.py", "suites.py", "audit.py"}


def _parsers(
    parser: argparse.ArgumentParser, name: str = "spyre-ci"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_option_with_a_variable_names_it_in_each_commands_help() -> None:
    with_env = {key: o.env for key, o in OPTIONS.items() if o.env}
    assert with_env  # the table has some
    seen = set()
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            key = getattr(action, OPTION_NAME, None)
            if key not in with_env:
                continue
            seen.add(key)
            variable = f"${with_env[key]}"
            assert variable in (action.help or ""), (name, key, action.help)
            assert variable in " ".join(parser.format_help().split()), (name, key)
    assert seen == set(with_env), "an option with a variable that no command takes"


def test_each_range_belongs_to_an_option_whose_dest_is_its_name() -> None:
    for name, (flag, _low, _low_ok, _high) in RANGES.items():
        assert OPTIONS[name].flags[0] == flag
        assert flag.lstrip("-").replace("-", "_") == name


def _declared_flags(path: Path) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield arg.value, node.lineno


def test_no_command_declares_a_shared_option_again() -> None:
    shared = {f for o in OPTIONS.values() for f in o.flags} - OWN_MEANING
    files = [
        p for p in sorted((REPO_ROOT / "workflows" / "cli").rglob("*.py")) if p.name not in NOT_YET
    ]
    again = [
        f"{p.relative_to(REPO_ROOT)}:{line} {flag}"
        for p in files
        if p.name != "options.py"
        for flag, line in _declared_flags(p)
        if flag in shared
    ]
    assert again == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "list", "--limit", "0"], "--limit 0: must be at least 1"),
        (["history", "check", "--max-share", "0"], "--max-share 0: must be within [0, 1]"),
        (["history", "check", "--max-share", "1.5"], "--max-share 1.5: must be within [0, 1]"),
        (["serve", "--threads", "0"], "--threads 0: must be at least 1"),
        (["worker", "--concurrency", "0"], "--concurrency 0: must be at least 1"),
        (["select", "--diff", "x.patch", "--holdout", "2"], "--holdout 2: must be within [0, 1]"),
        (["select", "--diff", "x.patch", "--shards", "0"], "--shards 0: must be at least 1"),
        (
            ["run", "--diff", "x.patch", "--test-timeout", "0"],
            "--test-timeout 0: must be more than 0",
        ),
        (["run", "--diff", "x.patch", "--budget", "-1"], "--budget -1: must be at least 0"),
        (["upgrade-diff", "--holdout", "nan"], "--holdout nan: not a finite number"),
    ],
)
def test_a_number_out_of_range_is_refused(argv: list[str], message: str) -> None:
    result = cli(*argv)
    assert result.returncode == 2, result
    assert result.stderr == f"spyre-ci: error: {message}\n"
