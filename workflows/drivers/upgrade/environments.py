"""One isolated environment per torch version: `python -m venv` + pip into a cache folder.

env = provision("2.14.1", settings.env_cache_dir)   # <cache>/torch-2.14.1, reused when complete
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from workflows.errors import InfrastructureError
from workflows.run.run_model import PipelineError
from workflows.runner.build_envs import folder_bytes

PROJECT_ROOT = Path(__file__).resolve().parents[3]
MARKER = ".spyre-ci-env.json"


def _project_requirements() -> tuple[str, ...]:
    """The project's own requirements but torch (`pyproject.toml`'s dependencies, as the
    installed distribution lists them): the project goes in `--no-deps` (it pins another
    torch), and its modules that run in the environment import them (`python -m workflows
    ...` reaches the relay's GitHub client, the stores' Redis client)."""
    try:
        listed = metadata.requires("spyre-ci") or []
    except metadata.PackageNotFoundError:
        return ()
    return tuple(
        r for r in listed if "extra ==" not in r and not re.match(r"torch\b(?![-_.\w])", r.strip())
    )


# pytest: the shard subprocesses are pytest runs of the suites plugin; the rest, what the
# suites need when the project's metadata cannot be read.
EXTRA_PACKAGES = _project_requirements() or ("expecttest", "numpy", "pyyaml", "jsonschema")
EXTRA_PACKAGES += ("pytest",)

Log = Callable[[str], None]


class UpgradeError(PipelineError):
    """An upgrade run cannot go on with its input (exit 2); the message names the version,
    file or step."""


class EnvironmentFault(InfrastructureError):
    """An environment could not be made, or its python could not do a step (exit 3, not a
    test result); the message names the step and its log."""


# pip found the index and the versions it holds, none of them the one asked for (offline, pip
# says "from versions: none": the machine's fault, not the version's).
_NO_SUCH_VERSION = re.compile(r"requirement torch==\S+ \(from versions: (?!none\))")


def stderr_log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TorchEnv:
    """One provisioned environment: a venv with one torch version and the project."""

    version: str
    path: Path

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def installed_torch(self) -> str | None:
        """The torch version the venv has (read from its metadata, no import), or None."""
        if not Path(self.python).exists():
            return None
        probe = (
            "import importlib.metadata as m\ntry: print(m.version('torch'))\n"
            "except m.PackageNotFoundError: print('')"
        )
        done = subprocess.run(
            [self.python, "-c", probe], capture_output=True, text=True, check=False
        )
        return done.stdout.strip().split("+")[0] or None if done.returncode == 0 else None


def _run_logged(command: list[str], log_file: Path, log: Log, label: str) -> None:
    """Run a step, keep its whole output in `log_file`, show progress lines as they come."""
    started = time.monotonic()
    with open(log_file, "a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(command)}\n")
        fh.flush()
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            words = line.strip()
            # pip's own milestones; the rest stays in the log.
            if words.startswith(
                (
                    "Collecting ",
                    "Processing ",
                    "Installing collected",
                    "Successfully installed",
                    "ERROR",
                    "Obtaining ",
                )
            ):
                log(f"  [{label} {time.monotonic() - started:5.0f} s] {words[:150]}")
        code = proc.wait()
    if code != 0:
        tail = log_file.read_text(encoding="utf-8", errors="replace").strip()[-1500:]
        message = (
            f"{label}: `{' '.join(command)}` exited {code}; whole output in {log_file}:\n{tail}"
        )
        if _NO_SUCH_VERSION.search(tail):
            raise UpgradeError(message)  # a torch version pip's index does not have
        raise EnvironmentFault(message)


def provision(
    version: str,
    cache_dir: Path,
    *,
    project: Path = PROJECT_ROOT,
    log: Log = stderr_log,
    base_python: str | None = None,
) -> TorchEnv:
    """The environment for `version`, created in `cache_dir/torch-<version>` unless present
    (`upgrade-diff` hands in `--cache-dir`, else `Settings.env_cache_dir`: `$SPYRE_CI_ENV_CACHE`,
    else `$XDG_CACHE_HOME/spyre-ci/envs`).

    Reused when its marker says it was completed for this torch version and project and its
    torch is still installed; a half-built one (no marker) is removed and built again.
    """
    cache = cache_dir
    env = TorchEnv(version, cache / f"torch-{version}")
    marker = env.path / MARKER
    wanted = {"torch": version, "project": str(project)}
    if marker.exists():
        try:
            recorded = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            recorded = {}
        if {k: recorded.get(k) for k in wanted} == wanted and env.installed_torch() == version:
            missing = [p for p in EXTRA_PACKAGES if p not in recorded.get("packages", ())]
            if missing:  # made by an older spyre-ci: add what is new, keep the rest
                log(f"torch {version}: adding {', '.join(missing)} to {env.path}")
                _run_logged(
                    [env.python, "-m", "pip", "install", "--disable-pip-version-check", *missing],
                    cache / f"torch-{version}.log",
                    log,
                    f"{version} extras",
                )
                marker.write_text(
                    json.dumps({**recorded, "packages": list(EXTRA_PACKAGES)}) + "\n",
                    encoding="utf-8",
                )
            log(f"torch {version}: reusing {env.path}")
            return env
    if env.path.exists():
        log(f"torch {version}: {env.path} is incomplete or for another project; rebuilding it")
        shutil.rmtree(env.path)
    cache.mkdir(parents=True, exist_ok=True)
    log_file = cache / f"torch-{version}.log"
    log_file.write_text("", encoding="utf-8")
    started = time.monotonic()
    log(
        f"torch {version}: creating {env.path} (log: {log_file}); the 2.14 wheels are CUDA "
        "builds of several GB that run on the CPU here"
    )
    python = base_python or sys.executable
    _run_logged([python, "-m", "venv", str(env.path)], log_file, log, f"{version} venv")
    pip = [env.python, "-m", "pip", "install", "--disable-pip-version-check"]
    _run_logged([*pip, f"torch=={version}", *EXTRA_PACKAGES], log_file, log, f"{version} torch")
    # The project pins one torch; --no-deps keeps the version this environment is for.
    _run_logged([*pip, "--no-deps", "-e", str(project)], log_file, log, f"{version} project")
    got = env.installed_torch()
    if got != version:
        raise EnvironmentFault(
            f"torch {version}: the environment has torch {got!r} after install; see {log_file}"
        )
    marker.write_text(
        json.dumps(
            {
                **wanted,
                "packages": list(EXTRA_PACKAGES),
                "created_s": round(time.monotonic() - started, 1),
            }
        )
        + "\n",
        encoding="utf-8",
    )
    log(f"torch {version}: ready in {time.monotonic() - started:.0f} s ({_size(env.path)})")
    return env


def _size(path: Path) -> str:
    return f"{folder_bytes(path) / 1e9:.1f} GB"
