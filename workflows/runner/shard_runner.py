"""Run one shard of variant tests as pytest subprocesses that may crash or hang.

Long on purpose: it is one subprocess lifecycle (start cold or from the zygote, watch, time out,
kill the group, attribute a crash to the running test, retry a process that cannot start once)
whose parts share the state of the process they run; the records it returns (`Limits`,
`InfraFault`, `ShardRun`) are small.

The pytest plugin (`suites.pytest_plugin`) writes a JSON line when each test starts and
ends. A subprocess that dies (segfault, abort, memory limit) or stops answering leaves one
started test without an end: that test is recorded as crashed or timeout, and a fresh
subprocess runs the rest of the shard. Nothing the shard was asked to run goes unreported.
An id the specs no longer have comes back as a `removed` outcome (the plugin's, before its
first test): not a test result and not a fault; the rest of the shard runs as usual.

A subprocess that ends before any test starts (it cannot start, cannot import torch, cannot
collect, never writes a result) says nothing about the tests: it is the tool's or the
machine's fault. It is tried once more in a fresh process; if that one fails too the shard
ends with an `InfraFault` naming the cause, and its unrun variants get no outcome at all.

A test process is forked from a warm zygote (`workflows/runner/zygote.py`: torch, the test
databases and the expanded suites already loaded) when one may serve the shard, else started
cold; both run the same pytest command line with the same files and are killed, timed and
limited the same way, under a keeper (`workflows/runner/keeper.py`: a test that kills its
parent kills the keeper; what it writes is capped at `Limits.output_bytes` a stream).
`warm=False` (`SPYRE_CI_ZYGOTE=0`, handed in as `Settings.zygote` by the callers that run a
run's shards) starts every process cold.

A run's changed torch module runs at import, before the first test: an import of it that
outlives the per-test timeout is killed, and a process that ends in it (killed, exited,
raised: `workflows/runner/change_imports.py`) is the change's failure, an `InfraFault` whose
`change` says so, at once and never retried; the pipeline gives its variants `error`
outcomes. The zygote's import of the change stands for its forks (`zygote.ChangeFailed`),
with the same words.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from suites.claims import Claims
from suites.model import Outcome, Status
from suites.results_file import DeviceFault, ResultsReader, Started
from workflows.runner import change_imports, keeper, zygote
from workflows.runner.keeper import DEFAULT_OUTPUT_BYTES, status_text
from workflows.settings import child_environment

PLUGIN = "suites.pytest_plugin"
_POLL_S = 0.05
_STDERR_TAIL = 2000
_MESSAGE_LIMIT = 1000


@dataclass(frozen=True)
class Limits:
    """Per-test and per-shard bounds; `memory_mb` caps each subprocess's address space."""

    test_timeout_s: float = 300.0
    shard_timeout_s: float = 3 * 3600.0
    memory_mb: int | None = 8192
    # Extra time a subprocess gets beyond the test timeout before it is killed: the plugin's
    # own timeout should fire first and report a clean timeout from inside the process.
    kill_grace_s: float = 10.0
    output_bytes: int = DEFAULT_OUTPUT_BYTES  # kept of each of a process's stdout and stderr

    @property
    def hang_s(self) -> float:
        """How long a test, or an import of a run's change, may run before it is killed."""
        return self.test_timeout_s + self.kill_grace_s


@dataclass(frozen=True)
class InfraFault:
    """A shard whose test processes could not run its tests: never a result of those tests."""

    shard_id: str
    cause: str  # the exit status and the tail of the process's stderr and stdout
    unrun: tuple[str, ...]  # the variants it could not run
    attempts: int  # fresh processes tried
    # Set when the run's change is what failed (its import hung, ended its process or
    # raised, `change_imports.blame`): not the tool's fault; the words are the outcome's.
    change: str = ""

    @property
    def summary(self) -> str:
        first = next((line for line in self.cause.splitlines() if line.strip()), self.cause)
        return (
            f"{self.shard_id}: {len(self.unrun)} variant(s) not run, the test process "
            f"failed before its first test {self.attempts} time(s): {first[:300]}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "shard_id": self.shard_id,
            "cause": self.cause,
            "unrun": list(self.unrun),
            "attempts": self.attempts,
            "change": self.change,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> InfraFault:
        unrun = data.get("unrun") or ()
        attempts = data.get("attempts", 1)
        return cls(
            str(data["shard_id"]),
            str(data.get("cause", "")),
            tuple(str(v) for v in unrun) if isinstance(unrun, list | tuple) else (),
            int(attempts) if isinstance(attempts, int | str | float) else 1,
            str(data.get("change") or ""),
        )


@dataclass(frozen=True)
class ShardRun:
    """What one shard (or a rerun, or an expansion) came back with."""

    outcomes: list[Outcome]
    fault: InfraFault | None = None
    junit_paths: tuple[Path, ...] = ()  # as the test processes wrote them, in the work dir


@dataclass
class ShardResult:
    shard_id: str
    outcomes: list[Outcome] = field(default_factory=list)
    junit_paths: list[Path] = field(default_factory=list)
    subprocesses: int = 0
    warm_processes: int = 0  # of `subprocesses`, those forked from a warm zygote
    wall_s: float = 0.0
    fault: InfraFault | None = None  # set when the shard could not run what is left of it


ProgressCallback = Callable[[Outcome], None]


def pytest_command(
    ids_file: Path,
    results_file: Path,
    junit_file: Path,
    *,
    specs: Sequence[str] = (),
    test_timeout_s: float,
    plugin: str = PLUGIN,
    python: str = sys.executable,
) -> list[str]:
    """The command line of one shard subprocess (the plugin's documented contract).

    No configuration file: a work folder inside a checkout would otherwise take that
    checkout's pytest `addopts` (`-n auto` started xdist workers, each a fresh interpreter
    that imports torch again, in every shard process of `spyre-ci run --out out`).
    """
    command = [
        python,
        "-m",
        "pytest",
        "-c",
        os.devnull,
        "--rootdir",
        ".",  # the work folder, where it runs
        "-p",
        plugin,
        "-p",
        "no:cacheprovider",
        "-q",
        "--spyre-ids",
        str(ids_file),
        "--spyre-results",
        str(results_file),
        "--spyre-timeout",
        str(test_timeout_s),
        f"--junitxml={junit_file}",
    ]
    for spec in specs:
        command += ["--spyre-specs", spec]
    return command


def thread_env(parallel: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`OMP_NUM_THREADS` for a test subprocess that shares the machine with `parallel - 1`
    others: the CPUs split between them, at least one each.

    torch sizes its intra-op pool to the whole machine, so two shards on two cores would
    run four busy threads; with one thread each a 2-shard run takes 57 s instead of 74 s
    here (`benchmarks/results/workflows_executors_large.json`). Nothing is set for a lone
    subprocess, or when the environment it inherits (`environ`, default: this process's)
    already says how many threads to use.
    """
    environ = child_environment() if environ is None else environ
    if parallel <= 1 or "OMP_NUM_THREADS" in environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // parallel))}


def run_shard(
    shard_id: str,
    variant_ids: Sequence[str],
    workdir: Path,
    *,
    limits: Limits = Limits(),
    specs: Sequence[str] = (),
    plugin: str = PLUGIN,
    env: dict[str, str] | None = None,
    progress: ProgressCallback | None = None,
    python: str | None = None,
    parallel: int = 1,
    stop: threading.Event | None = None,
    warm: bool = True,
    claims: Claims | None = None,
) -> ShardResult:
    """Run every id of the shard; returns one Outcome per id that ran, in completion order.

    Ids the shard could not run (`ShardResult.fault`) have no outcome; ids the loaded specs
    no longer have get a `Status.REMOVED` one. `python` is the
    interpreter of the test subprocesses (default: this one); another environment's (an
    upgrade run's torch version) must have the project installed. `parallel`: how many
    shards run at once on this machine (`thread_env`). `workdir` must be absolute: the
    subprocesses run in it. `stop`, once set, kills the running test process's group within
    a poll interval and returns what finished (an interrupted run: nothing more is started).
    `warm`: fork the test processes from a zygote when one may serve them (the callers that
    have settings hand in `Settings.zygote`, False under `SPYRE_CI_ZYGOTE=0`); see
    `workflows.runner.zygote.key_for` for when none may. False starts every one cold.
    `claims`: the shard's ids are shared with other runners (work stealing,
    `suites.claims`): a variant another runner took is left to it and gets no outcome here.
    """
    workdir = workdir.resolve()
    env = {**thread_env(parallel), **(env or {})}
    workdir.mkdir(parents=True, exist_ok=True)
    interpreter = python or sys.executable
    key = zygote.key_for(interpreter, plugin, specs, child_environment(env)) if warm else None
    result = ShardResult(shard_id)
    done: dict[str, Outcome] = {}
    started = time.monotonic()
    fruitless = 0  # subprocesses in a row that ended before their first test
    yielded = 0  # subprocesses that ran nothing: every id they had was claimed by others

    def record(outcome: Outcome) -> None:
        if outcome.id in done:  # a retried subprocess never reports a variant twice
            return
        done[outcome.id] = outcome
        result.outcomes.append(outcome)
        if progress is not None:
            progress(outcome)

    while True:
        remaining = [
            vid
            for vid in variant_ids
            if vid not in done and (claims is None or not claims.taken_by_others(vid))
        ]
        if not remaining or (stop is not None and stop.is_set()):
            break
        left_s = limits.shard_timeout_s - (time.monotonic() - started)
        if left_s <= 0:
            for vid in remaining:
                record(Outcome(vid, Status.TIMEOUT, 0.0, "shard time limit reached before it ran"))
            break
        attempt = _fresh_stem(workdir, shard_id)
        result.subprocesses += 1
        ids_file = workdir / f"{shard_id}.{attempt}.ids"
        results_file = workdir / f"{shard_id}.{attempt}.jsonl"
        junit_file = workdir / f"{shard_id}.{attempt}.xml"
        ids_file.write_text("\n".join(remaining) + "\n", encoding="utf-8")
        command = pytest_command(
            ids_file,
            results_file,
            junit_file,
            specs=specs,
            test_timeout_s=limits.test_timeout_s,
            plugin=plugin,
            python=interpreter,
        ) + (claims.as_options() if claims is not None else [])
        ended_before = len(done)
        device_faults: list[DeviceFault] = []
        blamed = ""  # the change's failure, when the change's import is what ended it
        try:
            returncode, forked, blamed = _run_subprocess(
                command, results_file, workdir, limits, left_s, env, record, stop, key,
                device_faults,
            )  # fmt: skip
            result.warm_processes += forked
        except zygote.ChangeFailed as exc:  # the zygote's import of the change failed
            returncode, blamed = None, exc.why
            cause = f"{exc.why}\n--- the zygote's log (last lines) ---\n{_tail(exc.log)}"
        except OSError as exc:  # the interpreter is gone, fork failed, the disk is full
            returncode, cause = None, f"cannot start the test process: {exc}"
        else:
            cause = _cause(returncode, results_file.with_suffix(""), blamed)
        if blamed and len(done) == ended_before:
            # Deterministic, and not the tool's: no second process is spent on it.
            result.fault = InfraFault(shard_id, cause, tuple(remaining), 1, change=blamed)
            break
        if device_faults:
            # The device-fault guard: the failures since the device's last good probe are
            # the device's, not their tests'. The shard stops as an infrastructure fault.
            held = device_faults[0].ids
            result.fault = InfraFault(
                shard_id,
                f"the device failed its health probe after {len(held)} failure(s) in a row "
                f"({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}): "
                f"{device_faults[0].reason}",
                tuple(vid for vid in variant_ids if vid not in done),
                1,
            )
            break
        if len(done) > ended_before:
            if junit_file.exists():
                result.junit_paths.append(junit_file)
            fruitless = 0
            continue
        if claims is not None and returncode == 0 and yielded < _YIELDS:
            # It ran nothing because other runners took what it had: not a fault.
            yielded += 1
            continue
        # A fruitless process's JUnit (pytest's "internal error" case) stays in the work
        # folder for diagnosis: exported, it would read as a failed test.
        fruitless += 1
        if fruitless < _ATTEMPTS:
            continue  # once more, in a fresh process
        result.fault = InfraFault(shard_id, cause, tuple(remaining), fruitless)
        break
    result.wall_s = time.monotonic() - started
    return result


def _fresh_stem(workdir: Path, shard_id: str) -> str:
    """`<pid>.<n>` naming no file in `workdir` yet: a second rerun in the same folder, or a
    redelivered task after a killed one (another pid), never overwrites what is there."""
    n = 0
    while (workdir / f"{shard_id}.{os.getpid()}.{n}.ids").exists():
        n += 1
    return f"{os.getpid()}.{n}"


_ATTEMPTS = 2  # fresh processes a shard gets to run its first test before it is a fault
_YIELDS = 8  # processes that found all they had taken by other runners, before that is a fault


def _cause(returncode: int | None, stem: Path, change: str = "") -> str:
    """Why a test process ended before its first test: exit status (or the change's import
    that ended it), stderr and stdout tails.

    pytest prints collection errors and usage errors to different streams; both are kept.
    """
    parts = [change or f"the test process {status_text(returncode)} before its first test"]
    for stream in ("stderr", "stdout"):
        tail = _tail(Path(f"{stem}.{stream}"))
        if tail != "(no output)":
            parts.append(f"--- {stream} (last lines) ---\n{tail}")
    if len(parts) == 1:
        parts.append("it wrote nothing on stderr or stdout")
    return "\n".join(parts)


class TestProcess(Protocol):
    """A running test process: a cold `subprocess.Popen` or a `zygote.WarmChild`."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


def _start(
    command: list[str],
    workdir: Path,
    env: dict[str, str],
    limits: Limits,
    stem: Path,
    key: zygote.ZygoteKey | None,
) -> tuple[TestProcess, bool]:
    """The test process of `command`, forked warm when `key` names a zygote that can, and
    whether it was; its stdout and stderr go to `<stem>.stdout` and `<stem>.stderr`.
    `zygote.ChangeFailed` when the zygote of `key` failed in its import of the change."""
    out, err = Path(f"{stem}.stdout"), Path(f"{stem}.stderr")
    out.write_bytes(b"")
    err.write_bytes(b"")
    if key is not None:
        try:
            child = zygote.fork(
                key,
                command[3:],  # after `python -m pytest`
                cwd=workdir,
                env=env,
                stdout=out,
                stderr=err,
                memory_mb=limits.memory_mb,
                import_limit_s=limits.hang_s,
                output_bytes=limits.output_bytes,
            )
        except zygote.ChangeFailed:
            raise
        except zygote.ZygoteUnavailable as exc:
            zygote.log_once(f"warm runner unavailable, test processes start cold: {exc}")
        else:
            return child, True
    interpreter = command[0] if os.sep in command[0] else shutil.which(command[0])
    if interpreter is None or not os.access(interpreter, os.X_OK):
        # Said as Popen would, not as the keeper (exit 127) would.
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
    # The keeper: this interpreter, isolated (`-I -S`: it imports nothing of the test's
    # environment), running `keeper.py` as a script; it starts the test process and waits.
    keep = [sys.executable, "-I", "-S", keeper.__file__, str(os.getpid())]
    keep += [str(limits.output_bytes), str(limits.memory_mb or 0), "--"]
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [*keep, *command],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,  # as a warm one's: a test never reads the runner's
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # so a kill reaches grandchildren too
        )
    return proc, False


def _pause(proc: TestProcess, seconds: float) -> None:
    """Wait up to `seconds` between two looks at a test process, back at once when it
    exits: a shard's end (and the run's next step) is not a poll interval late."""
    if isinstance(proc, zygote.WarmChild):
        proc.exited_within(seconds)
    elif isinstance(proc, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(seconds)
    else:
        time.sleep(seconds)


def _run_subprocess(
    command: list[str],
    results_file: Path,
    workdir: Path,
    limits: Limits,
    budget_s: float,
    env: dict[str, str] | None,
    record: ProgressCallback,
    stop: threading.Event | None = None,
    key: zygote.ZygoteKey | None = None,
    device_faults: list[DeviceFault] | None = None,
) -> tuple[int | None, bool, str]:
    """Run one test process to its end; returns its exit code (None when it was killed),
    whether it was forked warm, and the change's failure when the change's import ended it
    before its first test ("" otherwise). A device fault its plugin reported goes into
    `device_faults`."""
    device_faults = [] if device_faults is None else device_faults
    stem = results_file.with_suffix("")
    results_file.touch()
    imports = Path(f"{stem}.imports")
    env = {**(env or {}), change_imports.IMPORTS_VAR: str(imports)}
    proc, forked = _start(command, workdir, child_environment(env), limits, stem, key)
    reader = ResultsReader(results_file)
    deadline = time.monotonic() + budget_s
    current: tuple[str, float] | None = None  # (variant id, monotonic start)
    killed_for: Status | None = None
    tested = False  # a test started in this process
    hung = False  # killed in an import of the change that outlived the per-test timeout
    try:
        while True:
            exited = proc.poll() is not None
            for event in reader.read():
                if isinstance(event, Started):
                    tested = True
                    current = (event.id, time.monotonic())
                elif isinstance(event, DeviceFault):
                    device_faults.append(event)
                    current = None  # its process ends now; no test of it is a result
                else:
                    record(replace(event, message=short_message(event.message)))
                    current = None
            if exited:
                break
            now = time.monotonic()
            test_overdue = current is not None and now - current[1] > limits.hang_s
            if test_overdue or now > deadline:
                killed_for = Status.TIMEOUT
            if current is None and not tested and imports.exists() and not hung:
                hung = change_imports.overdue(change_imports.read(imports), limits.hang_s)
            if stop is not None and stop.is_set():
                _kill_group(proc)
                return None, forked, ""  # interrupted: the test running reports nothing
            if hung:
                _kill_group(proc)
                break
            if killed_for is not None:
                _kill_group(proc)
                continue
            _pause(proc, _POLL_S)
    finally:
        # Always the whole group: a test that started a background child must not leave it
        # running after its process ended.
        _kill_group(proc)
        reader.close()
    if current is not None and getattr(proc, "zygote_died", False) and killed_for is None:
        # The zygote it was forked from died (the OOM killer, an operator) and took it along:
        # an infrastructure event, not its test's result. No outcome: a fresh process (cold,
        # that zygote is gone) runs the test again.
        zygote.log_once(f"the warm zygote died under test {current[0]}: it runs again, cold")
    elif current is not None:
        vid, began = current
        elapsed = time.monotonic() - began
        if killed_for is Status.TIMEOUT:
            record(
                Outcome(
                    vid,
                    Status.TIMEOUT,
                    elapsed,
                    f"no result after {elapsed:.0f} s: the test process was killed",
                )
            )
        else:
            record(Outcome(vid, Status.CRASHED, elapsed, _describe_exit(proc.returncode)))
    blamed = None
    if not tested and imports.exists():
        watched = change_imports.read(imports)
        blamed = (
            change_imports.hung(watched, limits.hang_s)
            if hung
            else change_imports.blame(watched, proc.returncode, _tail(Path(f"{stem}.stderr")))
        )
    ended = None if killed_for is not None or hung else proc.returncode
    return ended, forked, blamed or ""


def short_message(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    """The error itself, not the traceback: pytest's `E   ` lines when there are some, else
    the exception that ends a native traceback.

    The whole report stays in the JUnit artifact; outcomes carry what a reader scans.
    """
    lines = text.splitlines()
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    short = "\n".join(errors) if errors else (_native_exception(lines) or text.strip())
    return short if len(short) <= limit else short[: limit - 3] + "..."


def _native_exception(lines: Sequence[str]) -> str | None:
    """The exception that ends a Python traceback: what follows its last frame."""
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return None
    rest = lines[frames[-1] + 1 :]
    while rest and rest[0].startswith("    "):  # the frame's source line and its carets
        rest = rest[1:]
    return "\n".join(rest).strip() or None


def _kill_group(proc: TestProcess) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _describe_exit(returncode: int | None) -> str:
    return f"the test process {status_text(returncode)} while this test ran"


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4 * _STDERR_TAIL))
            text = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return "(no output)"
    text = text.strip()
    return text[-_STDERR_TAIL:] if text else "(no output)"
