from __future__ import annotations

import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from suites.model import Outcome, Status
from workflows.runner.shard_runner import (
    Limits,
    ShardResult,
    run_shard,
    short_message,
    thread_env,
)

CRASHY = textwrap.dedent(
    """
    import ctypes, os, signal, time

    def test_first():
        assert 1 + 1 == 2

    def test_segfault():
        ctypes.string_at(0)  # reads address 0: SIGSEGV

    def test_after_segfault():
        assert True

    def test_abort():
        os.abort()

    def test_hang():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3600)  # the hang under test: the runner's timeout must end it

    def test_fails():
        assert 2 + 2 == 5, "arithmetic broke"

    def test_last():
        assert True
    """
)

IDS = [
    f"demo::t::{n}::f32"
    for n in ("first", "segfault", "after_segfault", "abort", "hang", "fails", "last")
]


# tests/workflows: `contract_plugin` and `data/`, shared by the layers' tests.
WORKFLOWS_TESTS = Path(__file__).resolve().parents[1]

# The test subprocesses find `contract_plugin` (in tests/workflows) and this interpreter's path.
CONTRACT_ENV = {"PYTHONPATH": str(WORKFLOWS_TESTS) + ":" + ":".join(sys.path)}


def editable_contract_plugin(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of `contract_plugin` in `folder/plugins`, first on PYTHONPATH: the file a test
    edits under a zygote that loaded it."""
    plugins = folder / "plugins"
    plugins.mkdir()
    copy = plugins / "contract_plugin.py"
    copy.write_text((WORKFLOWS_TESTS / "contract_plugin.py").read_text())
    monkeypatch.setenv("PYTHONPATH", f"{plugins}:{CONTRACT_ENV['PYTHONPATH']}")
    return copy


@pytest.fixture()
def shard_dir(tmp_path: Path) -> Path:
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    return tmp_path


def run(shard_dir: Path, ids: list[str], **limits: Any) -> tuple[dict[str, Outcome], int]:
    seen: list[Outcome] = []
    env = CONTRACT_ENV
    result = run_shard(
        "s0",
        ids,
        shard_dir,
        limits=Limits(memory_mb=None, **limits),
        plugin="contract_plugin",
        env=env,
        progress=seen.append,
    )
    assert [o.id for o in seen] == [o.id for o in result.outcomes]
    return {o.id: o for o in result.outcomes}, result.subprocesses


def test_crash_and_hang_do_not_lose_the_rest_of_the_shard(shard_dir: Path) -> None:
    outcomes, subprocesses = run(shard_dir, IDS, test_timeout_s=1.0, kill_grace_s=1.0)
    assert sorted(outcomes) == sorted(IDS)
    status = {vid.split("::")[2]: o.status for vid, o in outcomes.items()}
    assert status == {
        "first": Status.PASSED,
        "segfault": Status.CRASHED,
        "after_segfault": Status.PASSED,
        "abort": Status.CRASHED,
        "hang": Status.TIMEOUT,
        "fails": Status.FAILED,
        "last": Status.PASSED,
    }
    assert "SIGSEGV" in outcomes["demo::t::segfault::f32"].message
    assert "SIGABRT" in outcomes["demo::t::abort::f32"].message
    assert "arithmetic broke" in outcomes["demo::t::fails::f32"].message
    assert subprocesses == 4  # one start, then one restart after each crash or hang


def test_a_process_that_cannot_start_its_tests_is_a_fault_not_a_test_result(
    shard_dir: Path,
) -> None:
    result = run_shard(
        "s1", IDS[:2], shard_dir, limits=Limits(memory_mb=None), plugin="no_such_plugin_module"
    )
    assert result.outcomes == []  # no variant is said to have failed
    assert result.fault is not None
    assert result.fault.unrun == tuple(IDS[:2])
    assert "no_such_plugin_module" in result.fault.cause  # pytest's own words, from stderr
    assert result.fault.attempts == 2 and result.subprocesses == 2  # retried once, fresh


def test_a_fault_cause_names_what_the_process_printed_on_stdout(tmp_path: Path) -> None:
    # A collection error goes to stdout: the cause must carry it, not "(no output)".
    (tmp_path / "test_broken.py").write_text("import no_such_module_for_collection\n")
    env = CONTRACT_ENV
    result = run_shard(
        "s",
        ["demo::t::x::f32"],
        tmp_path,
        limits=Limits(memory_mb=None),
        plugin="contract_plugin",
        env=env,
    )
    assert result.fault is not None and result.outcomes == []
    assert "no_such_module_for_collection" in result.fault.cause
    assert "--- stdout" in result.fault.cause


@pytest.mark.long
def test_a_memory_limit_too_small_for_the_interpreter_is_a_fault(shard_dir: Path) -> None:
    result = run_shard("s", IDS[:1], shard_dir, limits=Limits(memory_mb=20))
    assert result.outcomes == [] and result.fault is not None
    assert "before its first test" in result.fault.cause


def test_a_missing_interpreter_is_a_fault(shard_dir: Path) -> None:
    result = run_shard(
        "s",
        IDS[:1],
        shard_dir,
        limits=Limits(memory_mb=None),
        python=str(shard_dir / "no-such-python"),
    )
    assert result.outcomes == [] and result.fault is not None
    assert "cannot start the test process" in result.fault.cause


def test_a_crash_after_tests_ran_is_the_test_s_not_a_fault(shard_dir: Path) -> None:
    outcomes, _ = run(shard_dir, [IDS[1], IDS[2]])
    assert outcomes[IDS[1]].status is Status.CRASHED
    assert outcomes[IDS[2]].status is Status.PASSED


def test_a_background_child_of_a_test_does_not_outlive_the_shard(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    (tmp_path / "test_spawn.py").write_text(
        textwrap.dedent(
            f"""
        import subprocess, sys

        def test_spawn():
            # A background child that outlives the test unless the runner kills its group.
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
        """
        )
    )
    env = CONTRACT_ENV
    result = run_shard(
        "s",
        ["demo::t::spawn::f32"],
        tmp_path,
        limits=Limits(memory_mb=None),
        plugin="contract_plugin",
        env=env,
    )
    assert [o.status for o in result.outcomes] == [Status.PASSED]
    pid = int(pid_file.read_text())
    for _ in range(50):  # killed with its group; reaped by init shortly after
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if (
            Path(f"/proc/{pid}/stat").exists()
            and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        ):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the test's background child {pid} is still running after the shard")


def test_files_of_a_second_run_in_the_same_workdir_never_overwrite_the_first(
    shard_dir: Path,
) -> None:
    env = CONTRACT_ENV
    first = run_shard(
        "rerun",
        IDS[:1],
        shard_dir,
        limits=Limits(memory_mb=None),
        plugin="contract_plugin",
        env=env,
    )
    second = run_shard(
        "rerun",
        IDS[:1],
        shard_dir,
        limits=Limits(memory_mb=None),
        plugin="contract_plugin",
        env=env,
    )
    assert first.junit_paths and second.junit_paths
    assert set(first.junit_paths).isdisjoint(second.junit_paths)
    assert all(p.exists() for p in first.junit_paths + second.junit_paths)


def test_shard_deadline_marks_unrun_tests_timeout(shard_dir: Path) -> None:
    ids = [IDS[4], IDS[6]]  # the hang, then a test that never gets its turn
    outcomes, _ = run(shard_dir, ids, test_timeout_s=30.0, shard_timeout_s=2.0)
    assert outcomes[IDS[4]].status is Status.TIMEOUT
    assert outcomes[IDS[6]].status is Status.TIMEOUT
    assert "shard time limit" in outcomes[IDS[6]].message


def test_short_message_keeps_the_error_not_the_traceback() -> None:
    report = "x.py:3: in f\n    g()\nE   TypeError: bad dtype\nE   second line\n"
    assert short_message(report) == "TypeError: bad dtype\nsecond line"
    assert short_message("plain message") == "plain message"
    native = (
        'Traceback (most recent call last):\n  File "/x/ops.py", line 3, in f\n'
        '    g()\n    ^^^\n  File "/x/rules.py", line 9, in g\n    raise TypeError(\n'
        "TypeError: spyre does not support dtype torch.float64\nsecond line"
    )
    assert (
        short_message(native) == "TypeError: spyre does not support dtype torch.float64\n"
        "second line"
    )
    assert short_message("a" * 5000).endswith("...") and len(short_message("a" * 5000)) == 1000


def test_parallel_shards_split_the_cpus_between_their_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = CONTRACT_ENV

    def seen(parallel: int) -> str:
        """The OMP_NUM_THREADS a test subprocess of a shard sees."""
        work = tmp_path / f"p{parallel}"
        work.mkdir()
        (work / "test_threads.py").write_text(
            textwrap.dedent(
                """
            import os

            def test_threads():
                assert False, f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
            """
            )
        )
        result = run_shard(
            "s",
            ["demo::t::threads::f32"],
            work,
            limits=Limits(memory_mb=None),
            plugin="contract_plugin",
            env=env,
            parallel=parallel,
        )
        return result.outcomes[0].message

    cpus = os.cpu_count() or 1
    assert "OMP_NUM_THREADS=None" in seen(1)  # a lone shard keeps torch's own choice
    assert f"OMP_NUM_THREADS={max(1, cpus // 2)}" in seen(2)
    assert thread_env(2 * cpus) == {"OMP_NUM_THREADS": "1"}
    assert thread_env(2, {"OMP_NUM_THREADS": "3"}) == {}  # the user's setting wins


KILLS_PARENT = textwrap.dedent(
    """
    import os, signal, time

    def test_first():
        assert True

    def test_kills_parent():
        os.kill(os.getppid(), signal.SIGKILL)
        # The keeper's death takes its process along (its death signal), a moment later on
        # a busy machine: waiting here keeps that moment inside this test, not the next.
        time.sleep(60)

    def test_last():
        assert True
    """
)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_test_that_kills_its_parent_is_contained(
    tmp_path: Path, warm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workflows.runner import zygote

    monkeypatch.setenv("PYTHONPATH", CONTRACT_ENV["PYTHONPATH"])  # the zygote's too
    # A zygote of its own: the test kills the keeper, and a shared zygote of the same key
    # (another worker's test of the contract plugin) would be attached to, not started here.
    monkeypatch.setattr(zygote, "_SHARING", [])
    (tmp_path / "test_crashy.py").write_text(KILLS_PARENT)
    ids = [f"demo::t::{n}::f32" for n in ("first", "kills_parent", "last")]
    zygote.stop_all()  # those of the tests before this one in this process
    try:
        result = run_shard(
            "s0", ids, tmp_path, limits=Limits(memory_mb=None), plugin="contract_plugin", warm=warm
        )
        pids = [z.proc.pid for z in zygote._POOL._zygotes.values()]
        alive = [z for z in zygote._POOL._zygotes.values() if z.proc.poll() is None]
    finally:
        zygote.stop_all()
    statuses = {o.id.split("::")[2]: o.status for o in result.outcomes}
    # The runner (this process) is alive, every test has its outcome (the killer's: crashed,
    # by its keeper's signal, at once and not at the test timeout), the rest ran.
    assert set(statuses) == {"first", "kills_parent", "last"}, result.outcomes
    assert statuses["first"] is statuses["last"] is Status.PASSED
    assert statuses["kills_parent"] is Status.CRASHED
    killer = next(o for o in result.outcomes if "kills_parent" in o.id)
    assert "killed by signal 9 (SIGKILL)" in killer.message and killer.duration_s < 30
    assert result.fault is None
    if warm:
        assert result.warm_processes == result.subprocesses  # every process forked warm
        assert len(pids) == 1 and len(alive) == 1  # the zygote survived


def test_a_device_that_breaks_mid_shard_is_an_infrastructure_fault_not_test_failures(
    tmp_path: Path,
) -> None:
    from tests.testing.paths import TINY_SPEC

    plugins = WORKFLOWS_TESTS / "data" / "plugins"
    ids = [
        f"tiny::compare_cpu::{op}::{dtype}"
        for op in ("add", "mul", "sin", "pow", "softmax", "log_softmax")
        for dtype in ("float32", "float16")
    ]
    env = {
        "PYTEST_PLUGINS": "device_breaker",
        "BREAK_AFTER": "2",
        "PYTHONPATH": os.pathsep.join([str(plugins), *sys.path]),
    }
    result = run_shard(
        "s0", ids, tmp_path, specs=[str(TINY_SPEC)], env=env, limits=Limits(memory_mb=None)
    )
    # The two tests before the break are results; the failures after it are held until the
    # device's health probe, which fails: they are the device's, not the tests'.
    assert [o.status for o in result.outcomes] == [Status.PASSED, Status.PASSED]
    assert result.fault is not None
    assert "health probe" in result.fault.cause and "device stuck" in result.fault.cause
    assert set(result.fault.unrun) == set(ids[2:])


LOUD = textwrap.dedent(
    """
    import os, signal, sys

    def test_loud():
        sys.stdout.write("first line\\n" + "x" * 1_000_000 + "\\nlast words\\n")
        assert False, "loud and failing"

    def test_kills_itself():
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def run_loud(
    folder: Path, name: str, warm: bool, monkeypatch: pytest.MonkeyPatch, **limits: Any
) -> ShardResult:
    """`test_<name>` of LOUD, in a warm or a cold process."""
    monkeypatch.setenv("PYTHONPATH", CONTRACT_ENV["PYTHONPATH"])  # the zygote's too
    (folder / "test_loud.py").write_text(LOUD)
    ids = [f"demo::t::{name}::f32"]
    limited = Limits(memory_mb=None, **limits)
    return run_shard("s0", ids, folder, limits=limited, plugin="contract_plugin", warm=warm)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_test_s_output_is_capped_saying_where_it_was_cut(
    tmp_path: Path, warm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 64 * 1024
    result = run_loud(tmp_path, "loud", warm, monkeypatch, output_bytes=limit)
    assert [o.status for o in result.outcomes] == [Status.FAILED]
    assert result.warm_processes == (1 if warm else 0)
    [stdout] = tmp_path.glob("s0.*.stdout")
    text = stdout.read_text()
    # pytest's report holds the captured megabyte: kept are its start, a note where it was
    # cut, its end (the summary line), and what was cut.
    assert len(text) <= limit + 1000, len(text)
    assert "first line" in text and "1 failed" in text.splitlines()[-3]
    assert f"the output is cut here, after its first {limit // 2} bytes" in text
    assert re.search(r"\[spyre-ci: \d+ bytes of this output were cut where it says so", text)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_test_killed_by_a_signal_is_reported_by_its_signal(
    tmp_path: Path, warm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_loud(tmp_path, "kills_itself", warm, monkeypatch)
    [outcome] = result.outcomes
    assert outcome.status is Status.CRASHED
    assert outcome.message == "the test process killed by signal 9 (SIGKILL) while this test ran"
    assert result.warm_processes == (1 if warm else 0)


def test_how_a_process_ended_is_named_by_its_signal_or_exit_code() -> None:
    import signal

    from workflows.runner.keeper import status_text

    assert status_text(-9) == "killed by signal 9 (SIGKILL)"
    assert status_text(-int(signal.SIGSEGV)) == "killed by signal 11 (SIGSEGV)"
    assert status_text(-(int(signal.SIGRTMIN) + 2)).endswith("(SIGRTMIN+2)")  # no ValueError
    assert status_text(70) == "exited with code 70"
    assert status_text(None) == "was killed"


def test_capped_output_keeps_both_ends_within_its_limit(tmp_path: Path) -> None:
    from workflows.runner.keeper import Capped

    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    sink = Capped(fd, 1000)
    for n in range(2000):
        sink.write(f"{n:05d}\n".encode())
        assert path.stat().st_size <= 1000 + 200  # never past the limit, note aside
    sink.close()
    os.close(fd)
    text = path.read_text()
    assert text.startswith("00000\n00001\n")  # the first half as it came
    assert "the output is cut here, after its first 500 bytes" in text
    assert "01999\n\n[spyre-ci: " in text  # the latest lines, then what was cut
    kept = text.split("what follows is its end]\n")[1].split("\n[spyre-ci:")[0]
    assert kept.endswith("01999\n") and len(kept) >= 250  # at least a quarter of the limit
    assert f"({2000 * 6} written)" in text
    small = tmp_path / "small"
    fd = os.open(small, os.O_WRONLY | os.O_CREAT)
    sink = Capped(fd, 1000)
    sink.write(b"short\n")
    sink.close()
    os.close(fd)
    assert small.read_text() == "short\n"  # under the limit: as written, no note
