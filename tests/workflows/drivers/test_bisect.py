"""Virtual bisect: a window of commits built here from the installed torch's own files and
served by a local GitHub, listed through the product's GitHub client, replayed on the real
torch and bisected with real test processes (the warm runner on)."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contracts.event import TriggerEvent
from relay.triage import checked_verdict
from suites.model import Outcome, Status
from tests.servers.github_api import GitHubAPIServer, github_api  # noqa: F401 - fixture
from tests.testing.cli import spyre_ci
from tests.testing.paths import GLU_SPEC
from tests.workflows.run_context import run_context
from workflows.cli.commands.run import print_summary
from workflows.drivers.bisect.answer import answer, forensics_entry
from workflows.drivers.bisect.search import (
    BAD,
    CULPRIT,
    FLAKY,
    GOOD,
    NOT_REPRODUCED,
    UNDECIDABLE,
    WINDOW,
    Search,
    Step,
    decide,
)
from workflows.drivers.bisect.window import Commit, classify, replayable_prefix, state_diff
from workflows.run import finishing, pipeline, run_model
from workflows.run.on_build import torch_git_sha
from workflows.runner.shard_runner import ShardRun
from workflows.stores.history import SQLiteHistory
from workflows.stores.sources import installed_torch

REPO = "pytorch/pytorch"
GLU = "glu::compare_cpu::nn.functional.glu::float32"
ROOT = installed_torch()[0]
BASE = torch_git_sha()
FUNCTIONAL = "torch/nn/functional.py"
SOFTMAX_CPP = "aten/src/ATen/native/SoftMax.cpp"
CPP_FILE = {
    "filename": SOFTMAX_CPP,
    "patch": "@@ -10,3 +10,3 @@\n int a;\n-int b = 1;\n+int b = 2;\n int c;",
}

Edit = Callable[[str], str]


def _insert_before(anchor: str, line: str) -> Edit:
    def edit(text: str) -> str:
        assert anchor in text, anchor
        return text.replace(anchor, line + anchor, 1)

    return edit


GLU_CHECK = """    if input.dim() == 0:
        raise RuntimeError(
            "glu does not support scalars because halving size must be even"
        )
"""
BREAK_GLU: Edit = lambda t: t.replace(  # noqa: E731 - the shipped example's edit
    GLU_CHECK,
    "    if input.dim() < 2:\n"
    "        # A 1-D input has no batch dimension: say so here rather than in the kernel.\n"
    "        raise RuntimeError(\n"
    '            f"glu expects an input with a batch dimension (2-D or more), got '
    '{input.dim()}-D"\n'
    "        )\n",
)
# An intermittent failure: the n-th test process at a point (one overlay, `SPYRE_CI_CHANGE`)
# fails when letter n of $BISECT_FLAKY_PATTERN is F.
FLAKY_GLU = _insert_before(
    GLU_CHECK,
    "    import os as _os\n"
    '    _where = _os.environ.get("BISECT_FLAKY_DIR")\n'
    "    if _where:\n"
    '        _key = _os.environ.get("SPYRE_CI_CHANGE", "").replace("/", "_")\n'
    "        _runs = _os.path.join(_where, _key)\n"
    "        _seen = open(_runs).read().split() if _os.path.exists(_runs) else []\n"
    "        if str(_os.getpid()) not in _seen:\n"
    "            _seen.append(str(_os.getpid()))\n"
    '            with open(_runs, "a") as _f:\n'
    '                _f.write(f"{_os.getpid()}\\n")\n'
    '        _pattern = _os.environ["BISECT_FLAKY_PATTERN"]\n'
    "        _n = min(_seen.index(str(_os.getpid())), len(_pattern) - 1)\n"
    '        if _pattern[_n] == "F":\n'
    '            raise RuntimeError("glu failed this time")\n',
)


class Window:
    """Commits built on the installed torch's text, each with GitHub's hunks-only patches."""

    def __init__(self) -> None:
        assert ROOT is not None
        self.texts: dict[str, str] = {}
        self.commits: list[dict[str, Any]] = []

    def python(self, title: str, **edits: Edit) -> str:
        files = []
        for key, edit in edits.items():
            path = key.replace("__", "/") + ".py"
            before = self.texts.get(path) or (ROOT / path).read_text(encoding="utf-8")
            after = edit(before)
            assert after != before, title
            hunks = list(
                difflib.unified_diff(before.splitlines(True), after.splitlines(True), n=3)
            )[2:]
            files.append({"filename": path, "status": "modified", "patch": "".join(hunks)})
            self.texts[path] = after
        return self._add(title, files)

    def cpp(self, title: str) -> str:
        return self._add(title, [dict(CPP_FILE)])

    def _add(self, title: str, files: list[dict[str, Any]]) -> str:
        sha = hashlib.sha1(f"{len(self.commits)} {title}".encode()).hexdigest()
        author = f"Dev {len(self.commits)}"
        self.commits.append(
            {"sha": sha, "message": f"{title}\n\nbody", "author": author, "files": files}
        )
        return sha

    def serve(self, gh: GitHubAPIServer) -> str:
        """Register the window on `gh`; its first bad sha (its last commit)."""
        gh.add_commits(REPO, BASE, self.commits[-1]["sha"], self.commits)
        return str(self.commits[-1]["sha"])


def harmless(window: Window, n: int) -> str:
    return window.python(
        f"Document softsign ({n})",
        torch__nn__functional=_insert_before("def softsign(input):", f"# note {n}\n"),
    )


def env_for(gh: GitHubAPIServer, state: Path, **more: str) -> dict[str, str]:
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(state),
        "SPYRE_CI_GITHUB_URL": gh.url,
        "SPYRE_CI_GITHUB_TOKEN": gh.token,
        **more,
    }
    env.pop("SPYRE_CI_ZYGOTE", None)  # the default path: the warm runner on
    return env


def bisect(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return spyre_ci("bisect", "--specs", str(GLU_SPEC), "--test-timeout", "120", *args, env=env)


def _finish(
    history: SQLiteHistory, inventory: Path, out: Path, run_id: str, sha: str, fail: bool
) -> run_model.FinishedRun:
    """A run recorded as the pipeline records it; GLU fails as the broken glu makes it."""
    event = TriggerEvent(kind="push", delivery_id=run_id, repo=REPO, head_sha=sha, source="cli")
    request = run_model.RunRequest(
        run_id=run_id, event=event, out_dir=str(out), inventory=str(inventory),
        specs=(str(GLU_SPEC),), full=True, holdout=0.0, expand=False,
    )  # fmt: skip
    planned = pipeline.plan(request, run_context(history))
    # The run stands for one on a torch that holds `sha` (a push without a diff is otherwise
    # not tested, and a failure of a change that was not tested is never its own).
    assert planned.environment is not None
    planned = replace(planned, environment=replace(planned.environment, tested="tested"))
    message = "RuntimeError: glu expects an input with a batch dimension (2-D or more), got 1-D"

    def outcome(vid: str) -> Outcome:
        if fail and vid == GLU:
            return Outcome(vid, Status.FAILED, 0.1, message)
        return Outcome(vid, Status.PASSED, 0.1, "")

    ids = [v for shard in planned.shards for v in shard]
    return finishing.finish(
        planned,
        [outcome(v) for v in ids],
        run_context(history),
        lambda _name, rerun: ShardRun([outcome(v) for v in rerun]),
    )


@pytest.mark.long
def test_a_run_s_window_names_the_breaking_python_commit_everywhere(
    github_api: GitHubAPIServer,  # noqa: F811
    glu_inventory: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    window = Window()
    harmless(window, 1)
    window.python(
        "Reword atleast_1d", torch__functional=_insert_before("def atleast_1d(", "# 1d\n")
    )
    culprit = window.python("Check glu's batch dimension", torch__nn__functional=BREAK_GLU)
    harmless(window, 2)  # the same file again: the points combine its patches
    window.cpp("Speed up softmax")
    bad = window.serve(github_api)
    state = tmp_path / "state"
    history = SQLiteHistory(state / "history.sqlite3")
    _finish(history, glu_inventory, tmp_path / "good", "push-good", BASE, fail=False)
    finished = _finish(history, glu_inventory, tmp_path / "bad", "push-bad", bad, fail=True)
    print_summary(finished)  # what `spyre-ci run` prints at its end: where to go next
    hint = "next: `spyre-ci bisect --run push-bad` names the upstream commit in the window of 1"
    assert hint in capsys.readouterr().out
    env = env_for(github_api, state)

    done = bisect(env, "--run", "push-bad")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f'culprit {culprit[:12]} "Check glu\'s batch dimension" by Dev 2' in done.stdout
    record = json.loads((state / "bisect" / "push-bad.json").read_text())
    (found,) = record["windows"]
    assert [c["replayable"] for c in found["commits"]] == [True, True, True, True, False]
    # The C++ commit is replayed by assumption (nothing of it: it has no Python part).
    assert [c.get("assumed") for c in found["commits"]] == [None] * 4 + [SOFTMAX_CPP]
    assert found["replayable_points"] == 5 and found["torch"]["on_base"] is True
    glu = found["variants"][GLU]
    assert glu["outcome"] == "culprit" and glu["culprit"]["sha"] == culprit
    # A culprit before every commit replayed by assumption: no assumption, confidence kept.
    assert glu["culprit"]["replayed"] is True and glu["confidence"] == "high"
    assert "assumed" not in glu and "assuming" not in glu["summary"]
    # Base, top (every commit's Python part), then halves: two agreeing runs each.
    assert [(s["applied"], s["decision"]) for s in glu["steps"]] == [
        (0, "good"), (5, "bad"), (2, "good"), (3, "bad"),
    ]  # fmt: skip
    for step in glu["steps"]:
        assert len(step["runs"]) == 2 and len(set(step["runs"])) == 1, step
    assert all(r == "failed" for s in glu["steps"] if s["decision"] == "bad" for r in s["runs"])
    # GitHub was asked through the client: the compare, then each commit.
    assert github_api.find("GET", rf"/compare/{BASE}\.\.\.{bad}")
    assert len(github_api.find("GET", r"/repos/pytorch/pytorch/commits/")) == 5

    out = tmp_path / "bad"
    entry = json.loads((out / "forensics.json").read_text())["failures"][GLU]
    assert entry["bisect"]["culprit"]["sha"] == culprit
    verdict = json.loads((out / "callback.json").read_text())["workflow"]["triage_verdict"]
    assert verdict["category"] == "upstream" and verdict["confidence"] == "high"
    assert verdict["suspected_upstream"]["commit"] == culprit
    checked = checked_verdict(verdict)  # what the relay keeps of it
    assert checked is not None and checked["suspected_upstream"]["commit"] == culprit
    assert f"bisect: culprit {culprit[:12]}" in (out / "report.md").read_text()
    assert f"bisect: culprit {culprit[:12]}" in (out / "report.html").read_text()
    shown = spyre_ci("runs", "show", "push-bad", env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"bisect: culprit {culprit[:12]}" in shown.stdout
    assert "triage: upstream (high confidence)" in shown.stdout
    pages = spyre_ci("runs", "pages", "--out", str(tmp_path / "pages"), env=env)
    assert pages.returncode == 0, pages.stderr
    html = "".join(p.read_text() for p in (tmp_path / "pages" / "variants").glob("*.html"))
    assert f"bisect: culprit {culprit[:12]}" in html


@pytest.mark.long
def test_a_culprit_behind_a_cpp_commit_is_named_assuming_its_cpp_part(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    window = Window()
    harmless(window, 1)
    cpp = window.cpp("Speed up softmax")
    culprit = window.python("Check glu's batch dimension", torch__nn__functional=BREAK_GLU)
    harmless(window, 2)
    bad = window.serve(github_api)
    env = env_for(github_api, tmp_path / "state")

    done = bisect(env, "--last-good", BASE, "--first-bad", bad, "--variant", GLU, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 by assumption" in done.stderr and "points 0..4 can run" in done.stderr
    found = json.loads(done.stdout)
    assert found["replayable_points"] == 4
    assert found["commits"][1]["replayable"] is False
    assert found["commits"][1]["assumed"] == SOFTMAX_CPP
    glu = found["variants"][GLU]
    assert glu["outcome"] == CULPRIT and glu["culprit"]["sha"] == culprit
    assert glu["culprit"]["replayed"] is True and "window" not in glu
    # Named past the C++ commit, saying what it assumed of it, one level lower than high.
    assert glu["summary"].startswith(f'culprit {culprit[:12]} "Check glu\'s batch dimension"')
    assert (
        f'assuming the C++ part(s) of {cpp[:12]} "Speed up softmax" ({SOFTMAX_CPP}) before it, '
        "not built, did not change the outcome" in glu["summary"]
    )
    assert glu["assumed"] == [{"sha": cpp, "title": "Speed up softmax", "skipped": SOFTMAX_CPP}]
    assert glu["confidence"] == "medium"
    assert [(s["applied"], s["decision"]) for s in glu["steps"]] == [
        (0, "good"), (4, "bad"), (2, "good"), (3, "bad"),
    ]  # fmt: skip
    assert all(len(s["runs"]) == 2 for s in glu["steps"])
    kept = tmp_path / "state" / "bisect" / f"{BASE[:12]}-{bad[:12]}.json"
    assert json.loads(kept.read_text())["windows"][0]["variants"][GLU]["outcome"] == CULPRIT


@pytest.mark.parametrize(
    ("pattern", "outcome", "top_runs", "confidence"),
    [
        ("PFFF", "culprit", ["passed", "failed", "failed", "failed"], "medium"),
        # Fast twin: the pure search's FPFPF -> undecidable; the real runs' path is PFFF's.
        pytest.param(
            "FPFPF",
            "flaky",
            ["failed", "passed", "failed", "passed", "failed"],
            "low",
            marks=pytest.mark.slow,
        ),
    ],
)
@pytest.mark.long
def test_a_flaky_step_gets_more_runs_and_a_majority_or_no_verdict(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
    pattern: str,
    outcome: str,
    top_runs: list[str],
    confidence: str,
) -> None:
    window = Window()
    harmless(window, 1)
    flaky = window.python("Check glu's input", torch__nn__functional=FLAKY_GLU)
    bad = window.serve(github_api)
    (tmp_path / "flaky").mkdir()
    env = env_for(
        github_api,
        tmp_path / "state",
        BISECT_FLAKY_DIR=str(tmp_path / "flaky"),
        BISECT_FLAKY_PATTERN=pattern,
    )

    done = bisect(env, "--last-good", BASE, "--first-bad", bad, "--variant", GLU, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    glu = json.loads(done.stdout)["variants"][GLU]
    assert glu["outcome"] == outcome and glu["confidence"] == confidence
    top = next(s for s in glu["steps"] if s["applied"] == 2)
    assert top["runs"] == top_runs
    if outcome == "culprit":
        assert glu["culprit"]["sha"] == flaky and top["decision"] == "bad"
    else:
        assert top["decision"] == "undecidable" and glu["summary"].startswith("flaky: undecidable")
        assert "culprit" not in glu


@pytest.mark.long
def test_a_step_that_cannot_run_stops_the_bisect_as_infrastructure(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    window = Window()
    window.python("Check glu's batch dimension", torch__nn__functional=BREAK_GLU)
    bad = window.serve(github_api)
    state = tmp_path / "state"
    # No test process can start under 64 MB: the base point never runs a test.
    done = bisect(
        env_for(github_api, state),
        "--last-good", BASE, "--first-bad", bad, "--variant", GLU, "--memory-mb", "64",
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert "infrastructure error" in done.stderr and "the bisect stopped" in done.stderr
    assert "point 0" in done.stderr
    assert "culprit" not in done.stdout
    assert not (state / "bisect" / f"{BASE[:12]}-{bad[:12]}.json").exists()


def test_github_unreachable_is_infrastructure(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SPYRE_CI_STATE_DIR": str(tmp_path / "state"),
        "SPYRE_CI_GITHUB_URL": "http://127.0.0.1:9",  # nothing listens there
        "SPYRE_CI_GITHUB_TOKEN": "t",
    }
    done = bisect(env, "--last-good", "a" * 40, "--first-bad", "b" * 40, "--variant", GLU)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "GitHub did not answer for the window" in done.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--last-good", "a" * 40, "--first-bad", "c" * 40, "--variant", GLU], "GitHub refused"),
        (["--last-good", "a" * 40, "--first-bad", "e" * 40, "--variant", GLU], "holds no commit"),
        (["--last-good", "a" * 40, "--first-bad", "a" * 40, "--variant", GLU], "the same commit"),
        (["--last-good", "main", "--first-bad", "b" * 40, "--variant", GLU], "not a git sha"),
        (["--last-good", "a" * 40, "--first-bad", "b" * 40], "--variant ID is needed"),
        (["--last-good", "a" * 40, "--variant", GLU], "--first-bad SHA is needed"),
        (["--run", "push-nowhere"], "no run 'push-nowhere' in History"),
    ],
)
def test_bad_input_is_refused_naming_it(
    github_api: GitHubAPIServer,  # noqa: F811
    tmp_path: Path,
    args: list[str],
    expected: str,
) -> None:
    github_api.add_commits(REPO, "a" * 40, "e" * 40, [])
    done = bisect(env_for(github_api, tmp_path / "state"), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert expected in done.stderr


def test_no_github_token_is_bad_input(tmp_path: Path) -> None:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPYRE_CI_GITHUB_TOKEN", None)
    done = bisect(env, "--last-good", "a" * 40, "--first-bad", "b" * 40, "--variant", GLU)
    assert done.returncode == 2 and "SPYRE_CI_GITHUB_TOKEN" in done.stderr


def test_an_unknown_variant_is_bad_input(github_api: GitHubAPIServer, tmp_path: Path) -> None:  # noqa: F811
    window = Window()
    harmless(window, 1)
    bad = window.serve(github_api)
    env = env_for(github_api, tmp_path / "state")
    done = bisect(
        env, "--last-good", BASE, "--first-bad", bad, "--variant", "glu::nope::x::float32"
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no such variant in the specs: glu::nope::x::float32" in done.stderr


# -- the pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ("", None),
        ("F", None),
        ("FF", BAD),
        ("PP", GOOD),
        ("FP", None),
        ("FPF", None),
        ("FPFF", BAD),
        ("PFPP", GOOD),
        ("FPFP", None),
        ("FPFPF", UNDECIDABLE),
        ("PFPFP", UNDECIDABLE),
    ],
)
def test_a_step_is_decided_by_two_agreeing_runs_or_a_lead_of_two(
    runs: str, expected: str | None
) -> None:
    assert decide([r == "F" for r in runs]) == expected


def test_commits_are_replayable_only_without_files_that_need_a_build() -> None:
    py = {
        "filename": "torch/nn/functional.py",
        "status": "modified",
        "patch": "@@ -1 +1 @@\n-a\n+b",
    }
    plain = classify("1" * 40, "m", "a", [py, {"filename": "test/test_nn.py"}])
    assert plain.replayable and plain.assumed == "" and "assumed" not in plain.to_json()
    # Only files that need a build keep it: replayed by assumption (its Python part).
    cpp = classify("2" * 40, "m", "a", [py, {"filename": "torch/csrc/Module.cpp", "patch": "x"}])
    assert not cpp.replayable and "torch/csrc/Module.cpp needs a build" in cpp.why
    assert cpp.assumed == "torch/csrc/Module.cpp" and cpp.replays and cpp.has_python
    assert cpp.to_json()["assumed"] == "torch/csrc/Module.cpp"
    yaml = classify(
        "4" * 40, "m", "a", [{"filename": "aten/src/ATen/native/native_functions.yaml"}]
    )
    assert not yaml.replayable and yaml.replays and not yaml.has_python
    # Anything else that keeps it stops the prefix as before, build files or not.
    no_patch = classify("3" * 40, "m", "a", [{"filename": "torch/nn/functional.py"}, CPP_FILE])
    assert not no_patch.replayable and "GitHub sent no patch" in no_patch.why
    assert not no_patch.replays and no_patch.assumed == ""
    package_file = classify("5" * 40, "m", "a", [CPP_FILE, {"filename": "torch/lib/x.json"}])
    assert not package_file.replays and "not a Python module" in package_file.why
    renamed = {"filename": "torch/csrc/x.cpp", "previous_filename": "torch/x.py", "patch": "x"}
    assert not classify("6" * 40, "m", "a", [renamed]).replays


def test_a_point_is_every_earlier_commit_applied_in_sequence() -> None:
    window = Window()
    harmless(window, 1)
    window.python("Check glu's batch dimension", torch__nn__functional=BREAK_GLU)
    harmless(window, 2)
    window.cpp("Speed up softmax")
    commits = [classify(c["sha"], c["message"], c["author"], c["files"]) for c in window.commits]
    assert ROOT is not None
    assert replayable_prefix(commits, ROOT) == (4, "")  # the C++ commit: by assumption
    assert state_diff(commits, 0, ROOT) == ""
    diff = state_diff(commits, 3, ROOT)
    assert diff.count("diff --git a/torch/nn/functional.py") == 1  # one file, combined
    assert "+# note 1" in diff and "+# note 2" in diff and "batch dimension" in diff
    assert "+# note 2" not in state_diff(commits, 2, ROOT)
    assert state_diff(commits, 4, ROOT) == diff  # nothing of the C++ commit
    # A commit whose patch does not apply to what the earlier ones left is not replayed.
    stale = classify("9" * 40, "stale", "a", window.commits[1]["files"])
    assert replayable_prefix([*commits[:2], stale], ROOT)[0] == 2
    stale_cpp = classify("8" * 40, "stale", "a", [*window.commits[1]["files"], CPP_FILE])
    assert stale_cpp.assumed and replayable_prefix([*commits[:2], stale_cpp], ROOT)[0] == 2


def test_a_commit_blocked_only_by_a_build_is_replayed_by_its_python_part() -> None:
    window = Window()
    harmless(window, 1)
    window.python("Check glu's batch dimension", torch__nn__functional=BREAK_GLU)
    window.commits[-1]["files"].append(dict(CPP_FILE))  # and a C++ part
    window.cpp("Speed up softmax")
    harmless(window, 2)
    commits = [classify(c["sha"], c["message"], c["author"], c["files"]) for c in window.commits]
    assert [c.assumed for c in commits] == ["", SOFTMAX_CPP, SOFTMAX_CPP, ""]
    assert ROOT is not None
    assert replayable_prefix(commits, ROOT) == (4, "")
    diff = state_diff(commits, 2, ROOT)
    assert "batch dimension" in diff and "SoftMax" not in diff  # the Python part only
    assert state_diff(commits, 3, ROOT) == diff  # nothing of a C++-only commit
    # A commit GitHub sent no patch of still stops the prefix, a build file or not.
    no_patch = classify(
        "7" * 40, "Big refactor", "a", [{"filename": FUNCTIONAL, "status": "modified"}, CPP_FILE]
    )
    top, why = replayable_prefix([*commits[:3], no_patch, commits[3]], ROOT)
    assert top == 3 and f"{FUNCTIONAL}: GitHub sent no patch of it" in why


def _search(steps: Sequence[tuple[int, str, int]], top: int, complete: bool) -> Search:
    search = Search(GLU, top, complete)
    for point, decision, runs in steps:
        search.learn(Step(point, ("failed" if decision == BAD else "passed",) * runs, decision))
    return search


def test_the_window_s_last_commit_unreplayable_is_the_culprit_by_elimination() -> None:
    commits = [
        classify("1" * 40, "py", "a", [{"filename": "torch/a.py", "patch": "@@ -1 +1 @@\n-a\n+b"}]),
        classify("2" * 40, "json change", "b", [{"filename": "torch/lib/x.json", "patch": "x"}]),
    ]
    search = _search([(0, GOOD, 2), (1, GOOD, 2)], top=1, complete=False)
    found = answer(search, commits, "0" * 40, "2" * 40, on_base=True)
    assert found["culprit"] == {
        "sha": "2" * 40, "title": "json change", "author": "b", "replayed": False,
    }  # fmt: skip
    assert found["confidence"] == "medium" and "by elimination" in found["summary"]
    off_base = answer(search, commits, "0" * 40, "2" * 40, on_base=False)
    assert off_base["confidence"] == "low" and "not the window's base" in off_base["summary"]


def test_a_failure_at_the_base_or_none_at_the_top_is_no_answer() -> None:
    commits = [
        classify("1" * 40, "py", "a", [{"filename": "torch/a.py", "patch": "@@ -1 +1 @@\n-a\n+b"}])
    ]
    base = answer(_search([(0, BAD, 2)], 1, True), commits, "0" * 40, "1" * 40, True)
    assert base["outcome"] == "fails_at_base" and "culprit" not in base
    top = answer(_search([(0, GOOD, 2), (1, GOOD, 2)], 1, True), commits, "0" * 40, "1" * 40, True)
    assert top["outcome"] == "not_reproduced"


def _commits(*kinds: str) -> list[Commit]:
    """A window by kind: `py` (replayable), `cpp` (C++ only), `mixed` (Python and C++), `no
    patch` (a module GitHub sent no patch of)."""
    py = {"filename": "torch/a.py", "patch": "@@ -1 +1 @@\n-a\n+b"}
    files = {
        "py": [py],
        "cpp": [CPP_FILE],
        "mixed": [py, CPP_FILE],
        "no patch": [{"filename": "torch/b.py"}],
    }
    return [
        classify(str(n + 1) * 40, f"{kind} {n}", f"dev {n}", files[kind])
        for n, kind in enumerate(kinds)
    ]


def test_a_culprit_after_a_cpp_commit_is_named_one_level_lower() -> None:
    commits = _commits("py", "cpp", "py", "py")
    search = _search([(0, GOOD, 2), (4, BAD, 2), (2, GOOD, 2), (3, BAD, 2)], 4, True)
    found = answer(search, commits, "0" * 40, "4" * 40, on_base=True)
    assert found["outcome"] == CULPRIT and found["culprit"]["sha"] == "3" * 40
    assert found["confidence"] == "medium"  # high, one level lower
    assumption = f'assuming the C++ part(s) of {"2" * 12} "cpp 1" ({SOFTMAX_CPP}) before it'
    assert assumption in found["summary"]
    assert [c["sha"] for c in found["assumed"]] == ["2" * 40]
    assert forensics_entry(found)["assumed"] == ["2" * 40]
    off_base = answer(search, commits, "0" * 40, "4" * 40, on_base=False)
    assert off_base["confidence"] == "low"


def test_a_culprit_before_every_cpp_commit_keeps_its_confidence() -> None:
    commits = _commits("py", "py", "cpp", "py")
    search = _search([(0, GOOD, 2), (4, BAD, 2), (2, BAD, 2), (1, GOOD, 2)], 4, True)
    found = answer(search, commits, "0" * 40, "4" * 40, on_base=True)
    assert found["outcome"] == CULPRIT and found["culprit"]["sha"] == "2" * 40
    assert found["confidence"] == "high"
    assert "assumed" not in found and "assuming" not in found["summary"]
    assert "assumed" not in forensics_entry(found)


def test_a_culprit_with_a_cpp_part_is_named_by_its_python_part() -> None:
    commits = _commits("py", "mixed", "py")
    search = _search([(0, GOOD, 2), (3, BAD, 2), (1, GOOD, 2), (2, BAD, 2)], 3, True)
    found = answer(search, commits, "0" * 40, "3" * 40, on_base=True)
    assert found["outcome"] == CULPRIT and found["culprit"]["sha"] == "2" * 40
    assert found["culprit"]["replayed"] is True
    assert found["culprit"]["assumed"] == SOFTMAX_CPP
    assert (
        f"its Python part makes it fail, assuming its C++ part ({SOFTMAX_CPP}), not built, "
        "did not change the outcome" in found["summary"]
    )
    assert found["confidence"] == "medium"
    # A C++-only commit between a passing and a failing point: the same torch, flaky runs.
    commits = _commits("py", "cpp", "py")
    found = answer(search, commits, "0" * 40, "3" * 40, on_base=True)
    assert found["outcome"] == FLAKY and found["confidence"] == "low" and "culprit" not in found
    assert "the points before and after it run the same torch" in found["summary"]


def test_a_top_that_passes_with_cpp_commits_in_it_is_the_window_of_their_cpp_parts() -> None:
    commits = _commits("py", "cpp", "py", "mixed", "py")
    search = _search([(0, GOOD, 2), (5, GOOD, 2)], 5, True)
    assert search.answer == NOT_REPRODUCED
    found = answer(search, commits, "0" * 40, "5" * 40, on_base=True)
    assert found["outcome"] == WINDOW and "culprit" not in found
    window = found["window"]
    assert window["last_good"] == "1" * 40 and window["first_bad"] == "4" * 40
    assert window["commits"] == ["2" * 40, "4" * 40]
    assert [c["sha"] for c in window["assumed"]] == ["2" * 40, "4" * 40]
    assert window["not_replayable"]["sha"] == "2" * 40
    assert f'the C++ part of {"2" * 12} "cpp 1" by dev 1 ({SOFTMAX_CPP})' in found["summary"]
    assert f'the C++ part of {"4" * 12} "mixed 3" by dev 3' in found["summary"]
    # A Python commit replayed between them: independence assumed, medium one level lower.
    assert "assuming independence" in found["summary"] and found["confidence"] == "low"
    assert forensics_entry(found)["window"] == {"last_good": "1" * 40, "first_bad": "4" * 40}

    # One C++ commit, the window's last: the culprit by elimination, nothing assumed.
    commits = _commits("py", "cpp")
    found = answer(
        _search([(0, GOOD, 2), (2, GOOD, 2)], 2, True), commits, "0" * 40, "2" * 40, True
    )
    assert found["outcome"] == WINDOW and found["culprit"]["sha"] == "2" * 40
    assert found["culprit"]["replayed"] is False and found["confidence"] == "medium"
    assert "by elimination: its C++ part" in found["summary"]
    assert "assuming" not in found["summary"]
    # ... not the last: the commit after it replayed without it, independence assumed.
    commits = _commits("py", "cpp", "py")
    found = answer(
        _search([(0, GOOD, 2), (3, GOOD, 2)], 3, True), commits, "0" * 40, "3" * 40, True
    )
    assert found["culprit"]["sha"] == "2" * 40 and found["confidence"] == "low"
    assert f"none of the 1 commit(s) replayed after {'2' * 12}" in found["summary"]

    # A C++ part replayed by assumption, then a commit that cannot be replayed.
    commits = _commits("py", "mixed", "py", "no patch", "py")
    found = answer(
        _search([(0, GOOD, 2), (3, GOOD, 2)], 3, False), commits, "0" * 40, "5" * 40, True
    )
    assert found["outcome"] == WINDOW
    assert found["window"]["commits"] == ["2" * 40, "4" * 40, "5" * 40]
    assert found["window"]["last_good"] == "1" * 40 and found["window"]["first_bad"] == "5" * 40
    assert found["window"]["not_replayable"]["sha"] == "4" * 40
    assert "GitHub sent no patch" in found["summary"]
    assert "and the 1 commit(s) after it" in found["summary"]
    assert found["confidence"] == "low"

    # Without a commit replayed by assumption it is not reproduced, as before.
    found = answer(
        _search([(0, GOOD, 2), (2, GOOD, 2)], 2, True),
        _commits("py", "py"),
        "0" * 40,
        "2" * 40,
        True,
    )
    assert found["outcome"] == NOT_REPRODUCED and "window" not in found
