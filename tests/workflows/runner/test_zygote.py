"""The warm runner on real processes: forked test processes behave as cold ones do."""

from __future__ import annotations

import logging
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from suites.model import Status
from tests.testing.waiting import wait_for
from tests.workflows.runner.test_shard_runner import (
    CONTRACT_ENV,
    CRASHY,
    IDS,
    editable_contract_plugin,
)
from workflows.runner import zygote
from workflows.runner.shard_runner import PLUGIN, Limits, run_shard
from workflows.settings import Settings, SettingsError
from workflows.tracing.trace_store import tracing_env

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny.yaml"
TINY_IDS = [
    "tiny::compare_cpu::softmax::float32",
    "tiny::compare_cpu::add::float16",
    "tiny::compare_cpu::pow::float32",
]


@pytest.fixture(autouse=True)
def fresh_zygotes() -> Iterator[None]:
    zygote.stop_all()
    yield
    zygote.stop_all()


@pytest.fixture()
def contract_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract plugin importable by this process, hence by its zygote and its children
    (a warm test process has the environment the runner had when it built the zygote)."""
    monkeypatch.setenv("PYTHONPATH", CONTRACT_ENV["PYTHONPATH"])


def zygote_pids() -> list[int]:
    """The zygotes' own pids (their keepers' once they are not ready yet)."""
    return [z.pid or z.proc.pid for z in zygote._POOL._zygotes.values()]


def test_a_warm_shard_has_the_outcomes_of_a_cold_one(tmp_path: Path) -> None:
    cold = run_shard("s", TINY_IDS, tmp_path / "cold", specs=[str(TINY)], warm=False)
    warm = run_shard("s", TINY_IDS, tmp_path / "warm", specs=[str(TINY)], warm=True)
    assert (cold.warm_processes, warm.warm_processes) == (0, 1)

    def statuses(result: object) -> dict[str, Status]:
        return {o.id: o.status for o in result.outcomes}  # type: ignore[attr-defined]

    assert statuses(warm) == statuses(cold) and len(statuses(warm)) == 3
    assert all(p.exists() for p in warm.junit_paths)
    # An eager suite's zygote leaves torch.compile's own modules to the tests that compile.
    (one,) = zygote._POOL._zygotes.values()
    loaded = {path for path, _stamp, _digest in one._files}
    assert any(
        path.endswith("torch/testing/_internal/common_methods_invocations.py") for path in loaded
    )
    assert not any(path.endswith("torch/_functorch/aot_autograd.py") for path in loaded)
    again = run_shard("s", TINY_IDS[:1], tmp_path / "again", specs=[str(TINY)], warm=True)
    assert again.warm_processes == 1 and again.outcomes[0].status is Status.PASSED


# In the default run: `test_another_venv_of_the_same_interpreter_is_not_this_environment` (a
# build's interpreter gets a zygote key of its own) and
# `test_a_warm_shard_has_the_outcomes_of_a_cold_one`.
@pytest.mark.long
def test_a_build_s_shards_fork_from_a_zygote_of_the_build_s_own_torch(tmp_path: Path) -> None:
    """A build of the source (a venv of its own torch) gets its own zygote: started by its
    interpreter, it loads the build's torch, and its forks have the outcomes of the build's
    cold test processes."""
    from tests.workflows.runner.test_torch_builds import BUILD_SHA, fake_build

    build = fake_build(tmp_path / "builds" / "b", BUILD_SHA)
    python = str(build / "bin" / "python")
    cold = run_shard("s", TINY_IDS, tmp_path / "cold", specs=[str(TINY)], python=python, warm=False)
    warm = run_shard("s", TINY_IDS, tmp_path / "warm", specs=[str(TINY)], python=python)
    assert (cold.warm_processes, warm.subprocesses, warm.warm_processes) == (0, 1, 1)
    assert {o.id: o.status for o in warm.outcomes} == {o.id: o.status for o in cold.outcomes}
    assert len(warm.outcomes) == 3
    (one,) = zygote._POOL._zygotes.values()
    assert one.key.python == python
    loaded = {path for path, _stamp, _digest in one._files}
    assert any(path.startswith(str(build)) and path.endswith("torch/version.py") for path in loaded)
    assert not any(path.startswith(sys.prefix + os.sep) and "/torch/" in path for path in loaded)


@pytest.mark.long
def test_a_crash_or_hang_in_a_warm_child_costs_one_variant(
    tmp_path: Path, contract_path: None
) -> None:
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    result = run_shard(
        "s0",
        IDS,
        tmp_path,
        limits=Limits(memory_mb=None, test_timeout_s=1.0, kill_grace_s=1.0),
        plugin="contract_plugin",
        warm=True,
    )
    status = {o.id.split("::")[2]: o.status for o in result.outcomes}
    assert status == {
        "first": Status.PASSED,
        "segfault": Status.CRASHED,
        "after_segfault": Status.PASSED,
        "abort": Status.CRASHED,
        "hang": Status.TIMEOUT,
        "fails": Status.FAILED,
        "last": Status.PASSED,
    }
    by_id = {o.id: o for o in result.outcomes}
    assert "SIGSEGV" in by_id["demo::t::segfault::f32"].message
    assert "SIGABRT" in by_id["demo::t::abort::f32"].message
    # One start, a new child after each crash and after the hang: all forked warm.
    assert result.subprocesses == result.warm_processes == 4


def test_a_mutated_environment_never_runs_in_the_plain_zygote(
    tmp_path: Path, contract_path: None
) -> None:
    (tmp_path / "test_env.py").write_text(
        textwrap.dedent(
            """
            import os

            def test_env():
                assert os.environ.get("SPYRE_CI_MUTATION") == "m1"
            """
        )
    )
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    plain = run_shard("p", ["demo::t::first::f32"], tmp_path, plugin="contract_plugin", warm=True)
    assert plain.warm_processes == 1  # the plain zygote exists and serves plain shards
    mutated = run_shard(
        "m",
        ["demo::t::env::f32"],
        tmp_path,
        plugin="contract_plugin",
        env={"SPYRE_CI_MUTATION": "m1"},
        warm=True,
    )
    assert [o.status for o in mutated.outcomes] == [Status.PASSED]  # it saw its env
    assert mutated.subprocesses == 1 and mutated.warm_processes == 0  # cold


def test_key_follows_what_changes_imports_not_what_the_child_reads_at_run_time() -> None:
    base = dict(os.environ)
    key = zygote.key_for(sys.executable, PLUGIN, (), base)
    assert key is not None
    runtime = {**base, "OMP_NUM_THREADS": "1", "PYTEST_CURRENT_TEST": "x", "SPYRE_CI_ZYGOTE": "1"}
    assert zygote.key_for(sys.executable, PLUGIN, (), runtime) == key
    # Started from another xdist worker (a test suite's): the same zygote.
    for worker in ("gw0", "gw1"):
        xdist = {**base, "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": "2"}
        assert zygote.key_for(sys.executable, PLUGIN, (), xdist) == key
    # What importing inductor sets in the runner (a first run that expanded suites): the
    # next `spyre-ci` process, without it, must find the same shared zygote.
    inductor = {**base, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_user"}
    assert zygote.key_for(sys.executable, PLUGIN, (), inductor) == key
    for extra in ({"SPYRE_CI_MUTATION": "/tmp/m.json"}, {"PYTHONPATH": "/tmp/site"}):
        assert zygote.key_for(sys.executable, PLUGIN, (), {**base, **extra}) is None
    assert zygote.key_for("/usr/bin/false", PLUGIN, (), base) is None  # another interpreter
    # A run tracing chosen ids loads the tracer in the child: warm. Tracing the session too
    # (imports, collection: done in the zygote) is not.
    ids_trace = tracing_env(Path("/tmp/ids"), Path("/tmp/trace.jsonl"))
    assert zygote.key_for(sys.executable, PLUGIN, (), {**base, **ids_trace}) == key
    session_trace = {k: v for k, v in ids_trace.items() if k != "SPYRE_CI_TRACE_IDS"}
    assert zygote.key_for(sys.executable, PLUGIN, (), {**base, **session_trace}) is None
    assert zygote.key_for(sys.executable, PLUGIN, (str(TINY),), base) != key


def test_a_change_s_mirror_of_torch_root_gets_a_zygote_of_its_own(tmp_path: Path) -> None:
    """A change that edits upstream tests gives its test processes its mirror of TORCH_ROOT
    and names the edited files: a zygote of that change, keyed by the mirror (the base keeps
    its own). Another TORCH_ROOT that no change made stays cold, as another PYTHONPATH."""
    from suites.loader import EDITED_TESTS_VAR

    base = {**os.environ, "TORCH_ROOT": str(tmp_path / "pytorch")}
    mirror = tmp_path / "changes" / "c1" / "tree"
    changed = {
        **base,
        "TORCH_ROOT": str(mirror),
        EDITED_TESTS_VAR: str(mirror / "test" / "test_a.py"),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_ROOT", base["TORCH_ROOT"])
        plain = zygote.key_for(sys.executable, PLUGIN, (), base)
        key = zygote.key_for(sys.executable, PLUGIN, (), changed)
        assert plain is not None and key is not None and key != plain
        assert dict(key.env)["TORCH_ROOT"] == str(mirror)  # the zygote starts with the mirror
        other = {**base, "TORCH_ROOT": str(tmp_path / "elsewhere")}
        assert zygote.key_for(sys.executable, PLUGIN, (), other) is None
        # Another change's mirror: another zygote.
        second = {**changed, "TORCH_ROOT": str(mirror.parent.parent / "c2" / "tree")}
        assert zygote.key_for(sys.executable, PLUGIN, (), second) not in (None, key, plain)
    # After the run, the change's zygote stops with the others of its change.
    assert zygote.without_change(key.env) != key.env
    assert zygote.without_change(plain.env) == plain.env


def test_after_a_run_only_the_changes_zygotes_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stop_changed` (the embedded run's end) stops a change's zygote and keeps the
    installed torch's, which the next run of the process forks from."""
    from workflows.runner.change_overlay.prepare import CHANGE_VAR, SITE_DIR

    stopped: list[str] = []

    class Fake:
        def __init__(self, name: str) -> None:
            self.name = name

        def stop(self) -> None:
            stopped.append(self.name)

    plain_env = (("PATH", "/bin"),)
    changed_env = (("PATH", "/bin"), (CHANGE_VAR, "/tmp/c.json"), ("PYTHONPATH", str(SITE_DIR)))
    plain = zygote.ZygoteKey(sys.executable, PLUGIN, (), "i", "c", plain_env)
    changed = zygote.ZygoteKey(sys.executable, PLUGIN, (), "i", "c", changed_env)
    pool = zygote._Pool()
    pool._zygotes[plain] = Fake("plain")  # type: ignore[assignment]
    pool._zygotes[changed] = Fake("changed")  # type: ignore[assignment]
    monkeypatch.setattr(zygote, "_POOL", pool)
    zygote.stop_changed()
    assert stopped == ["changed"] and list(pool._zygotes) == [plain]
    zygote.stop_all()
    assert stopped == ["changed", "plain"] and not pool._zygotes


def test_every_variable_of_the_settings_is_run_time_to_the_zygote() -> None:
    """`Settings` variables are read by the tool, never by what a test process imports: a
    zygote's key ignores them (a run against a local GitHub, another builds folder)."""
    from tests.testing.paths import REPO_ROOT

    text = (REPO_ROOT / "workflows" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r'"(SPYRE_CI_[A-Z_]+)"', text))
    assert read and read <= set(zygote.RUNTIME_VARS), sorted(read - set(zygote.RUNTIME_VARS))


@pytest.mark.long
def test_the_zygote_is_rebuilt_when_the_specs_change(tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.read_text())
    ids = ["tiny::compare_cpu::softmax::float32"]
    first = run_shard("a", ids, tmp_path / "a", specs=[str(spec)], warm=True)
    assert first.warm_processes == 1 and first.outcomes[0].status is Status.PASSED
    before = zygote_pids()
    spec.write_text(re.sub(r"^ *- \{name: softmax\}\n", "", TINY.read_text(), flags=re.M))
    second = run_shard("b", ids, tmp_path / "b", specs=[str(spec)], warm=True)
    assert second.warm_processes == 1
    assert [o.status for o in second.outcomes] == [Status.REMOVED]  # the new specs' answer
    assert set(zygote_pids()) - set(before)  # a new zygote


@pytest.mark.long
def test_the_zygote_refuses_to_fork_with_a_thread_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "threaded_plugin.py").write_text(
        textwrap.dedent(
            """
            import threading, time

            from contract_plugin import *  # noqa: F403 - the runner's contract, as is

            # A plugin whose import starts a thread: the zygote loads it before any fork.
            threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
            """
        )
    )
    monkeypatch.setenv("PYTHONPATH", f"{site}:{CONTRACT_ENV['PYTHONPATH']}")
    work = tmp_path / "work"
    work.mkdir()
    (work / "test_crashy.py").write_text(CRASHY)
    with caplog.at_level(logging.WARNING, logger="workflows.runner.zygote"):
        result = run_shard(
            "t", IDS[:1], work, limits=Limits(memory_mb=None), plugin="threaded_plugin", warm=True
        )
    assert [o.status for o in result.outcomes] == [Status.PASSED]
    assert result.warm_processes == 0 and result.subprocesses == 1  # cold instead
    assert "refused to fork: 2 threads" in caplog.text


def test_spyre_ci_zygote_setting() -> None:
    assert Settings.from_env({}).zygote and Settings.from_env({"SPYRE_CI_ZYGOTE": "1"}).zygote
    assert not Settings.from_env({"SPYRE_CI_ZYGOTE": "0"}).zygote
    with pytest.raises(SettingsError, match="SPYRE_CI_ZYGOTE"):
        Settings.from_env({"SPYRE_CI_ZYGOTE": "maybe"})


def test_a_warm_child_shows_the_cold_command_line(tmp_path: Path, contract_path: None) -> None:
    # `ps` (and whoever looks for a shard's processes there) sees what a cold one shows.
    (tmp_path / "test_cmdline.py").write_text(
        textwrap.dedent(
            """
            def test_cmdline():
                args = open("/proc/self/cmdline", "rb").read().split(b"\\0")
                assert args[1:3] == [b"-m", b"pytest"] and b"--spyre-ids" in args, args[:6]
            """
        )
    )
    result = run_shard(
        "c", ["demo::t::cmdline::f32"], tmp_path, plugin="contract_plugin", warm=True
    )
    assert result.warm_processes == 1
    assert [o.status for o in result.outcomes] == [Status.PASSED], result.outcomes


def test_every_name_of_this_venv_s_interpreter_has_one_zygote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`spyre-ci` runs `bin/python3`, `python -m workflows` `bin/python`: one environment,
    one zygote (named by `bin/python`), whichever started the run."""
    folder = Path(sys.executable).parent
    names = [str(folder / n) for n in ("python", "python3") if (folder / n).exists()]
    assert len(names) == 2 and os.path.samefile(names[0], names[1])
    keys = set()
    for runner in names:  # the process asking is started as either
        monkeypatch.setattr(sys, "executable", runner)
        keys |= {zygote.key_for(name, PLUGIN, (), dict(os.environ)) for name in names}
    (key,) = keys
    assert key is not None and key.python == str(folder / "python")


def test_another_venv_of_the_same_interpreter_is_not_this_environment(tmp_path: Path) -> None:
    """An upgrade run's venv (or a build's) links the same python binary: forking its shards
    from this environment's zygote would run them on this environment's torch. It gets a
    zygote of its own, started by its interpreter; an interpreter outside any venv none."""
    import subprocess
    import sys

    from workflows.runner.zygote import key_for

    other = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    python = other / "bin" / "python"
    assert os.path.realpath(python) == os.path.realpath(sys.executable)  # the same binary
    theirs = key_for(str(python), "suites.pytest_plugin", [], dict(os.environ))
    ours = key_for(sys.executable, "suites.pytest_plugin", [], dict(os.environ))
    assert theirs is not None and ours is not None
    assert theirs.python == str(python) and ours.python == sys.executable
    assert theirs != ours
    outside = tmp_path / "bin" / "python"  # no pyvenv.cfg above it
    outside.parent.mkdir()
    outside.symlink_to(os.path.realpath(sys.executable))
    assert key_for(str(outside), "suites.pytest_plugin", [], dict(os.environ)) is None


@pytest.mark.long
def test_a_change_gets_a_zygote_of_its_own_that_imports_the_changed_torch(
    tmp_path: Path, contract_path: None
) -> None:
    from workflows.runner.change_overlay import prepare
    from workflows.stores.sources import installed_torch

    root = installed_torch()[0]
    assert root is not None
    patch = Path(__file__).resolve().parents[3] / "examples" / "changes" / "glu_batch_check.patch"
    change = prepare(patch.read_text(), root, cache_dir=tmp_path / "changes")
    other = prepare(
        patch.read_text().replace("(2-D or more)", "(2-D at least)"),
        root,
        cache_dir=tmp_path / "changes",
    )
    base = dict(os.environ)
    plain_key = zygote.key_for(sys.executable, PLUGIN, (), base)
    one = zygote.key_for(sys.executable, PLUGIN, (), {**base, **change.env()})
    two = zygote.key_for(sys.executable, PLUGIN, (), {**base, **other.env()})
    assert None not in (plain_key, one, two) and len({plain_key, one, two}) == 3

    for name, wanted in (("changed", True), ("plain", False)):
        (tmp_path / f"test_{name}.py").write_text(
            textwrap.dedent(
                f"""
                import inspect

                def test_{name}():
                    import torch.nn.functional as F
                    assert ("batch dimension" in inspect.getsource(F.glu)) is {wanted}
                """
            )
        )
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    changed = run_shard(
        "c",
        ["demo::t::changed::f32"],
        tmp_path,
        plugin="contract_plugin",
        env=change.env(),
        warm=True,
    )
    assert [o.status for o in changed.outcomes] == [Status.PASSED], changed.outcomes
    assert changed.warm_processes == 1  # forked from the change's own zygote
    plain = run_shard("p", ["demo::t::plain::f32"], tmp_path, plugin="contract_plugin", warm=True)
    assert [o.status for o in plain.outcomes] == [Status.PASSED], plain.outcomes
    assert plain.warm_processes == 1
    assert len(zygote_pids()) == 2  # never one zygote for two torches


def test_the_zygote_imports_what_a_cold_process_imports_not_the_runners_folder(
    tmp_path: Path, contract_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runner's folder holds a broken copy of the backend (another checkout, say).
    shadow = tmp_path / "checkout" / "backend_under_test"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('the shadow copy was imported')\n")
    monkeypatch.chdir(tmp_path / "checkout")
    work = tmp_path / "work"
    work.mkdir()
    (work / "test_first.py").write_text("def test_first():\n    assert True\n")
    (work / "test_crashy.py").write_text(CRASHY)
    warm = run_shard("w", ["demo::t::first::f32"], work, plugin="contract_plugin", warm=True)
    assert [o.status for o in warm.outcomes] == [Status.PASSED], warm.outcomes
    assert warm.warm_processes == 1  # the zygote started: it never saw the shadow copy


@pytest.mark.long
def test_a_zygote_whose_loaded_code_changed_on_disk_is_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = editable_contract_plugin(tmp_path, monkeypatch)
    (tmp_path / "test_first.py").write_text("def test_first():\n    assert True\n")
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    first = run_shard("a", ["demo::t::first::f32"], tmp_path, plugin="contract_plugin", warm=True)
    assert first.warm_processes == 1
    before = zygote_pids()
    again = run_shard("b", ["demo::t::first::f32"], tmp_path, plugin="contract_plugin", warm=True)
    assert again.warm_processes == 1 and zygote_pids() == before  # unchanged: reused
    copy.write_text(copy.read_text() + "\n# edited after the zygote loaded it\n")
    after = run_shard("c", ["demo::t::first::f32"], tmp_path, plugin="contract_plugin", warm=True)
    assert [o.status for o in after.outcomes] == [Status.PASSED]
    assert after.warm_processes == 1
    assert zygote_pids() != before  # a new zygote loaded the new code


@pytest.mark.long
def test_a_zygote_that_dies_costs_no_test_its_result(tmp_path: Path, contract_path: None) -> None:
    import signal
    import threading

    started = tmp_path / "slow.started"
    # The slow test: its three seconds are the window in which its zygote is killed.
    (tmp_path / "test_slow.py").write_text(
        "import pathlib, time\n\n"
        "def test_slow():\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(3)\n"
    )
    (tmp_path / "test_quick.py").write_text("def test_quick():\n    assert True\n")
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    warmup = run_shard("a", ["demo::t::quick::f32"], tmp_path, plugin="contract_plugin", warm=True)
    assert warmup.warm_processes == 1
    (victim,) = zygote_pids()

    def kill_the_zygote_mid_test() -> None:
        wait_for(started.exists, 60, "the slow test to start in a forked process", every=0.05)
        os.kill(victim, signal.SIGKILL)  # the OOM killer, an operator

    killer = threading.Thread(target=kill_the_zygote_mid_test)
    killer.start()
    result = run_shard("b", ["demo::t::slow::f32"], tmp_path, plugin="contract_plugin", warm=True)
    killer.join()
    # Recorded as run again (cold), never as crashed, hence never flaky.
    assert [o.status for o in result.outcomes] == [Status.PASSED], result.outcomes
    assert result.subprocesses == 2 and result.warm_processes == 1


@pytest.mark.long
def test_a_memory_limit_below_the_zygotes_size_starts_cold(
    tmp_path: Path, contract_path: None, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "test_quick.py").write_text("def test_quick():\n    assert True\n")
    (tmp_path / "test_crashy.py").write_text(CRASHY)
    ids = ["demo::t::quick::f32"]
    roomy = run_shard("a", ids, tmp_path, plugin="contract_plugin", warm=True)
    assert roomy.warm_processes == 1  # the default limit (8 GB) holds for a fork
    (pid,) = zygote_pids()
    mapped = zygote._mapped_mb(pid)
    assert mapped is not None and mapped > 300
    with caplog.at_level(logging.WARNING, logger="workflows.runner.zygote"):
        tight = run_shard(
            "b", ids, tmp_path, plugin="contract_plugin", warm=True, limits=Limits(memory_mb=300)
        )
    # A fork would start above the limit: the process starts cold, where the limit holds
    # from its first byte, and the runner says why.
    assert tight.warm_processes == 0
    assert "below what a warm test process starts with" in caplog.text


def test_staleness_is_keyed_by_content_not_by_size_and_mtime(tmp_path: Path) -> None:
    """An edit that keeps a loaded file's size, its mtime set back, is still an edit; a
    `touch` that keeps its content is not (a restart would cost a warm-up for nothing)."""
    from workflows.runner.zygote_process import file_digest, file_stamp

    module = tmp_path / "helper.py"
    module.write_text("VALUE = 1\n")
    loaded = zygote.Zygote.__new__(zygote.Zygote)  # its warm-up's record, no process
    loaded._files = [[str(module), file_stamp(str(module)), file_digest(str(module))]]
    assert loaded.stale() is None
    os.utime(module, ns=(1, 2))  # touched: the stamp moves, the content does not
    assert loaded.stale() is None
    before = module.stat()
    module.write_text("VALUE = 2\n")  # the same size
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))  # the old mtime back
    assert module.stat().st_size == before.st_size
    assert module.stat().st_mtime_ns == before.st_mtime_ns
    assert loaded.stale() == str(module)
    module.unlink()
    assert loaded.stale() == str(module)


def test_a_long_tmpdir_does_not_cost_the_zygote_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Unix socket's path holds 107 bytes: under a deep $TMPDIR (pytest's own, under
    xdist) the zygote could not bind it, and every test process started cold."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    key = zygote.ZygoteKey("/bin/true", PLUGIN, (), "i", "c", ())
    started = zygote.Zygote(key)
    try:
        assert len(str(started.socket_path)) <= 107
        assert started.folder.parent == Path("/tmp")
    finally:
        started.stop()
    assert not started.folder.exists()


PRELOAD = """
import json, os, sys
from workflows.runner import warm_imports

class Finder:  # what a run's change puts on sys.meta_path (change_overlay.finder)
    def __init__(self, modules):
        self._modules, self._deleted = dict.fromkeys(modules, {}), set()
    def find_spec(self, *args):
        return None

import torch
for changed in json.loads(sys.argv[1]):  # each case in a fork of its own: a fresh sys.modules
    sys.stdout.flush()
    child = os.fork()
    if child == 0:
        sys.meta_path.insert(0, Finder(changed))
        warm_imports.compile_stack()
        first = all(m in sys.modules for m in warm_imports.FIRST_COMPILE)
        print("torch._dynamo" in sys.modules, first)
        sys.stdout.flush()
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
"""

# (modules the change has, whether the stack is preloaded)
PRELOAD_CASES = [
    ((), True),  # no change, or one whose modules the warm-up imported: preloaded
    (("torch.nn.functional",), True),
    (("torch._dynamo.eval_frame",), False),  # its import stays in the compiling tests
]


def test_the_compile_stack_is_preloaded_only_when_the_change_has_no_module_left_to_import() -> None:
    import json
    import subprocess

    cases = json.dumps([list(changed) for changed, _ in PRELOAD_CASES])
    out = subprocess.run(
        [sys.executable, "-c", PRELOAD, cases], capture_output=True, text=True, check=True
    )
    # What a first compile imports beyond the stack comes with it, or not at all.
    expected = [f"{preloaded} {preloaded}" for _, preloaded in PRELOAD_CASES]
    assert out.stdout.splitlines() == expected, out.stderr[-2000:]


PLUGINS_PRELOAD = """
import importlib.metadata, os, sys
from _pytest.config import default_plugins
from workflows.runner import warm_imports

warm_imports.pytest_plugins(autoload=not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"))
installed = [ep.module for ep in importlib.metadata.entry_points(group="pytest11")]
print(all(f"_pytest.{name}" in sys.modules for name in default_plugins))
print(bool(installed) and all(name in sys.modules for name in installed))
print("torch" in sys.modules)
"""


@pytest.mark.parametrize(("autoload_off", "installed_loaded"), [(False, "True"), (True, "False")])
def test_the_pytest_plugins_a_child_configures_with_are_imported_once_in_the_zygote(
    autoload_off: bool, installed_loaded: str
) -> None:
    # pytest's own plugins always; the installed ones (xdist here) only when a child's
    # pytest would load them itself; never torch.
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    if autoload_off:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", PLUGINS_PRELOAD], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", installed_loaded, "False"], out.stderr[-2000:]


def test_a_memory_limit_with_no_room_for_a_warm_process_starts_no_zygote(tmp_path: Path) -> None:
    """Below MEMORY_HEADROOM_MB no fork can fit whatever its zygote maps: neither the warm-up
    ahead of a run nor a shard's fork starts one (seconds of CPU for nothing); the shard's
    processes start cold, as with a zygote that maps too much."""
    limit = zygote.MEMORY_HEADROOM_MB
    zygote.prestart(PLUGIN, [str(TINY)], memory_mb=limit)
    key = zygote.key_for(sys.executable, PLUGIN, [str(TINY)], dict(os.environ))
    assert key is not None
    with pytest.raises(zygote.ZygoteUnavailable, match=f"memory limit \\({limit} MB\\)"):
        zygote.fork(
            key, ["-q"], cwd=tmp_path, env={}, stdout=tmp_path / "o", stderr=tmp_path / "e",
            memory_mb=limit,
        )  # fmt: skip
    assert zygote_pids() == []
    assert zygote.fits_warm(None) and zygote.fits_warm(limit + 1)
