"""Moving the default torch as one reviewed step: `spyre-ci bump --to VERSION`.

What the project needs on a new pinned torch, written into the checkout spyre-ci runs from
(installed with `pip install -e`), for one `git diff` to review:

1. the upgrade run from the pinned torch to the new one (`run_upgrade`, with `--run`): its
   report and `upgrade.patch` under `--out`;
2. the patch applied (`git apply`): expectations entries valid on both torches;
3. the shipped trace of the new torch (`workflows/data/trace-<new>.json.gz`), recorded in
   the new torch's environment (`spyre-ci impact-map`);
4. a full run on the new torch with the patched expectations, recorded as
   `tests/suites/data/full-run-<new>-<cpu>.json.gz` (what the bundled-expectations test holds
   the specs against);
5. the pin in `pyproject.toml`.

The steps run in order and each says what it wrote; a step that fails stops the bump and
names itself (what it wrote stays for a look: `git checkout .` undoes it). A checkout with
uncommitted changes is refused: the bump's diff must be its own.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from contracts.exit_codes import ExitCode
from workflows.drivers.upgrade.environments import PROJECT_ROOT, EnvironmentFault, TorchEnv
from workflows.drivers.upgrade.job import UpgradeOptions, run_upgrade
from workflows.run.run_model import PipelineError
from workflows.runner.torch_builds import read_version
from workflows.settings import child_environment

Log = Callable[[str], None]
PIN = re.compile(r"""(["'])torch==([^"';\s]+)\1""")
NIGHTLY_EVENT = Path("examples/events/nightly.json")
TRACE = "workflows/data/trace-{version}.json.gz"


class BumpError(PipelineError):
    """The bump cannot start or go on with this checkout (exit 2); the message says why."""


@dataclass
class BumpResult:
    """What the bump did: the upgrade run's exit code, each step's line, the files written."""

    from_version: str
    to_version: str
    code: int = ExitCode.OK
    steps: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    still_naming_old: list[str] = field(default_factory=list)


def pinned_torch(checkout: Path = PROJECT_ROOT) -> str:
    """The torch version `pyproject.toml` pins (`torch==X`)."""
    pyproject = checkout / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError as exc:
        raise BumpError(f"{pyproject}: cannot read the pin: {exc.strerror}") from exc
    found = {m.group(2) for m in PIN.finditer(text)}
    if len(found) != 1:
        said = ", ".join(sorted(found)) or "none"
        raise BumpError(f"{pyproject}: expected one torch==VERSION pin, found {said}")
    return found.pop()


def repin(checkout: Path, old: str, new: str) -> Path:
    """`torch==old` -> `torch==new` in `pyproject.toml`."""
    pyproject = checkout / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    pyproject.write_text(
        PIN.sub(
            lambda m: f"{m.group(1)}torch=={new}{m.group(1)}" if m.group(2) == old else m.group(0),
            text,
        ),
        encoding="utf-8",
    )
    return pyproject


def git(checkout: Path, *args: str) -> str:
    """A git command in the checkout; its output, or a BumpError naming the command."""
    done = subprocess.run(
        ["git", "-C", str(checkout), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BumpError(
            f"git {' '.join(args)} in {checkout}: {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


def check_checkout(checkout: Path) -> None:
    """The checkout is a git work tree with nothing uncommitted."""
    if not (checkout / "pyproject.toml").is_file():
        raise BumpError(
            f"{checkout}: no pyproject.toml: the bump edits the checkout spyre-ci is installed "
            "from (pip install -e .)"
        )
    dirty = git(checkout, "status", "--porcelain", "--untracked-files=no").strip()
    if dirty:
        first = dirty.splitlines()[:5]
        raise BumpError(
            f"{checkout}: uncommitted changes ({'; '.join(s.strip() for s in first)}): commit or "
            "stash them first, so that the bump's diff is its own"
        )


def in_env(
    env: TorchEnv,
    checkout: Path,
    args: Sequence[str],
    label: str,
    log: Log,
    state_dir: Path,
    ok: Sequence[int] = (0,),
) -> int:
    """`args` run by the environment's python in the checkout (its code first on the path),
    with a state directory of the bump's own; output lines are logged with the label."""
    environ = child_environment(
        {
            "PYTHONPATH": str(checkout),
            "SPYRE_CI_STATE_DIR": str(state_dir),
            "PYTHONUNBUFFERED": "1",
        }
    )
    log(f"{label}: {env.python} {' '.join(args)}")
    with subprocess.Popen(
        [env.python, *args],
        cwd=checkout,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        tail: list[str] = []
        for line in process.stdout:
            line = line.rstrip()
            tail = [*tail[-19:], line]
            log(f"  [{label}] {line}")
    if process.returncode not in ok:
        raise EnvironmentFault(
            f"{label}: {Path(env.python).name} {' '.join(args)} exited {process.returncode} in "
            f"torch {env.version}'s environment ({env.path}); last lines:\n  "
            + "\n  ".join(tail[-8:])
        )
    return process.returncode


def bump(options: UpgradeOptions, log: Log, checkout: Path = PROJECT_ROOT) -> BumpResult:
    """Move the checkout's pinned torch to `options.to_version` (steps in the module's
    docstring). `options.from_version` is the pin; `options.run` is implied."""
    check_checkout(checkout)
    old, new = options.from_version, options.to_version
    result = BumpResult(old, new)
    state = options.out / "state"
    started = time.monotonic()

    def step(line: str) -> None:
        result.steps.append(line)
        log(f"bump: {line} ({time.monotonic() - started:.0f} s)")

    upgrade = run_upgrade(replace(options, run=True, out=options.out / "upgrade"), log)
    result.code = upgrade.code
    run = upgrade.data.get("run") or {}
    categories = ", ".join(f"{k} {n}" for k, n in (run.get("categories") or {}).items())
    step(f"1/5 upgrade run {old} -> {new}: {categories or 'nothing ran'}; {upgrade.conclusion}")
    new_env = upgrade.envs[1]

    patch = upgrade.patch
    if patch is not None and patch.is_file() and patch.stat().st_size:
        git(checkout, "apply", "--check", str(patch))
        git(checkout, "apply", str(patch))
        step(f"2/5 applied {patch}")
    else:
        step("2/5 no expectations to change")

    trace = checkout / TRACE.format(version=new)
    in_env(
        new_env,
        checkout,
        [
            "-m",
            "workflows",
            "impact-map",
            "--out",
            str(trace),
            "--jobs",
            str(options.jobs),
            "--work",
            str(options.out / "trace"),
        ],
        "trace",
        log,
        state,
    )
    step(f"3/5 recorded the shipped trace of torch {new}: {trace.relative_to(checkout)}")

    full = options.out / "full-run"
    code = in_env(
        new_env,
        checkout,
        [
            "-m",
            "workflows",
            "run",
            "--event",
            str(nightly_event(new_env, options.out)),
            "--full",
            "--out",
            str(full),
        ],
        "full run",
        log,
        state,
        ok=(0, 1),
    )
    in_env(
        new_env,
        checkout,
        ["-m", "tests.suites.test_bundled_expectations", str(full / "run.json")],
        "record",
        log,
        state,
    )
    said = (
        "agrees with the patched expectations"
        if code == 0
        else "DISAGREES with the patched expectations (its NEW FAILURES are in "
        f"{full / 'report.md'}: settle them before the bundled-expectations test passes)"
    )
    step(f"4/5 full run on torch {new} recorded; it {said}")

    repin(checkout, old, new)
    step(f"5/5 pinned torch=={new} in pyproject.toml")

    inside = options.out.resolve().is_relative_to(checkout.resolve())
    leave_out = [f":!{options.out.resolve().relative_to(checkout.resolve())}"] if inside else []
    result.written = git(checkout, "status", "--short", "--", ".", *leave_out).splitlines()
    result.still_naming_old = still_naming(checkout, old)
    return result


def nightly_event(env: TorchEnv, out: Path) -> Path:
    """A nightly event at the new torch's own git sha (the shipped example's form), written
    under `out`: the full run is then of that torch as it is, tested, and keeps its outcomes
    as that torch's own."""
    site = sorted(env.path.glob("lib/python3*/site-packages/torch/version.py"))
    version, sha = read_version(site[0]) if site else ("", "")
    if not sha:
        raise EnvironmentFault(
            f"torch {env.version}'s environment ({env.path}): its torch/version.py names no git "
            "sha, so no nightly at its own commit can be written"
        )
    event = json.loads((PROJECT_ROOT / NIGHTLY_EVENT).read_text(encoding="utf-8"))
    event["delivery_id"] = f"bump-{sha[:12]}"
    event["payload"].update(
        {"head_sha": sha, "version": version or env.version, "date": dt.date.today().isoformat()}
    )
    path = out / f"nightly-{sha[:12]}.json"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(event, indent=2) + "\n", encoding="utf-8")
    return path


def still_naming(checkout: Path, version: str, limit: int = 40) -> list[str]:
    """`path:line` of the tracked text files outside the data and fixtures that still name
    the old version (docs and tests to read again; nothing edited)."""
    done = subprocess.run(
        [
            "git",
            "-C",
            str(checkout),
            "grep",
            "-n",
            "-I",
            "-F",
            version,
            "--",
            ".",
            ":!*.json",
            ":!*.gz",
            ":!benchmarks/results",
            ":!**/fixtures/**",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.splitlines()[:limit]
