"""Hostile command-line input gets one clear error line naming what and where, exit code 2,
no traceback, and leaves the state directory (History, inventory cache) and the working
directory as they were. Paths given relative to the directory a command starts in mean that
directory everywhere, also to shards and to a `runs resume` started somewhere else.

Every case runs the CLI's entry point (`workflows.cli.main.main`, what `python -m workflows`
calls) in this process, in a fresh directory holding the hostile files under `in/`, with a
fresh, empty SPYRE_CI_STATE_DIR; one case also runs as a subprocess, for the exit code and
the stderr a shell sees.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tests.testing.cli import cli, spyre_ci
from tests.testing.paths import REPO_ROOT, SOFTMAX_PATCH, TINY_SPEC

SOFTMAX_EVENT = REPO_ROOT / "examples" / "events" / "push_softmax_kernel.json"
# A change to the sin kernel: the tiny suite's two sin variants, one per shard.
_KERNELS = "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp"
SIN_PATCH = """\
diff --git a/KERNELS b/KERNELS
--- a/KERNELS
+++ b/KERNELS
@@ -10,3 +10,3 @@ static void sin_kernel(TensorIteratorBase& iter) {
   AT_DISPATCH_FLOATING_TYPES(iter.dtype(), "sin_cpu", [&]() {
-    cpu_kernel(iter, [](scalar_t a) -> scalar_t { return std::sin(a); });
+    cpu_kernel(iter, [](scalar_t a) -> scalar_t { return ::sin(a); });
   });
""".replace("KERNELS", _KERNELS)


def _hostile_files(root: Path) -> None:
    d = root / "in"
    (d / "dir").mkdir(parents=True)
    (d / "binary.json").write_bytes(b"\xff\xfe\x00\x01binary")
    (d / "binary.patch").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (d / "nul.patch").write_bytes(b"diff --git a/x b/x\n\x00\x00\x00\n")
    (d / "text.json").write_text("not json at all\n")
    (d / "list.json").write_text("[1, 2, 3]\n")
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # deeper than json can read
    (d / "empty.patch").write_text("")
    (d / "blank.patch").write_text("  \n\n\t\n")
    (d / "mail.patch").write_text("From: someone\nSubject: a change\n\nno diff here\n")
    (d / "gollum.json").write_text(
        json.dumps(
            {
                "event": "gollum",
                "delivery_id": "wiki-1",
                "payload": {"repository": {"full_name": "pytorch/pytorch"}},
            }
        )
    )
    (d / "impact-entry.json").write_text(
        json.dumps({"format": 1, "variants": {"tiny::compare_cpu::add::float32": "add"}})
    )
    (d / "a-file").write_text("a file where a directory is expected\n")
    # An event whose sibling patch exists but is empty: not "no patch", a broken one.
    shutil.copyfile(SOFTMAX_EVENT, d / "softmax.json")
    (d / "softmax.patch").write_text("")


# (id, argv, fragments the error line holds, extra environment). {inv} is the tiny
# Inventory, {event} the softmax push event, {patch} its diff; `in/...` are relative paths.
CASES: list[tuple[str, list[str], list[str], dict[str, str]]] = [
    # event files
    (
        "event-is-directory",
        ["run", "--event", "in/dir", "--inventory", "{inv}"],
        ["in/dir", "is a directory, not an event file"],
        {},
    ),
    (
        "event-binary",
        ["select", "--event", "in/binary.json", "--inventory", "{inv}"],
        ["in/binary.json", "binary data", "not UTF-8"],
        {},
    ),
    (
        "event-not-json",
        ["run", "--event", "in/text.json", "--inventory", "{inv}"],
        ["in/text.json:1:1", "invalid JSON"],
        {},
    ),
    (
        "event-nested-too-deep",
        ["run", "--event", "in/deep.json", "--inventory", "{inv}"],
        ["in/deep.json", "nested too deep"],
        {},
    ),
    (
        "event-not-object",
        ["select", "--event", "in/list.json", "--inventory", "{inv}"],
        ["in/list.json", "an event file is an object"],
        {},
    ),
    (
        "event-unknown-kind",
        ["run", "--event", "in/gollum.json", "--inventory", "{inv}"],
        ["in/gollum.json", "triggers no run", "'gollum' is not handled"],
        {},
    ),
    (
        "event-missing",
        ["run", "--event", "in/nope.json", "--inventory", "{inv}"],
        ["in/nope.json", "no such event file"],
        {},
    ),
    (
        "event-sibling-patch-empty",
        ["run", "--event", "in/softmax.json", "--inventory", "{inv}"],
        ["in/softmax.patch", "the diff is empty"],
        {},
    ),
    # diffs
    (
        "diff-binary",
        ["run", "--diff", "in/binary.patch", "--inventory", "{inv}"],
        ["in/binary.patch", "not a diff: binary data"],
        {},
    ),
    (
        "diff-nul-bytes",
        ["select", "--diff", "in/nul.patch", "--inventory", "{inv}"],
        ["in/nul.patch", "NUL byte"],
        {},
    ),
    (
        "diff-empty-run",
        ["run", "--diff", "in/empty.patch", "--inventory", "{inv}"],
        ["in/empty.patch", "the diff is empty", "no file changes"],
        {},
    ),
    (
        "diff-blank-select",
        ["select", "--diff", "in/blank.patch", "--inventory", "{inv}"],
        ["in/blank.patch", "the diff is empty"],
        {},
    ),
    (
        "diff-no-file-header",
        ["run", "--diff", "in/mail.patch", "--inventory", "{inv}"],
        ["in/mail.patch", "no `diff --git`"],
        {},
    ),
    (
        "diff-is-directory",
        ["select", "--diff", "in/dir", "--inventory", "{inv}"],
        ["in/dir", "is a directory, not a diff"],
        {},
    ),
    # --history and --impact-map
    (
        "history-not-json",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--history", "in/text.json"],
        ["in/text.json:1:1", "invalid JSON", "History snapshot"],
        {},
    ),
    (
        "history-wrong-shape",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--history", "in/list.json"],
        ["in/list.json", "not a History snapshot", "must be a JSON object"],
        {},
    ),
    (
        "history-nested-too-deep",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--history", "in/deep.json"],
        ["in/deep.json", "not a History snapshot: JSON nested too deep"],
        {},
    ),
    (
        "history-binary",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--history", "in/binary.json"],
        ["in/binary.json", "not a History snapshot: binary data"],
        {},
    ),
    (
        "impact-map-not-json-select",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--impact-map", "in/text.json"],
        ["in/text.json:1:1", "invalid JSON", "impact map"],
        {},
    ),
    (
        "impact-map-array-run",
        ["run", "--event", "{event}", "--inventory", "{inv}", "--impact-map", "in/list.json"],
        ["in/list.json", "not an impact map", "not a JSON array"],
        {},
    ),
    (
        "impact-map-bad-entry-run",
        [
            "run",
            "--event",
            "{event}",
            "--inventory",
            "{inv}",
            "--impact-map",
            "in/impact-entry.json",
        ],
        ["in/impact-entry.json", "variants['tiny::compare_cpu::add::float32']"],
        {},
    ),
    (
        "impact-map-env-relative",
        ["run", "--event", "{event}", "--inventory", "{inv}"],
        ["in/list.json", "not an impact map"],
        {"SPYRE_CI_IMPACT_MAP": "in/list.json"},
    ),
    (
        "impact-map-missing",
        ["run", "--event", "{event}", "--inventory", "{inv}", "--impact-map", "in/nope.json"],
        ["in/nope.json", "no impact map there"],
        {},
    ),
    # numbers: one validator for run, select and upgrade-diff
    (
        "run-budget-negative",
        ["run", "--event", "{event}", "--budget", "-1"],
        ["--budget -1", "must be at least 0"],
        {},
    ),
    (
        "select-budget-not-a-number",
        ["select", "--event", "{event}", "--budget", "ten"],
        ["argument --budget", "invalid int value: 'ten'"],
        {},
    ),
    (
        "run-budget-time-negative",
        ["run", "--event", "{event}", "--budget-time", "-1"],
        ["--budget-time -1", "must be at least 0"],
        {},
    ),
    (
        "select-budget-time-negative",
        ["select", "--event", "{event}", "--budget-time", "-1"],
        ["--budget-time -1", "must be at least 0"],
        {},
    ),
    (
        "run-full-with-budget",
        ["run", "--event", "{event}", "--full", "--budget", "3"],
        ["--full runs every variant, so --budget cannot bound it"],
        {},
    ),
    (
        "select-full-with-budget-time",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--full", "--budget-time", "9"],
        ["--full runs every variant, so --budget-time cannot bound it"],
        {},
    ),
    (
        "run-holdout-above-one",
        ["run", "--event", "{event}", "--holdout", "7"],
        ["--holdout 7", "must be within [0, 1]"],
        {},
    ),
    (
        "select-holdout-above-one",
        ["select", "--event", "{event}", "--holdout", "7"],
        ["--holdout 7", "must be within [0, 1]"],
        {},
    ),
    (
        "select-holdout-nan",
        ["select", "--event", "{event}", "--holdout", "nan"],
        ["--holdout nan", "not a finite number"],
        {},
    ),
    (
        "upgrade-holdout-negative",
        [
            "upgrade-diff",
            "--from-inventory",
            "{inv}",
            "--to-inventory",
            "{inv}",
            "--holdout",
            "-0.5",
        ],
        ["--holdout -0.5", "must be within [0, 1]"],
        {},
    ),
    (
        "run-jobs-zero",
        ["run", "--event", "{event}", "--jobs", "0"],
        ["--jobs 0", "must be at least 1"],
        {},
    ),
    (
        "run-jobs-negative",
        ["run", "--event", "{event}", "-j", "-4"],
        ["--jobs -4", "must be at least 1"],
        {},
    ),
    (
        "resume-jobs-zero",
        ["runs", "resume", "some-run", "--jobs", "0"],
        ["--jobs 0", "must be at least 1"],
        {},
    ),
    (
        "select-shards-zero",
        ["select", "--event", "{event}", "--shards", "0"],
        ["--shards 0", "must be at least 1"],
        {},
    ),
    (
        "run-test-timeout-zero",
        ["run", "--event", "{event}", "--test-timeout", "0"],
        ["--test-timeout 0", "must be more than 0"],
        {},
    ),
    (
        "run-memory-zero",
        ["run", "--event", "{event}", "--memory-mb", "0"],
        ["--memory-mb 0", "must be at least 1"],
        {},
    ),
    (
        "runs-list-limit-zero",
        ["runs", "list", "--limit", "0"],
        ["--limit 0", "must be at least 1"],
        {},
    ),
    (
        "worker-concurrency-zero",
        ["worker", "--concurrency", "0"],
        ["--concurrency 0", "must be at least 1"],
        {},
    ),
    # ids and names
    (
        "select-why-unknown",
        [
            "select",
            "--event",
            "{event}",
            "--inventory",
            "{inv}",
            "--why",
            "tiny::compare_cpu::sofmax::float32",
        ],
        [
            "--why tiny::compare_cpu::sofmax::float32",
            "no such variant",
            "did you mean: tiny::compare_cpu::softmax::float32",
        ],
        {},
    ),
    (
        "select-unknown-heuristic",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--trial", "astrology"],
        ["--trial/--disable", "unknown heuristic(s) astrology", "known:"],
        {},
    ),
    # inventories, specs, output directories
    (
        "inventory-missing",
        ["run", "--event", "{event}", "--inventory", "in/nope.json.gz"],
        ["in/nope.json.gz", "no inventory there", "spyre-ci inventory --out in/nope.json.gz"],
        {},
    ),
    (
        "inventory-is-directory",
        ["select", "--event", "{event}", "--inventory", "in/dir"],
        ["in/dir", "is a directory, not an inventory"],
        {},
    ),
    (
        "inventory-nested-too-deep",
        ["select", "--event", "{event}", "--inventory", "in/deep.json"],
        ["in/deep.json", "not a readable inventory"],
        {},
    ),
    (
        "inventory-not-readable",
        ["run", "--event", "{event}", "--inventory", "in/text.json"],
        ["in/text.json", "not a readable inventory"],
        {},
    ),
    (
        "run-out-is-a-file",
        ["run", "--event", "{event}", "--inventory", "{inv}", "--out", "in/a-file"],
        ["in/a-file", "exists and is not a directory"],
        {},
    ),
    (
        "run-out-empty",
        ["run", "--event", "{event}", "--out", ""],
        ["argument --out", "an empty path"],
        {},
    ),
    (
        "run-specs-missing",
        ["run", "--event", "{event}", "--inventory", "{inv}", "--specs", "in/nope.yaml"],
        ["in/nope.yaml", "no such spec file or folder"],
        {},
    ),
    (
        "inventory-specs-missing",
        ["inventory", "--specs", "in/nope.yaml"],
        ["in/nope.yaml", "no such spec file or folder"],
        {},
    ),
    (
        "inventory-out-is-directory",
        ["inventory", "--out", "in/dir"],
        ["in/dir", "is a directory"],
        {},
    ),
    (
        "expand-specs-missing",
        ["suites", "expand", "--specs", "in/nope.yaml"],
        ["in/nope.yaml", "no such spec file or folder"],
        {},
    ),
    (
        "upgrade-out-is-a-file",
        [
            "upgrade-diff",
            "--from-inventory",
            "{inv}",
            "--to-inventory",
            "{inv}",
            "--out",
            "in/a-file",
        ],
        ["in/a-file", "exists and is not a directory"],
        {},
    ),
    (
        "select-plan-out-is-directory",
        ["select", "--event", "{event}", "--inventory", "{inv}", "--plan-out", "in/dir"],
        ["in/dir", "is a directory"],
        {},
    ),
    (
        "impact-map-ids-is-directory",
        ["impact-map", "--out", "in/map.json", "--ids", "in/dir"],
        ["in/dir", "is a directory"],
        {},
    ),
    ("export-run-dir-missing", ["export", "in/nope"], ["in/nope", "no such directory"], {}),
    (
        "export-record-binary",
        ["export", "--record", "in/binary.json", "--out", "in/export"],
        ["in/binary.json", "not a run record: binary data"],
        {},
    ),
    (
        "export-record-directory",
        ["export", "--record", "in/dir", "--out", "in/export"],
        ["in/dir", "is a directory, not a run record"],
        {},
    ),
    (
        "export-record-nested-too-deep",
        ["export", "--record", "in/deep.json", "--out", "in/export"],
        ["in/deep.json", "not a run record: JSON nested too deep"],
        {},
    ),
    (
        "suites-record-binary",
        ["suites", "record", "in/binary.json", "--out", "in/x.yaml"],
        ["in/binary.json", "not a results file (JSON lines): binary data"],
        {},
    ),
    # the relay's config
    (
        "serve-config-binary",
        ["serve", "--config", "in/binary.json"],
        ["in/binary.json", "not a relay config (YAML): binary data"],
        {},
    ),
    (
        "run-out-cannot-be-written",
        ["run", "--diff", "{patch}", "--inventory", "{inv}", "--out", "/proc/spyre-ci-out"],
        ["/proc/spyre-ci-out: cannot be written (--out)"],
        {},
    ),
    (
        "run-state-dir-cannot-be-written",
        ["run", "--diff", "{patch}", "--inventory", "{inv}", "--out", "out"],
        ["/proc/spyre-ci-state: cannot be written (the state directory"],
        {"SPYRE_CI_STATE_DIR": "/proc/spyre-ci-state"},
    ),
    (
        "trigger-config-directory",
        ["trigger", "nightly", "--sha", "a" * 40, "--config", "in/dir"],
        ["in/dir", "is a directory, not a relay config"],
        {},
    ),
]


@pytest.mark.parametrize(
    ("argv", "fragments", "extra_env"), [pytest.param(a, f, e, id=i) for i, a, f, e in CASES]
)
def test_hostile_input_is_refused_cleanly(
    tiny_inventory: Path,
    tmp_path: Path,
    argv: list[str],
    fragments: list[str],
    extra_env: dict[str, str],
) -> None:
    work = tmp_path / "cwd"
    _hostile_files(work)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state), **extra_env}
    env.pop("SPYRE_CI_INVENTORY", None)
    if "SPYRE_CI_IMPACT_MAP" not in extra_env:
        env.pop("SPYRE_CI_IMPACT_MAP", None)
    subst = {
        "{inv}": str(tiny_inventory),
        "{event}": str(SOFTMAX_EVENT),
        "{patch}": str(SOFTMAX_PATCH),
    }
    result = cli(*[subst.get(a, a) for a in argv], env=env, cwd=work)

    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    last = lines[-1]
    assert last.startswith("spyre-ci") and "error:" in last, result.stderr
    if not fragments[0].startswith("argument "):  # argparse's own: its usage lines first
        assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in last, (fragment, last)
    assert list(state.iterdir()) == [], "the state directory must stay untouched"
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before


def test_a_refusal_is_exit_code_2_in_a_shell(tmp_path: Path) -> None:
    work = tmp_path / "cwd"
    _hostile_files(work)
    result = spyre_ci("export", "--record", "in/binary.json", "--out", "in/export", cwd=work)
    assert result.returncode == 2, (result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("spyre-ci: error: ") and "in/binary.json" in line, line
    assert "not a run record: binary data" in line


def _shard_logs(out: Path, shard: str) -> list[Path]:
    """A shard's per-test progress files, wherever under out/work/ the pipeline keeps them."""
    return sorted((out / "work").glob(f"**/{shard}/*.jsonl"))


@pytest.mark.long
def test_relative_paths_hold_across_directories(tiny_inventory: Path, tmp_path: Path) -> None:
    """A run started with relative --out, --inventory, --specs and SPYRE_CI_STATE_DIR is
    resumed from another directory: every path it recorded is absolute."""
    from workflows.stores.history import SQLiteHistory

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copyfile(tiny_inventory, a / "tiny.json.gz")
    shutil.copyfile(TINY_SPEC, a / "tiny.yaml")
    (a / "change.patch").write_text(SIN_PATCH)
    env = {**os.environ, "SPYRE_CI_STATE_DIR": "state"}
    env.pop("SPYRE_CI_IMPACT_MAP", None)
    first = cli(
        "run",
        "--diff",
        "change.patch",
        "--inventory",
        "tiny.json.gz",
        "--specs",
        "tiny.yaml",
        "--out",
        "out",
        "--holdout",
        "0",
        "--jobs",
        "2",
        "--no-progress",
        env=env,
        cwd=a,
    )
    # A C++ change runs nothing of itself: the tests ran, and it was not tested (exit 4).
    assert first.returncode == 4, first.stdout + first.stderr
    assert "shard subprocess failed" not in first.stdout + first.stderr
    planned = json.loads((a / "out" / "planned.json").read_text())
    request = planned["request"]
    assert request["out_dir"] == str(a / "out")
    assert request["inventory"] == str(a / "tiny.json.gz")
    assert request["specs"] == [str(a / "tiny.yaml")]

    # The run "stopped" before its second shard reported: resume it from elsewhere.
    history = SQLiteHistory(a / "state" / "history.sqlite3")
    (run,) = history.list_runs(5)
    history.save_run(replace(run, state="planned"))
    dropped = set()
    for path in _shard_logs(a / "out", "shard-1"):
        dropped |= {
            json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()
        }
        path.unlink()
    assert dropped

    resumed = cli(
        "runs",
        "resume",
        run.run_id,
        "--jobs",
        "2",
        env={**env, "SPYRE_CI_STATE_DIR": "../a/state"},
        cwd=b,
    )
    assert resumed.returncode == 4, resumed.stdout + resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert str(a / "out" / "report.html") in resumed.stdout
    assert list(b.iterdir()) == []  # nothing landed in the directory resume started in
    record = json.loads((a / "out" / "run.json").read_text())
    assert {r["id"]: r["status"] for r in record["results"]} == {
        "tiny::compare_cpu::sin::float16": "passed",
        "tiny::compare_cpu::sin::float32": "passed",
    }
    starts: Counter[str] = Counter()
    for path in _shard_logs(a / "out", "shard-1"):
        for line in path.read_text().splitlines():
            if line.strip() and json.loads(line)["event"] == "start":
                starts[json.loads(line)["id"]] += 1
    assert set(starts) == dropped  # only the lost shard ran again
    final = history.get_run(run.run_id)
    assert final is not None and final.state == "completed"
