"""One meaning per exit code, for every command (`contracts/exit_codes.py`): each command
driven to the codes it documents with the smallest input that gives them, and the docs held
to the scheme.

Codes that only a real run, a provisioned environment or a long window gives are tested
beside that run, not repeated here:

| command | code | where |
|---|---|---|
| run, runs resume | 0, 1 | test_pipeline_embedded.py, test_resume.py, test_applied_change_run.py |
| run | 3, 130 | test_infra_faults.py |
| run | 2 (hostile input, an `--out` that cannot be written) | test_cli_input.py |
| upgrade-diff | 0, 1, 2, 3 | test_upgrade_exit.py |
| bisect | 0, 2, 3 (5 here, its real run `slow`) | test_bisect.py |
| suites audit | 0, 2, 3, 5 | tests/suites/test_audit.py |
| readiness | 0, 5 over a real run | test_readiness.py |
| worker status | 3 | test_worker_command.py |
| export, serve, trigger, select | 2, 3 | test_cli_errors.py, test_cli_input.py |
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from pathlib import Path

import pytest

from contracts.exit_codes import ExitCode
from tests.servers.github_api import GitHubAPIServer, github_api  # noqa: F401 - fixture
from tests.testing.cli import cli
from tests.testing.paths import EVENTS, REPO_ROOT
from tests.workflows.cli.test_readiness import _healthy, _l2_since, _now, _record, _save
from tests.workflows.drivers.test_bisect import BASE, GLU, Window, bisect, env_for, harmless
from tests.workflows.stores.test_pending import entry
from workflows.cli.commands.pending import check_code, deferred_code
from workflows.drivers.bisect.job import exit_code as bisect_exit_code
from workflows.drivers.bisect.search import (
    CULPRIT,
    FAILS_AT_BASE,
    FLAKY,
    NOT_REPRODUCED,
    UNDECIDABLE,
    WINDOW,
)
from workflows.stores import pending
from workflows.stores.history import RunState, SQLiteHistory

# -- the scheme, the CLI layer and the docs --------------------------------------------------

SCHEME = {0: "OK", 1: "NEW_FAILURES", 2: "BAD_INPUT", 3: "INFRASTRUCTURE", 4: "NOT_TESTED"}
SCHEME |= {5: "CHECK_FAILED", 130: "INTERRUPTED", 141: "BROKEN_PIPE"}


def test_the_scheme_is_the_documented_one() -> None:
    assert {int(c): c.name for c in ExitCode} == SCHEME


def test_the_cli_returns_members_of_the_scheme_never_bare_numbers() -> None:
    """A command's `return 1` could mean anything; `ExitCode.CHECK_FAILED` cannot."""
    found = []
    for path in sorted((REPO_ROOT / "workflows" / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            values = []
            if isinstance(node, ast.Return) and node.value is not None:
                values = [node.value]
                if isinstance(node.value, ast.IfExp):
                    values = [node.value.body, node.value.orelse]
            for value in values:
                if isinstance(value, ast.Constant) and type(value.value) is int:
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert found == []


def test_the_docs_table_and_the_readme_name_every_code() -> None:
    text = (REPO_ROOT / "docs" / "workflows.md").read_text(encoding="utf-8")
    table = text[text.index("Exit codes, the same for every command") :]
    table = table[: table.index("\n\n", table.index("| code |"))]
    listed = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)}
    assert listed == set(SCHEME)
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = readme[readme.index("Exit codes are the same") :]
    paragraph = paragraph[: paragraph.index("\n\n")]
    for code in SCHEME:
        assert re.search(rf"\b{code} ", paragraph), code
    export = " ".join((REPO_ROOT / "docs" / "export.md").read_text(encoding="utf-8").split())
    assert "5: some variant has no answer in the window" in export  # bisect's line


def test_no_command_is_bad_input_and_help_is_ok() -> None:
    assert cli().returncode == ExitCode.BAD_INPUT
    assert cli("suites").returncode == ExitCode.BAD_INPUT
    assert cli("device").returncode == ExitCode.BAD_INPUT
    assert cli("no-such-command").returncode == ExitCode.BAD_INPUT
    assert cli("--help").returncode == ExitCode.OK


def test_a_bug_of_spyre_ci_is_never_read_as_new_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    from workflows.cli.commands import runs

    def broken(_args: object, _settings: object) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(runs, "list_runs", broken)
    result = cli("runs", "list")
    assert result.returncode == ExitCode.INFRASTRUCTURE, result
    assert "ZeroDivisionError: a bug" in result.stderr  # the traceback, for a bug report
    assert result.stderr.rstrip().endswith("is a bug in spyre-ci; please report it")


# -- the state directory: the same code whichever command meets it ---------------------------

SOFTMAX_EVENT = str(EVENTS / "push_softmax_kernel.json")
STATE_COMMANDS = {
    "run": ["run", "--event", SOFTMAX_EVENT, "--out", "{tmp}/out"],
    "select": ["select", "--event", str(EVENTS / "push_docs_only.json")],
    "runs-list": ["runs", "list"],
    "runs-show": ["runs", "show", "r-1"],
    "runs-resume": ["runs", "resume", "r-1"],
    "runs-pages": ["runs", "pages", "--out", "{tmp}/pages"],
    "readiness": ["readiness"],
    "history-check": ["history", "check"],
    "history-forget": ["history", "forget", "r-1"],
    "history-confirm": ["history", "confirm", "r-1"],
    "pending-list": ["pending", "list"],
    "pending-check": ["pending", "check"],
    "suites-audit": ["suites", "audit"],
    "bisect": ["bisect", "--last-good", "a" * 40, "--first-bad", "b" * 40, "--variant", GLU],
    "worker-intake": ["worker", "--intake", "--no-github"],
}


@pytest.fixture()
def unusable_state(tmp_path: Path) -> dict[str, str]:
    """An environment whose state directory is a file: it cannot be used as given."""
    state = tmp_path / "state"
    state.write_text("not a folder\n", encoding="utf-8")
    (tmp_path / "builds").mkdir()
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(state),
        "SPYRE_CI_BUILD_INDEX": str(tmp_path / "builds"),  # pending check gets past it
        "SPYRE_CI_GITHUB_TOKEN": "t",  # bisect gets past it; GitHub is never asked
        "SPYRE_CI_GITHUB_URL": "http://127.0.0.1:9",
    }
    for name in ("SPYRE_CI_REDIS_URL", "SPYRE_CI_INVENTORY", "SPYRE_CI_IMPACT_MAP"):
        env.pop(name, None)
    return env


@pytest.mark.parametrize("argv", list(STATE_COMMANDS.values()), ids=list(STATE_COMMANDS))
def test_a_state_directory_that_cannot_be_used_is_bad_input_for_every_command(
    unusable_state: dict[str, str], tmp_path: Path, argv: list[str]
) -> None:
    env = dict(unusable_state)
    if argv[0] == "worker":
        env["SPYRE_CI_REDIS_URL"] = "redis://127.0.0.1:1/0"  # a worker needs one; never asked
    result = cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv], env=env)
    assert result.returncode == ExitCode.BAD_INPUT, result
    (line,) = result.stderr.strip().splitlines()  # one line, no traceback
    state = unusable_state["SPYRE_CI_STATE_DIR"]
    assert line.startswith(f"spyre-ci: error: {state}: cannot be written (the state directory")


def test_a_store_that_fails_in_a_usable_state_directory_is_an_outage(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "history.sqlite3").write_bytes(b"\x00garbage" * 512)
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}
    result = cli("runs", "list", env=env)
    assert result.returncode == ExitCode.INFRASTRUCTURE, result
    assert "cannot open the History database" in result.stderr


# -- checks that answer "no": 5, never 1 -----------------------------------------------------


def _state(tmp_path: Path, records: list) -> dict[str, str]:  # type: ignore[type-arg]
    state = tmp_path / "state"
    _save(SQLiteHistory(state / "history.sqlite3"), records)
    return {**os.environ, "SPYRE_CI_STATE_DIR": str(state)}


def test_readiness_ready_is_0(tmp_path: Path) -> None:
    env = _state(tmp_path, _healthy())
    result = cli("readiness", "--now", _now(), "--l2-since", _l2_since(), env=env)
    assert result.returncode == ExitCode.OK, result.stdout
    assert "READY" in result.stdout


def test_readiness_not_enough_data_is_5(tmp_path: Path) -> None:
    result = cli("readiness", "--now", _now(), env=_state(tmp_path, []))
    assert result.returncode == ExitCode.CHECK_FAILED, result
    assert "NOT ENOUGH DATA" in result.stdout


def test_readiness_bad_input_is_2(tmp_path: Path) -> None:
    result = cli("readiness", "--days", "0", env=_state(tmp_path, []))
    assert result.returncode == ExitCode.BAD_INPUT, result


def test_history_check_without_suspects_is_0(tmp_path: Path) -> None:
    result = cli("history", "check", env=_state(tmp_path, [_record("ok-1", 1)]))
    assert result.returncode == ExitCode.OK, result
    assert "no suspect runs among the last 1" in result.stdout


def test_history_check_with_a_run_to_confirm_or_forget_is_5(tmp_path: Path) -> None:
    held = _record("held-1", 1, state=RunState.HELD)  # History has not learned it
    result = cli("history", "check", env=_state(tmp_path, [held]))
    assert result.returncode == ExitCode.CHECK_FAILED, result
    assert "held-1  [held]  held back" in result.stdout
    assert "`spyre-ci history confirm held-1` or `spyre-ci history forget held-1`" in result.stdout


@pytest.mark.parametrize(
    ("outcomes", "code"),
    [
        ([CULPRIT, WINDOW, FLAKY], ExitCode.OK),
        ([CULPRIT, NOT_REPRODUCED], ExitCode.CHECK_FAILED),
        ([FAILS_AT_BASE], ExitCode.CHECK_FAILED),
        ([UNDECIDABLE], ExitCode.CHECK_FAILED),
    ],
)
def test_bisect_s_code_from_its_answers(outcomes: list[str], code: ExitCode) -> None:
    answers = {f"v{i}": {"outcome": outcome} for i, outcome in enumerate(outcomes)}
    assert bisect_exit_code(answers) is code


@pytest.mark.slow  # a minute of real test processes; the answer's code is tested above
def test_bisect_without_an_answer_in_the_window_is_5(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Every commit of the window replayed and the variant still passes: no culprit, a
    check that answered "no" (it never ran the change that broke it)."""
    window = Window()
    harmless(window, 1)
    bad = window.serve(github_api)
    env = env_for(github_api, tmp_path / "state")
    done = bisect(env, "--last-good", BASE, "--first-bad", bad, "--variant", GLU, "--json")
    assert done.returncode == ExitCode.CHECK_FAILED, done.stdout + done.stderr
    assert json.loads(done.stdout)["variants"][GLU]["outcome"] == "not_reproduced"


# -- pending check: 1 only when a deferred change newly fails --------------------------------


def test_pending_list_is_0(tmp_path: Path) -> None:
    result = cli("pending", "list", env={**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path)})
    assert result.returncode == ExitCode.OK, result
    assert "no deferred changes" in result.stdout


def test_pending_check_with_a_change_no_build_holds_yet_is_0(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Waiting for a build is what a deferred change does: nothing failed, nothing to act on."""
    head = "1" * 40
    pending.record(tmp_path / "state", entry(head, "2026-12-02T12:00:00Z"))
    commit = {"sha": head, "message": "[ATen] softmax kernel", "files": []}
    github_api.add_commits("pytorch/pytorch", "b" * 40, head, [commit])  # GitHub knows it
    (tmp_path / "builds").mkdir()  # an index that holds no build
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "SPYRE_CI_BUILD_INDEX": str(tmp_path / "builds"),
        "SPYRE_CI_ENV_CACHE": str(tmp_path / "envs"),
        "SPYRE_CI_GITHUB_URL": github_api.url,
        "SPYRE_CI_GITHUB_TOKEN": github_api.token,
    }
    result = cli("pending", "check", env=env)
    assert result.returncode == ExitCode.OK, result
    assert "1 change(s) still waiting for a build" in result.stdout
    assert [e.head for e in pending.open_entries(tmp_path / "state")] == [head]


@pytest.mark.parametrize(
    ("returncode", "code"),
    [
        (0, ExitCode.OK),
        (1, ExitCode.NEW_FAILURES),
        (2, ExitCode.BAD_INPUT),
        (3, ExitCode.INFRASTRUCTURE),
        (4, ExitCode.NOT_TESTED),
        (130, ExitCode.INTERRUPTED),
        (-9, ExitCode.INFRASTRUCTURE),  # killed: it could not run
        (5, ExitCode.INFRASTRUCTURE),  # no run answers a check's "no"
        (141, ExitCode.INFRASTRUCTURE),
    ],
)
def test_a_deferred_run_s_exit_status_in_the_scheme(returncode: int, code: ExitCode) -> None:
    assert deferred_code(returncode) is code


@pytest.mark.parametrize(
    ("codes", "code"),
    [
        ([], ExitCode.OK),  # nothing a build holds yet
        ([0, 0], ExitCode.OK),
        ([0, 4], ExitCode.NOT_TESTED),  # a deferred run without a verdict on its change
        ([4, 2, 0], ExitCode.BAD_INPUT),
        ([2, 3], ExitCode.INFRASTRUCTURE),  # a build or a deferred run's tests could not run
        ([3, 130], ExitCode.INTERRUPTED),
        ([3, 1, 130, 4], ExitCode.NEW_FAILURES),  # a change that newly fails: act on it
    ],
)
def test_pending_check_s_code_over_several_changes(codes: list[int], code: ExitCode) -> None:
    assert check_code([ExitCode(c) for c in codes]) is code


def test_a_deferred_run_that_ended_outside_the_scheme_leaves_its_change_pending() -> None:
    from workflows.cli.commands.pending import VERDICTS

    assert {int(c) for c in VERDICTS} == {0, 1, 4}  # the codes that judge the change
    assert deferred_code(-9) not in VERDICTS and deferred_code(130) not in VERDICTS


# -- the rest: ok, and bad input ---------------------------------------------------------------


def test_suites_lint_is_0_for_good_specs_and_2_for_bad_ones(tmp_path: Path) -> None:
    assert cli("suites", "lint").returncode == ExitCode.OK
    bad = tmp_path / "bad.yaml"
    bad.write_text("test_suite_config: [unclosed\n", encoding="utf-8")
    result = cli("suites", "lint", str(bad))
    assert result.returncode == ExitCode.BAD_INPUT, result
    assert str(bad) in result.stdout


def test_worker_without_redis_is_bad_input() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPYRE_CI_REDIS_URL"}
    for argv in (["worker"], ["worker", "status"]):
        result = cli(*argv, env=env)
        assert result.returncode == ExitCode.BAD_INPUT, result
        assert "set SPYRE_CI_REDIS_URL" in result.stderr


def test_trigger_with_redis_down_is_an_outage() -> None:
    env = {**os.environ, "SPYRE_CI_REDIS_URL": "redis://127.0.0.1:1/0"}
    started = time.monotonic()
    result = cli("trigger", "nightly", "--sha", "a" * 40, env=env)
    assert result.returncode == ExitCode.INFRASTRUCTURE, result
    assert "not enqueued" in result.stderr
    assert time.monotonic() - started < 60
