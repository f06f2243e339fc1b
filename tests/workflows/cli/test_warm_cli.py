"""`spyre-ci run` forked from the warm `spyre-ci` process (`workflows.cli.warm_cli`): the
fork is the process that asked (its streams, directory, environment, exit status, signals),
gives the verdict that process gives, and steps aside when its code changed.

Real processes throughout: the console script as a user runs it, the warm process it starts
in a warm folder of this module's own, the README's change on the bundled Inventory."""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suites.model import Inventory
from tests.e2e.test_readme import spyre_ci_executable
from tests.testing.cli import state_env
from tests.testing.paths import REPO_ROOT
from tests.testing.waiting import wait_for
from workflows.cli import warm_process
from workflows.runner import warm_share
from workflows.runner.zygote_process import file_digest, file_stamp
from workflows.stores import kept

GLU_PATCH = REPO_ROOT / "examples" / "changes" / "glu_batch_check.patch"


def short_folder(factory: pytest.TempPathFactory) -> Path:
    """A place for warm processes whose sockets' paths fit in 107 bytes whatever the test's
    name and pytest's run number (`warm_share.SOCKET_PATH_MAX`; a longer place is not shared,
    and nothing would fork)."""
    root = factory.mktemp("w", numbered=True)
    root.chmod(0o700)
    return root


@pytest.fixture(scope="module")
def warm_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A place of shared processes for this module alone (its warm `spyre-ci` process and
    zygotes), emptied at its end."""
    root = short_folder(tmp_path_factory)
    yield root
    warm_share.stop_every(root)


@pytest.fixture(scope="module")
def warm_env(
    warm_root: Path, seeded_state: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The environment of a user's `spyre-ci` on the bundled Inventory (a copy of the seeded
    state), sharing `warm_root`."""
    state = tmp_path_factory.mktemp("warm-cli-state") / "state"
    shutil.copytree(seeded_state, state)
    return {**state_env(state), "SPYRE_CI_WARM_DIR": str(warm_root)}


def spyre(
    *args: str, env: dict[str, str], cwd: Path = REPO_ROOT, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*spyre_ci_executable(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_folder(root: Path) -> Path | None:
    """The folder of the warm `spyre-ci` process in `root` (its `about.json` says so)."""
    for folder in root.iterdir():
        try:
            about = json.loads((folder / "about.json").read_text())
        except (OSError, ValueError):
            continue
        if about.get("kind") == "cli":
            return folder
    return None


def ready_warm(root: Path) -> Path:
    """The folder of the warm process once it serves (started by the first `run`)."""

    def serving() -> Path | None:
        folder = cli_folder(root)
        return folder if folder is not None and warm_share.ready(folder) else None

    return wait_for(serving, 120, "the warm spyre-ci process to be ready", every=0.2)


def forks(folder: Path) -> list[int]:
    """The pids of the forks the warm process made (each says so in its log)."""
    log = (folder / "log").read_text(errors="replace")
    lines = [line for line in log.splitlines() if line.startswith("fork ")]
    return [int(line.split()[1].rstrip(":")) for line in lines]


def new_failures(out: Path) -> list[tuple[str, str]]:
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    return sorted((r["id"], r["status"]) for r in record["results"] if r["classification"] == "new")


def test_a_run_forks_from_the_warm_process_and_gives_its_own_process_s_verdict(
    warm_root: Path, warm_env: dict[str, str], tmp_path: Path
) -> None:
    """The README's change: the first run runs in its own process and starts the warm
    process; the second is its fork, with the same exit code, new failures and output."""
    first = spyre("run", "--diff", str(GLU_PATCH), "--out", str(tmp_path / "a"), "--no-progress",
                  env=warm_env)  # fmt: skip
    assert first.returncode == 1, first.stderr[-3000:]
    folder = ready_warm(warm_root)
    assert forks(folder) == []  # it ran in its own process

    again = spyre("run", "--diff", str(GLU_PATCH), "--out", str(tmp_path / "b"), "--no-progress",
                  env=warm_env)  # fmt: skip
    assert again.returncode == 1, again.stderr[-3000:]
    assert len(forks(folder)) == 1
    assert "Traceback" not in again.stderr
    assert new_failures(tmp_path / "b") == new_failures(tmp_path / "a")
    assert len(new_failures(tmp_path / "b")) == 14
    # Its output is the process's own: the same lines but for the run's id and folder, and
    # where each failure's base outcome came from (run now by the first, read by the second).
    assert _shape(again.stdout, tmp_path / "b") == _shape(first.stdout, tmp_path / "a")


def _shape(stdout: str, out: Path) -> list[str]:
    lines = []
    for line in stdout.replace(str(out), "OUT").splitlines():
        line = re.sub(r"push-nosha-[0-9a-f]+", "RUN", line)
        lines.append(re.sub(r"\[without the change: passed, [^]]*\]", "[BASE]", line))
    return lines


def test_the_fork_has_the_asking_process_s_directory_environment_and_streams(
    warm_root: Path, warm_env: dict[str, str], seeded_state: Path, tmp_path: Path
) -> None:
    spyre("run", "--diff", str(tmp_path / "none.patch"), env=warm_env)  # starts it, if need be
    folder = ready_warm(warm_root)
    before = len(forks(folder))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    missing = spyre("run", "--diff", "missing.patch", env=warm_env, cwd=elsewhere)
    assert missing.returncode == 2, missing.stderr
    assert f"{elsewhere / 'missing.patch'}: cannot read the diff" in missing.stderr
    assert missing.stdout == ""
    helped = spyre("run", "--help", env=warm_env, cwd=elsewhere)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: spyre-ci run")

    # A real run in the asker's directory, with its state directory relative to it: History
    # is written there, not where the warm process was started.
    shutil.copytree(seeded_state, elsewhere / "my-state")
    env = {**warm_env, "SPYRE_CI_STATE_DIR": "my-state"}
    shutil.copy(GLU_PATCH, elsewhere / "glu.patch")
    ran = spyre("run", "--diff", "glu.patch", "--out", "out", "--no-progress", env=env,
                cwd=elsewhere)  # fmt: skip
    assert ran.returncode == 1, ran.stderr[-3000:]
    assert len(new_failures(elsewhere / "out")) == 14
    listed = spyre("runs", "list", env=env, cwd=elsewhere)  # its own process: not forked
    assert listed.returncode == 0 and "push-nosha" in listed.stdout, listed.stderr
    assert len(forks(folder)) == before + 3

    # Off, by the asker's own environment: its own process, not a fork.
    off = spyre("run", "--help", env={**warm_env, "SPYRE_CI_WARM_CLI": "0"}, cwd=elsewhere)
    assert off.returncode == 0 and off.stdout == helped.stdout
    assert len(forks(folder)) == before + 3


def _hanging_softsign(tmp_path: Path) -> Path:
    """A change to the installed torch whose softsign never returns."""
    spec = importlib.util.find_spec("torch")  # found, not imported
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations))) / "nn" / "functional.py"
    old = source.read_text(encoding="utf-8").splitlines(keepends=True)
    line = "    return input / (input.abs() + 1)\n"
    assert line in old
    hang = ["    import time\n", "\n", "    while True:\n", "        time.sleep(1)\n"]
    new = [y for x in old for y in (hang if x == line else [x])]
    patch = tmp_path / "softsign_hangs.patch"
    patch.write_text(
        "diff --git a/torch/nn/functional.py b/torch/nn/functional.py\n"
        + "".join(
            difflib.unified_diff(old, new, "a/torch/nn/functional.py", "b/torch/nn/functional.py")
        ),
        encoding="utf-8",
    )
    return patch


def _started_fork(folder: Path, before: int, proc: subprocess.Popen[str]) -> int:
    def started() -> int | None:
        assert proc.poll() is None, proc.communicate()
        made = forks(folder)
        return made[-1] if len(made) > before else None

    return wait_for(started, 60, "the fork running the command", every=0.1)


@pytest.mark.parametrize("what", ["SIGTERM to the asking process", "SIGKILL to the fork"])
def test_signals_reach_the_fork_and_its_end_is_the_asking_process_s(
    warm_root: Path, warm_env: dict[str, str], tmp_path: Path, what: str
) -> None:
    spyre("run", "--diff", str(tmp_path / "none.patch"), env=warm_env)
    folder = ready_warm(warm_root)
    before = len(forks(folder))
    patch = _hanging_softsign(tmp_path)
    proc = subprocess.Popen(
        [*spyre_ci_executable(), "run", "--diff", str(patch), "--out", str(tmp_path / "out"),
         "--no-progress", "--test-timeout", "300"],
        cwd=REPO_ROOT, env=warm_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    fork = _started_fork(folder, before, proc)
    time.sleep(1.0)  # into the run
    if what.startswith("SIGTERM"):
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err[-3000:]  # interrupted, as its own process would be
        assert "spyre-ci: interrupted" in err
    else:
        os.kill(fork, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, err[-3000:]  # killed the same way
        assert f"(pid {fork}) was killed by SIGKILL" in err
    wait_for(lambda: not _alive(fork), 30, "the fork to end", every=0.1)


def test_the_fork_ends_with_the_asking_process(
    warm_root: Path, warm_env: dict[str, str], tmp_path: Path
) -> None:
    spyre("run", "--diff", str(tmp_path / "none.patch"), env=warm_env)
    folder = ready_warm(warm_root)
    before = len(forks(folder))
    proc = subprocess.Popen(
        [*spyre_ci_executable(), "run", "--diff", str(_hanging_softsign(tmp_path)), "--out",
         str(tmp_path / "out"), "--no-progress"],
        cwd=REPO_ROOT, env=warm_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    fork = _started_fork(folder, before, proc)  # type: ignore[arg-type]
    # While its fork runs, it says it is in use every few seconds (nothing making room for
    # another warm process stops it under a run).
    time.sleep(3.0)
    assert time.time() - (folder / warm_share.USED).stat().st_mtime < 2.5
    proc.kill()
    proc.wait()
    wait_for(lambda: not _alive(fork), 30, "the fork to end with the process that asked")
    assert warm_share.ready(folder) is not None  # the warm process serves on


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_warm_process_whose_loaded_code_changed_refuses_and_steps_aside(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "place" / "0123456789abcdef"
    folder.mkdir(parents=True)
    module = tmp_path / "loaded.py"
    module.write_text("X = 1\n")
    warm = warm_process._Warm(folder)
    warm.files = [[str(module), file_stamp(str(module)), file_digest(str(module))]]
    warm.modules = frozenset(["loaded"])
    warm.publish(os.getpid())
    (folder / "socket").write_text("")
    assert warm.prepare() is None  # nothing changed: it forks

    os.utime(module)  # touched, same content: still nothing changed
    assert warm.prepare() is None
    module.write_text("X = 2\n")
    why = warm.prepare()
    assert why is not None and str(module) in why
    # Its place is free for a new one: no ready.json, no socket in its name.
    assert not (folder / "ready.json").exists() and not (folder / "socket").exists()
    warm.end()
    assert not folder.exists()


def test_a_kept_file_loaded_ahead_is_given_once_and_never_when_replaced(tmp_path: Path) -> None:
    store = kept.Kept(tmp_path / "traces", [Path(kept.__file__)], "a test value", 4, bool)
    store.save(b"key", {"value": [1, 2, 3]})
    assert kept.load_ahead(tmp_path) == [store.path(b"key")]
    assert kept.load_ahead(tmp_path) == []  # loaded already
    ahead = kept._AHEAD[store.path(b"key")][1]
    first = store.load(b"key")
    assert first is ahead  # no read, no unpickling
    second = store.load(b"key")
    assert second == first and second is not first  # a second load is its own copy

    kept.load_ahead(tmp_path)
    assert kept.ahead() == [{"value": [1, 2, 3]}]
    store.save(b"key", {"value": [4]})  # replaced whole: another file under that name
    assert store.load(b"key") == {"value": [4]}
    assert kept.ahead() == []  # taken, found stale: given to nobody


def test_the_warm_process_indexes_an_inventory_and_a_trace_loaded_ahead_for_its_forks(
    bundled_inventory: Inventory,
) -> None:
    from selector import ImpactMap
    from selector.index import InventoryIndex

    trace = ImpactMap(functions={"v": frozenset({"torch/a.py:f"})}, aten_ops={})
    warm_process._index_ahead([bundled_inventory, trace, {"not": "an Inventory"}])
    built = InventoryIndex.build(bundled_inventory, {})  # what a plan asks, in a fork
    assert built.inventory is bundled_inventory
    assert InventoryIndex.build(bundled_inventory) is built
    # The shipped trace loaded ahead: its names built here, not in every fork.
    assert trace.inverted()[0]._names == {"torch/a.py:f": frozenset({"torch/a.py:f"})}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b"", None),  # accepted, then silent: past the fork timeout, run in this process
        (b'{"error": "refused to fork: a file it loaded changed"}\n', None),
        (b"close", None),  # turned away unanswered (a warm process stepping aside)
        (b'{"pid": 999999}\n', 3),  # forked, then the warm process died: infrastructure
    ],
)
def test_the_asking_side_runs_the_command_itself_unless_a_fork_ran_it(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    answer: bytes,
    expected: int | None,
) -> None:
    import socket
    import threading

    from workflows.cli import warm_cli
    from workflows.settings import Settings

    warm = short_folder(tmp_path_factory)
    monkeypatch.setenv("SPYRE_CI_WARM_DIR", str(warm))
    monkeypatch.setattr(warm_cli, "FORK_TIMEOUT_S", 0.5)
    folder = warm_cli.folder(Settings.from_env())
    assert folder is not None
    folder.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "socket"))
    listener.listen(1)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        msg, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        got.append(msg)
        for fd in fds:
            os.close(fd)
        if answer == b"close":
            conn.close()
        elif answer:
            conn.sendall(answer)
            conn.close()  # an answer, then gone
        else:
            time.sleep(2.0)  # never answers within the timeout
            conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        code = warm_cli.forked(["spyre-ci", "run", "--help"])
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        server.join(5)
        listener.close()
    assert code == expected
    request = json.loads(got[0])
    assert request["argv"] == ["spyre-ci", "run", "--help"] and request["cwd"] == os.getcwd()
    assert request["env"]["SPYRE_CI_WARM_DIR"] == str(warm)
    if expected is not None:
        assert (
            "the warm spyre-ci process ended before its fork (pid 999999)" in capfd.readouterr().err
        )


# In the default run, a warm process whose loaded code changed refusing and stepping aside is
# `test_a_warm_process_whose_loaded_code_changed_refuses_and_steps_aside`.
@pytest.mark.long
def test_a_warm_process_steps_aside_when_a_module_it_loaded_changes(
    warm_env: dict[str, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """End to end: a module the warm process imported (here one the last runs recorded,
    on the asker's PYTHONPATH) changes on disk; the warm process steps aside at once, the
    next run runs in its own process and starts a new warm process, which serves the one
    after."""
    modules = tmp_path / "modules"
    modules.mkdir()
    probe = modules / "warm_probe_module.py"
    probe.write_text("VALUE = 1\n")
    root = short_folder(tmp_path_factory)
    try:
        _steps_aside(root, modules, probe, warm_env, tmp_path)
    finally:
        warm_share.stop_every(root)  # its warm processes end with the test, not when idle


def _steps_aside(
    root: Path, modules: Path, probe: Path, warm_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**warm_env, "SPYRE_CI_WARM_DIR": str(root), "PYTHONPATH": str(modules)}
    spyre("run", "--diff", str(tmp_path / "none.patch"), env=env)  # starts it
    first = ready_warm(root)
    pid = warm_share.ready(first)["pid"]  # type: ignore[index]
    imports = first.with_name(first.name + ".imports")
    imports.write_text(json.dumps(["warm_probe_module"]))  # as a run records it

    def loaded() -> bool:
        return any(f[0] == str(probe) for f in (warm_share.ready(first) or {}).get("files", []))

    wait_for(loaded, 30, "the warm process to import the recorded module", every=0.2)
    probe.write_text("VALUE = 2\n")
    wait_for(lambda: not _alive(pid), 30, "the warm process to step aside and end", every=0.2)

    helped = spyre("run", "--help", env=env)  # no warm process: its own process
    assert helped.returncode == 0 and helped.stdout.startswith("usage: spyre-ci run")
    spyre("run", "--diff", str(tmp_path / "none.patch"), env=env)  # starts a new one
    second = ready_warm(root)
    assert warm_share.ready(second)["pid"] != pid  # type: ignore[index]
    assert spyre("run", "--help", env=env).returncode == 0
    assert len(forks(second)) == 1


def test_a_file_named_by_the_asker_s_own_descriptor_is_read_in_its_own_process(
    warm_root: Path, warm_env: dict[str, str], tmp_path: Path
) -> None:
    """`--diff <(git diff)`: the shell passes `/dev/fd/63`, a descriptor only the asking
    process has (a fork would read its own, or nothing): never forked."""
    from workflows.cli.warm_cli import _names_own_descriptor

    assert _names_own_descriptor("/dev/fd/63") and _names_own_descriptor("--diff=/dev/fd/63")
    assert _names_own_descriptor("/proc/self/fd/5") and _names_own_descriptor("/proc/self/cwd")
    assert not _names_own_descriptor("/dev/fd/0")  # stdin: handed over with the request
    assert not _names_own_descriptor("examples/dev/fd/63") and not _names_own_descriptor("x")

    spyre("run", "--diff", str(tmp_path / "none.patch"), env=warm_env)
    folder = ready_warm(warm_root)
    before = len(forks(folder))
    script = f"{' '.join(spyre_ci_executable())} run --diff <(echo 'not a diff') --no-progress"
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=warm_env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert "/dev/fd/" in done.stderr  # it read the shell's descriptor: the file is named
    assert len(forks(folder)) == before
