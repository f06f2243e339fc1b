"""A changed module is untrusted code: what it does at import (kill its parent, hang, print,
edit the environment, raise) gets the same outcome warm (the default, through the zygote)
and cold, is the change's failure when it keeps the tests from running, and never ends or
stalls the run. Through the CLI as a user types it, on the glu spec; the evidence the runner
reads (`workflows.runner.change_imports`) on its own below."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.testing.cli import spyre_ci
from tests.testing.paths import GLU_SPEC
from workflows.runner import change_imports
from workflows.stores.sources import installed_torch

GLU = "glu::compare_cpu::nn.functional.glu::float32"
BLAMED = "the change breaks importing torch (the change's failure, not the tool's): "


def hostile(folder: Path, name: str, *lines: str, glu_check: str = "not input.dim()") -> Path:
    """A diff that adds `lines` at the top of torch/nn/functional.py, and edits glu (so the
    selector picks glu's variant; `glu_check` is its scalar check, by default the same)."""
    root = installed_torch()[0]
    assert root is not None
    top = (root / "torch" / "nn" / "functional.py").read_text().splitlines()[:3]
    added = "".join(f"+{line}\n" for line in lines)
    patch = folder / f"{name}.patch"
    patch.write_text(
        "diff --git a/torch/nn/functional.py b/torch/nn/functional.py\n"
        "--- a/torch/nn/functional.py\n+++ b/torch/nn/functional.py\n"
        f"@@ -1,3 +1,{3 + len(lines)} @@\n {top[0]}\n {top[1]}\n"
        f"{added} {top[2]}\n"
        f"@@ -1802,7 +{1802 + len(lines)},7 @@ def glu(input: Tensor, dim: int = -1) -> Tensor:\n"
        '     """\n'
        "     if has_torch_function_unary(input):\n"
        "         return handle_torch_function(glu, (input,), input, dim=dim)\n"
        "-    if input.dim() == 0:\n"
        f"+    if {glu_check}:\n"
        "         raise RuntimeError(\n"
        '             "glu does not support scalars because halving size must be even"\n'
        "         )\n"
    )
    return patch


@pytest.fixture()
def short_tmp() -> Iterator[Path]:
    """A short folder: the zygote's socket lives in $TMPDIR, and a Unix socket's path holds
    107 bytes, which pytest's own folders under xdist come near."""
    folder = Path(tempfile.mkdtemp(prefix="hostile-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run(
    patch: Path, inventory: Path, folder: Path, *args: str, cold: bool = False
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`spyre-ci run --diff PATCH` on the glu spec, warm unless `cold`; its temporary files
    (the zygote's folder among them) under `folder/tmp`."""
    (folder / "tmp").mkdir(parents=True)
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(folder / "state"), "TMPDIR": str(folder / "tmp")}
    env.pop("SPYRE_CI_ZYGOTE", None)  # the default path: the warm runner on
    if cold:
        env["SPYRE_CI_ZYGOTE"] = "0"
    out = folder / "out"
    done = spyre_ci(
        "run", "--diff", str(patch), "--inventory", str(inventory), "--specs", str(GLU_SPEC),
        "--holdout", "0", "--jobs", "1", "--no-progress", "--out", str(out), *args, env=env,
    )  # fmt: skip
    record = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    return done, record


def glu(record: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {r["id"]: r for r in record["results"]}[GLU]
    return found


def left_behind(folder: Path) -> list[str]:
    """Processes (not zombies) whose command line names `folder`: a zygote (its socket is in
    its folder under TMPDIR), a test process (its files are under the out folder)."""
    found: list[str] = []
    for _ in range(50):  # a killed group is reaped a moment after the run returns
        found = []
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if str(folder) in cmdline and state != "Z":
                found.append(cmdline.replace("\0", " ")[:200])
        if not found:
            break
        time.sleep(0.1)
    return found


@pytest.mark.long
def test_a_change_that_kills_its_parent_at_import_is_its_failure_and_the_run_goes_on(
    glu_inventory: Path, short_tmp: Path
) -> None:
    patch = hostile(short_tmp, "kill", "import os, signal", "os.kill(os.getppid(), signal.SIGKILL)")
    done, record = run(patch, glu_inventory, short_tmp / "warm")
    # It killed a keeper (the zygote's, then a rerun's), never the run: exit 1, a record,
    # glu's variant an error that says why, and passing without the change (A/B).
    assert done.returncode == 1, done.stdout + done.stderr
    assert "INFRASTRUCTURE" not in done.stdout
    result = glu(record)
    assert (result["status"], result["classification"], result["base_status"]) == (
        "error",
        "new",
        "passed",
    )
    assert result["message"] == BLAMED + (
        "importing the change's module torch.nn.functional ended its process: "
        "killed by signal 9 (SIGKILL)"
    )
    assert not left_behind(short_tmp / "warm"), left_behind(short_tmp / "warm")
    assert not list((short_tmp / "warm" / "tmp").glob("spyre-zygote-*"))  # its folder too


@pytest.mark.long
def test_a_change_that_hangs_at_import_is_killed_at_the_test_timeout(
    glu_inventory: Path, short_tmp: Path
) -> None:
    # The change hangs at import: the case under test, ended by the test timeout.
    patch = hostile(short_tmp, "sleep", "import time", "time.sleep(3600)")
    began = time.monotonic()
    done, record = run(patch, glu_inventory, short_tmp / "warm", "--test-timeout", "5")
    took = time.monotonic() - began
    assert done.returncode == 1, done.stdout + done.stderr
    assert glu(record)["message"] == BLAMED + (
        "importing the change's module torch.nn.functional did not end within 15 s (the test "
        "timeout and its grace): its process was killed"
    )
    assert glu(record)["base_status"] == "passed"
    # One hang paid for (the zygote's import stands for its forks and the rerun), never
    # the shard's three hours.
    assert took < 150, took
    assert not left_behind(short_tmp / "warm"), left_behind(short_tmp / "warm")


@pytest.mark.long
def test_a_print_at_import_keeps_the_warm_runner_and_the_outcome(
    glu_inventory: Path, short_tmp: Path
) -> None:
    patch = hostile(short_tmp, "print", "print('hello from the change')")
    warm, warm_record = run(patch, glu_inventory, short_tmp / "warm")
    cold, cold_record = run(patch, glu_inventory, short_tmp / "cold", cold=True)
    assert warm.returncode == cold.returncode == 0, warm.stderr + cold.stderr
    assert glu(warm_record)["status"] == glu(cold_record)["status"] == "passed"
    assert "warm runner unavailable" not in warm.stderr  # the zygote did not go cold
    # Printed where each imported the change: the cold test process, the zygote (its log),
    # never the protocol's pipe.
    said = {
        mode: "hello from the change"
        in "".join(p.read_text() for p in (short_tmp / mode / "out").rglob("*.stdout"))
        for mode in ("warm", "cold")
    }
    assert said == {"warm": False, "cold": True}


@pytest.mark.long
def test_an_environment_edit_at_import_has_the_same_outcome_warm_and_cold(
    glu_inventory: Path, short_tmp: Path
) -> None:
    patch = hostile(
        short_tmp,
        "environ",
        "import os",
        "os.environ['GLU_STRICT'] = '1'",
        glu_check="input.dim() == 0 or os.environ.get('GLU_STRICT')",
    )
    outcomes = {}
    for mode in ("warm", "cold"):
        done, record = run(patch, glu_inventory, short_tmp / mode, cold=mode == "cold")
        assert done.returncode == 1, mode + done.stdout + done.stderr
        result = glu(record)
        outcomes[mode] = (result["status"], result["classification"], result["message"])
    # The variable the import set is there when glu runs, forked or not (warm used to pass).
    assert outcomes["warm"] == outcomes["cold"]
    assert outcomes["warm"][:2] == ("failed", "new")
    assert "halving size must be even" in outcomes["warm"][2]


def test_a_change_that_raises_at_import_is_its_failure_not_an_infrastructure_fault(
    glu_inventory: Path, short_tmp: Path
) -> None:
    patch = hostile(short_tmp, "raise", "raise RuntimeError('the change refuses to import')")
    done, record = run(patch, glu_inventory, short_tmp / "warm")
    assert done.returncode == 1, done.stdout + done.stderr  # was 3, an infrastructure error
    assert glu(record)["message"] == BLAMED + (
        "importing the change's module torch.nn.functional raised RuntimeError: the change "
        "refuses to import"
    )
    assert glu(record)["base_status"] == "passed"


# What the runner reads: the import log each process writes, on its own.


def test_a_watched_import_writes_when_it_starts_and_how_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good_change.py"
    good.write_text("VALUE = 1\n")
    bad = tmp_path / "bad_change.py"
    bad.write_text("raise ValueError('no')\n")

    class Finder:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname not in ("good_change", "bad_change"):
                return None
            return importlib.util.spec_from_file_location(fullname, tmp_path / f"{fullname}.py")

    finder = Finder()
    log = tmp_path / "imports"
    change_imports.watch(finder, lambda: str(log))
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    monkeypatch.delitem(sys.modules, "good_change", raising=False)
    monkeypatch.delitem(sys.modules, "bad_change", raising=False)
    import good_change

    assert good_change.VALUE == 1
    with pytest.raises(ValueError, match="no"):
        import bad_change  # noqa: F401
    seen = change_imports.read(log)
    assert seen.open == ()
    assert seen.failed == (("bad_change", "ValueError: no"),)
    assert dict(seen.files) == {"good_change": str(good), "bad_change": str(bad)}
    assert change_imports.blame(seen, 1) == (
        "importing the change's module bad_change raised ValueError: no"
    )


def test_the_change_is_blamed_only_on_what_its_imports_show(tmp_path: Path) -> None:
    log = tmp_path / "imports"
    assert change_imports.read(log) == change_imports.Imports()  # no change imported
    assert change_imports.blame(change_imports.read(log), -9) is None
    log.write_text(
        json.dumps({"start": "torch.nn.functional", "file": "/t/torch/nn/functional.py", "at": 10})
        + "\n"
        + json.dumps({"start": "torch.nn.inner", "file": "/t/torch/nn/inner.py", "at": 11})
        + "\n"
        + '{"end": "torch.nn.inn'  # cut by a kill mid-line
    )
    seen = change_imports.read(log)
    assert [m for m, _, _ in seen.open] == ["torch.nn.functional", "torch.nn.inner"]
    assert change_imports.overdue(seen, 60, now=69) is False
    assert change_imports.overdue(seen, 60, now=71) is True  # the outer one started at 10
    assert change_imports.blame(seen, -9) == (
        "importing the change's module torch.nn.inner ended its process: "
        "killed by signal 9 (SIGKILL)"
    )
    assert change_imports.hung(seen, 15).startswith(
        "importing the change's module torch.nn.inner did not end within 15 s"
    )
    # Every import ended: only an error that names a changed module's file blames it.
    log.write_text(
        json.dumps({"start": "torch.nn.functional", "file": "/t/torch/nn/functional.py", "at": 1})
        + "\n"
        + json.dumps({"end": "torch.nn.functional"})
        + "\n"
    )
    seen = change_imports.read(log)
    assert change_imports.blame(seen, 1, "MemoryError") is None
    assert change_imports.blame(
        seen, 1, "ImportError: cannot import name 'glu' from (/t/torch/nn/functional.py)"
    ) == (
        "the changed torch does not import: the error names the change's module torch.nn.functional"
    )
