"""Errors carry their category by type (workflows/errors.py) and `workflows.cli.main` alone
turns them into exit codes: bad input 2, an outage or a run that could not run 3, an
interrupt 130. Each category is checked through the CLI, in-process, with its message."""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path

import pytest

from contracts.errors import BadInput, Refused, Unavailable
from dashboard_export import ExportError, PublishRefused, PublishUnavailable
from relay.events import RelayError, RelayUnavailable
from relay.github import GitHubRefused, GitHubUnavailable
from selector import SelectorError
from suites.loader import SpecError
from tests.testing.cli import cli
from tests.testing.paths import REPO_ROOT
from workflows.errors import CommandError, InfrastructureError
from workflows.run.run_model import PipelineError
from workflows.settings import SettingsError
from workflows.stores.history import HistoryError
from workflows.tracing.traces import TraceError

DOWN = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.mark.parametrize(
    "error",
    [
        CommandError,
        PipelineError,
        SettingsError,
        TraceError,
        RelayError,
        GitHubRefused,
        SelectorError,
        SpecError,
        ExportError,
        PublishRefused,
        Refused,
    ],
)
def test_bad_input_types(error: type[Exception]) -> None:
    assert issubclass(error, BadInput) and not issubclass(error, Unavailable)


@pytest.mark.parametrize(
    "error",
    [InfrastructureError, HistoryError, RelayUnavailable, GitHubUnavailable, PublishUnavailable],
)
def test_outage_types(error: type[Exception]) -> None:
    assert issubclass(error, Unavailable) and not issubclass(error, BadInput)


def _error_line(stderr: str) -> str:
    (line,) = stderr.strip().splitlines()  # one line, no traceback
    return line


def test_a_command_error_is_exit_2() -> None:
    result = cli("runs", "show", "no-such-run")
    assert result.returncode == 2, result
    assert _error_line(result.stderr) == (
        "spyre-ci: error: no run 'no-such-run' in History; `spyre-ci runs list` shows the ids"
    )


def test_a_settings_error_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPYRE_CI_TRACE_SHARE", "2")
    result = cli("runs", "list")
    assert result.returncode == 2, result
    line = _error_line(result.stderr)
    assert line.startswith("spyre-ci: error: ") and "SPYRE_CI_TRACE_SHARE" in line, line


def test_a_spec_error_is_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("suite: [unclosed\n", encoding="utf-8")
    result = cli("suites", "expand", "--specs", str(spec))
    assert result.returncode == 2, result
    assert result.stderr.startswith("spyre-ci: error: the suites do not lint:\n"), result.stderr
    assert str(spec) in result.stderr and "Traceback" not in result.stderr


def test_a_selector_error_names_the_file_and_is_exit_2(tmp_path: Path) -> None:
    patch = tmp_path / "change.patch"
    patch.write_text("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ garbage @@\n+a\n")
    result = cli("select", "--diff", str(patch))
    assert result.returncode == 2, result
    assert _error_line(result.stderr) == (
        f"spyre-ci: error: {patch}:4: malformed hunk header '@@ garbage @@'"
    )


def test_a_relay_error_is_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "relay.yaml"
    config.write_text("redis_url: [1, 2]\n", encoding="utf-8")
    result = cli("trigger", "nightly", "--sha", "a" * 40, "--config", str(config))
    assert result.returncode == 2, result
    line = _error_line(result.stderr)
    assert line.startswith("spyre-ci: error: ") and "redis_url" in line, line


def test_a_trace_error_is_exit_2(tmp_path: Path, tiny_inventory: Path) -> None:
    trace = tmp_path / "map.json"
    trace.write_text(json.dumps({"not": "a trace"}), encoding="utf-8")
    result = cli(
        "select",
        "--diff",
        str(REPO_ROOT / "examples" / "events" / "push_softmax_kernel.patch"),
        "--inventory",
        str(tiny_inventory),
        "--impact-map",
        str(trace),
    )
    assert result.returncode == 2, result
    assert _error_line(result.stderr) == (
        f"spyre-ci: error: {trace}: format None is not 1; record it again with "
        "`spyre-ci impact-map`"
    )


def test_a_pipeline_error_is_exit_2() -> None:
    result = cli("runs", "resume", "no-such-run")
    assert result.returncode == 2, result
    line = _error_line(result.stderr)
    assert line.startswith("spyre-ci: error: ") and "no-such-run" in line, line


def test_an_export_error_is_exit_2(tmp_path: Path) -> None:
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"run_id": 1}), encoding="utf-8")
    result = cli("export", "--record", str(record), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result
    line = _error_line(result.stderr)
    assert line.startswith("spyre-ci: error: ") and "Traceback" not in result.stderr, line


@pytest.mark.parametrize("argv", [["runs", "list"], ["readiness"], ["history", "check"]])
def test_history_down_is_an_infrastructure_error_exit_3(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("SPYRE_CI_REDIS_URL", DOWN)
    result = cli(*argv)
    assert result.returncode == 3, result
    line = _error_line(result.stderr)
    assert line.startswith(
        f"spyre-ci: infrastructure error (not a test result): Redis History at {DOWN}: "
    ), line


def test_an_interrupt_is_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    from workflows.cli.commands import runs

    def interrupted(_args: object, _settings: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(runs, "list_runs", interrupted)
    result = cli("runs", "list")
    assert result.returncode == 130, result
    assert result.stderr == "spyre-ci: interrupted\n"


# -- no command translates one error type into another only to get its exit code ----------

CLI = REPO_ROOT / "workflows" / "cli"


def _translations(path: Path) -> list[str]:
    """`except X as exc: raise Y(str(exc))`: a handler whose only work is a new type. A
    built-in error (ValueError, OSError) has no category of its own, so giving it one is
    not counted."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.ExceptHandler) and node.name and len(node.body) == 1):
            continue
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        if all(isinstance(t, ast.Name) and hasattr(builtins, t.id) for t in caught):
            continue
        (stmt,) = node.body
        if not (isinstance(stmt, ast.Raise) and isinstance(stmt.exc, ast.Call)):
            continue
        args = stmt.exc.args
        if (
            len(args) == 1
            and isinstance(args[0], ast.Call)
            and isinstance(args[0].func, ast.Name)
            and args[0].func.id == "str"
            and [ast.unparse(a) for a in args[0].args] == [node.name]
        ):
            found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    return found


def test_no_command_re_raises_an_error_as_another_type() -> None:
    # The benchmark command moves to benchmarks/ with its engine (BenchError, its own type).
    files = [p for p in sorted(CLI.rglob("*.py")) if p.name != "bench.py"]
    assert [t for p in files for t in _translations(p)] == []


def test_the_translation_finder_finds_one() -> None:
    sample = REPO_ROOT / "tests" / "workflows" / "data" / "translation_sample.py"
    assert _translations(sample) == [
        "tests/workflows/data/translation_sample.py:11",
    ]


def test_runs_resume_takes_the_run_s_no_progress_switch() -> None:
    """`spyre-ci run --no-progress` stopped, then resumed the same way in a CI log."""
    from workflows.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["runs", "resume", "r1", "--no-progress"]).no_progress is True
    assert parser.parse_args(["runs", "resume", "r1"]).no_progress is False
