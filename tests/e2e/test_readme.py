"""The README's first command, exactly as written, works on a checkout.

The `spyre-ci run ...` part of the Quick start's first command is taken from README.md
itself and run with its relative paths as they stand, from a directory laid out like a
fresh checkout (every top-level entry of this one linked in, but no `out/`), with a state
directory holding no History. Only the Inventory cache is seeded, from a session-scoped
build, so the test does not pay for building the bundled Inventory more than once.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from tests.testing.cli import state_env
from tests.testing.paths import REPO_ROOT

# Not linked into the clone-like directory: outputs and caches a fresh clone does not have.
NOT_IN_A_FRESH_CLONE = {
    "out",
    ".git",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".spyre-ci",
    "build",
}


def readme_run_command() -> list[str]:
    """The arguments after `spyre-ci` of the `spyre-ci run` in README's first bash block."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    assert block, "README.md has no ```bash block"
    for line in block.group(1).splitlines():
        if line.lstrip().startswith("#"):
            continue
        for part in line.split("&&"):
            words = shlex.split(part)
            for i, word in enumerate(words[:-1]):
                if word.endswith("spyre-ci") and words[i + 1] == "run":
                    return words[i + 1 :]
    raise AssertionError("no `spyre-ci run` command in README.md's first bash block")


def spyre_ci_executable() -> list[str]:
    """The `spyre-ci` console script of this environment (as the README calls it)."""
    script = Path(sys.executable).parent / "spyre-ci"
    return [str(script)] if script.exists() else [sys.executable, "-m", "workflows"]


def test_readme_command_parses_to_relative_paths() -> None:
    args = readme_run_command()
    assert args[0] == "run"
    assert "--diff" in args and "--out" in args
    assert not any(Path(a).is_absolute() for a in args)


def test_readme_first_command_runs_as_written(seeded_state: Path, tmp_path: Path) -> None:
    args = readme_run_command()
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for entry in REPO_ROOT.iterdir():
        if entry.name not in NOT_IN_A_FRESH_CLONE:
            (checkout / entry.name).symlink_to(entry)
    state = tmp_path / "state"
    shutil.copytree(seeded_state, state)

    result = subprocess.run(
        [*spyre_ci_executable(), *args, "--no-progress"],
        cwd=checkout,
        env=state_env(state),
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    # The shipped edit breaks glu's variants: new failures on the changed torch, exit 1.
    assert result.returncode == 1, output
    assert "Traceback" not in output
    assert "INFRASTRUCTURE" not in output
    assert "building the Inventory" not in result.stderr  # the seeded cache was used
    assert "applied: torch/nn/functional.py" in result.stdout
    assert "change TESTED" in result.stdout

    out = checkout / args[args.index("--out") + 1]
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert (out / "hud" / "envelope.json").is_file() and (out / "callback.json").is_file()
    ran = re.search(r"\bran (\d+)", result.stdout)
    assert ran and int(ran.group(1)) > 0, result.stdout
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert record["environment"]["tested"] == "tested"
    statuses = [r["status"] for r in record["results"]]
    assert len(statuses) == int(ran.group(1))
    assert statuses.count("passed") > 0
    new = [r for r in record["results"] if r["classification"] == "new"]
    assert new and all("glu" in r["id"].lower() for r in new), new[:5]
    assert all(r["base_status"] == "passed" for r in new), new[:5]  # A/B: they pass without it
    # What the README says of this run is what it does.
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    said = re.search(r"the edit breaks (\d+) variants", readme)
    shown = re.search(r"NEW FAILURES \((\d+)\)", readme)
    assert said and shown, "README.md no longer says how many variants the glu edit breaks"
    assert int(said.group(1)) == int(shown.group(1)) == len(new), (len(new), [r["id"] for r in new])
    broken = [
        r
        for r in record["results"]
        if r["status"] in ("error", "crashed", "timeout", "failed") and r not in new
    ]
    assert broken == [], broken[:5]
    assert str(out / "report.html") in result.stdout
