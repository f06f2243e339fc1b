"""The `spyre-ci` command line as the tests call it: in this process (`cli`), or as a user
runs it, in a subprocess (`spyre_ci`), where the process boundary is what is tested
(signals, exit codes a shell sees, what the process imports)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.testing.paths import REPO_ROOT


@dataclass(frozen=True)
class Result:
    """What a command left: the fields of `subprocess.CompletedProcess` that tests read."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, env: Mapping[str, str] | None = None, cwd: Path = REPO_ROOT) -> Result:
    """`spyre-ci ARGS` run in-process by `workflows.cli.main.main`, its output captured.

    As `spyre_ci` takes them, `env` is the whole environment (default: this process's) and
    `cwd` the working directory; both are restored afterwards, as are the variables the
    command itself sets. A SystemExit (argparse's refusals) ends it as it ends a process.
    """
    from workflows.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(env),
        _cwd(cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args))
        except SystemExit as exc:  # as the interpreter ends on it
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
    return Result(tuple(args), code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)


def build_inventory(spec: Path, path: Path, env: dict[str, str] | None = None) -> Path:
    """`spyre-ci inventory --specs SPEC --out PATH`, as a user runs it; returns PATH."""
    built = subprocess.run(
        [sys.executable, "-m", "workflows", "inventory", "--specs", str(spec), "--out", str(path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    return path


def spyre_ci(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "workflows", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def state_env(state_dir: Path) -> dict[str, str]:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(state_dir)}
    for name in ("SPYRE_CI_REDIS_URL", "SPYRE_CI_IMPACT_MAP", "SPYRE_CI_INVENTORY"):
        env.pop(name, None)
    return env
