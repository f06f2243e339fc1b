"""What a new user meets at the command line: no abbreviations taken silently, a "did you
mean" for a mistyped subcommand, readable `runs show`, a word from a clean lint, and no
traceback when the output is piped to `head`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.testing.paths import REPO_ROOT
from workflows.cli.commands.runs import field_lines
from workflows.cli.main import build_parser, main


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_parser_takes_an_abbreviated_option() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 30  # every command and subcommand
    assert [p.prog for p in parsers if p.allow_abbrev] == []


def test_job_is_not_taken_as_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--event", "e.json", "--job", "2"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --job (did you mean --jobs?) 2" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # the required option is missing because it was mistyped: both are said
        (
            ["run", "--evnt", "e.json"],
            "--evnt is no option of this command (did you mean --event?)",
        ),
        (["run", "--event", "e.json", "--holdot", "1"], "--holdot (did you mean --holdout?) 1"),
        (["runs", "list", "--limt", "3"], "--limt (did you mean --limit?) 3"),
        (["runs", "list", "--zzzz"], "unrecognized arguments: --zzzz\n"),
    ],
)
def test_a_mistyped_option_gets_the_nearest_one_of_its_command(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_version_names_the_package_and_the_torch(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"spyre-ci {metadata.version('spyre-ci')} (torch ")
    assert metadata.version("torch") in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["rn"], "invalid choice: 'rn' (did you mean 'run'?"),
        (["suites", "lnt"], "invalid choice: 'lnt' (did you mean 'lint'?"),
        (["runs", "shwo", "x"], "invalid choice: 'shwo' (did you mean 'show'?"),
        (["zzzz"], "invalid choice: 'zzzz' (choose from "),
    ],
)
def test_a_mistyped_subcommand_gets_the_nearest_one(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_runs_show_prints_no_reprs_and_no_epoch_seconds() -> None:
    assert field_lines("counts", {"passed": 7506, "xfailed": 889}) == [
        "counts: passed 7506, xfailed 889"
    ]
    assert field_lines("finished_at", 1796290397.65957) == ["finished_at: 2026-12-03 09:33:17 UTC"]
    assert field_lines("held_back", None) == ["held_back: -"]
    assert field_lines("removed_ids", []) == ["removed_ids: none"]
    notes = ["the tests ran on torch cf30153c4c13, not on 11d27ef4310c, the commit named"]
    assert field_lines("under_test_notes", notes) == ["under_test_notes:", f"  - {notes[0]}"]
    metrics = {"selected": 10, "ratio_count": 0.0123456, "false_green": False, "missed": None}
    assert field_lines("metrics", {**metrics, "a": 1, "b": 2, "c": 3}) == [
        "metrics:",
        "  selected: 10",
        "  ratio_count: 0.01235",
        "  false_green: no",
        "  missed: -",
        "  a: 1",
        "  b: 2",
        "  c: 3",
    ]
    nested = field_lines("change", {"state": "none", "applied": []})
    assert nested == ["change:", "  state: none", "  applied: none"]
    text = "\n".join(nested)
    assert "{" not in text and "[" not in text


@pytest.mark.long
def test_output_piped_to_head_ends_without_a_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "workflows", "suites", "expand"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # as `head -1` does
        err = process.stderr.read().decode()
        code = process.wait(timeout=300)
    assert first.strip()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 141


def test_a_failure_message_is_one_line_cut_at_a_word() -> None:
    from workflows.cli.summary import one_line

    text = "Traceback (most recent call last):\n  File x\nAssertionError: " + "word " * 40
    line = one_line(text)
    assert "\n" not in line and len(line) <= 120 and line.endswith("word...")
    assert line.startswith("AssertionError: word")  # the line naming what was raised
    assert one_line("RuntimeError: short") == "RuntimeError: short"
    assert one_line("") == ""
