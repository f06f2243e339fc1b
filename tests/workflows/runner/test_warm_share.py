"""The shared warm runner on real processes: a zygote outlives the process that started it,
and the next process of the same state directory forks from it (`workflows.runner.warm_share`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testing.waiting import wait_for
from tests.workflows.runner.test_shard_runner import CONTRACT_ENV, editable_contract_plugin
from workflows.runner import warm_share
from workflows.settings import Settings, SettingsError

# A shard in a process of its own, as a `spyre-ci` run or a worker runs it: it prints what
# the shard reported.
SHARD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from workflows.runner import zygote
    from workflows.runner.shard_runner import run_shard
    from workflows.settings import Settings

    zygote.share(Settings.from_env())  # as the entry points (`spyre-ci`, a worker) do

    result = run_shard(
        sys.argv[1], sys.argv[2:], Path.cwd(), plugin="contract_plugin", warm=True
    )
    print(json.dumps({
        "warm": result.warm_processes,
        "statuses": [o.status.value for o in result.outcomes],
    }))
    """
)
# The test records its grandparent: the process it was forked from (its parent is a keeper).
TESTS = textwrap.dedent(
    """
    import os, time
    from pathlib import Path

    def _record(name):
        keeper = os.getppid()
        stat = Path(f"/proc/{keeper}/stat").read_text().rsplit(")", 1)[1].split()
        Path(name).write_text(f"{os.getpid()} {stat[1]}")

    def test_quick():
        _record("quick.pids")

    def test_long():
        _record("long.pids")
        time.sleep(120)  # a test still running when its zygote's owner dies: the case itself
    """
)


@pytest.fixture()
def work(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of contract tests, and a place of shared zygotes of this test's own: a short
    folder in /tmp, as a zygote's socket path must fit 100 bytes and pytest's own folders
    under xdist pass that once its run counter has three digits."""
    folder = Path(tempfile.mkdtemp(prefix="warm-share-", dir="/tmp"))
    (folder / "test_pids.py").write_text(TESTS)
    monkeypatch.setenv("SPYRE_CI_WARM_DIR", str(folder / "warm"))
    monkeypatch.setenv("PYTHONPATH", CONTRACT_ENV["PYTHONPATH"])
    yield folder
    warm_share.stop_every(folder / "warm")
    shutil.rmtree(folder, ignore_errors=True)


def shard(work: Path, *ids: str, name: str = "s") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SHARD, name, *ids],
        cwd=work,
        stdout=subprocess.PIPE,
        text=True,
    )


def finished(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def zygotes(work: Path) -> dict[str, int]:
    """Each shared zygote's folder name -> its pid, as its `ready.json` says."""
    found: dict[str, int] = {}
    if not (work / "warm").is_dir():  # no zygote started yet
        return found
    for folder in (work / "warm").iterdir():
        ready = warm_share.ready(folder) if folder.is_dir() else None
        if ready is not None:
            found[folder.name] = int(ready["pid"])
    return found


def forked_from(work: Path, name: str) -> int:
    return int((work / name).read_text().split()[1])


# A process that warms a shared zygote and never forks from it, nor reads what it says (a
# worker's plan task warms the zygotes its shard tasks, in other processes, fork from).
WARMER = textwrap.dedent(
    """
    import time
    from workflows.runner import zygote
    from workflows.settings import Settings

    zygote.share(Settings.from_env())
    zygote.prestart("contract_plugin", [])
    time.sleep(600)
    """
)


def test_a_zygote_warmed_by_a_process_that_never_forks_serves_another_at_once(
    work: Path,
) -> None:
    """Its starter never reads its ready line: the zygote must not wait for that (its
    loaded files once filled the pipe and it answered nobody: 30 s, then cold)."""
    warmer = subprocess.Popen([sys.executable, "-c", WARMER], cwd=work)
    try:
        wait_for(lambda: zygotes(work), timeout=300, what="the warmed zygote's ready.json")
        (only,) = zygotes(work).values()
        assert finished(shard(work, "demo::t::quick::f32")) == {
            "warm": 1,
            "statuses": ["passed"],
        }
        assert forked_from(work, "quick.pids") == only  # not cold after a 30 s wait
    finally:
        warmer.kill()
        warmer.wait()


# In the default run: another process forking from a zygote it did not start is
# `test_a_zygote_warmed_by_a_process_that_never_forks_serves_another_at_once`.
@pytest.mark.long
def test_a_second_process_forks_from_the_zygote_the_first_left(work: Path) -> None:
    first = finished(shard(work, "demo::t::quick::f32"))
    assert first == {"warm": 1, "statuses": ["passed"]}
    (only,) = zygotes(work).values()  # it outlived the process that started it
    assert forked_from(work, "quick.pids") == only
    second = finished(shard(work, "demo::t::quick::f32"))
    assert second == {"warm": 1, "statuses": ["passed"]}
    assert list(zygotes(work).values()) == [only]  # none started again
    assert forked_from(work, "quick.pids") == only


@pytest.mark.long
def test_two_processes_at_once_start_one_zygote(work: Path) -> None:
    both = [shard(work, "demo::t::quick::f32", name=f"s{i}") for i in range(2)]
    assert [finished(p) for p in both] == [{"warm": 1, "statuses": ["passed"]}] * 2
    assert len(zygotes(work)) == 1


@pytest.mark.long
def test_a_process_killed_mid_test_takes_its_test_along_and_leaves_the_zygote(
    work: Path,
) -> None:
    proc = shard(work, "demo::t::long::f32")
    wait_for(lambda: (work / "long.pids").exists(), 60, "the long test started", every=0.1)
    test_pid = int((work / "long.pids").read_text().split()[0])
    (zygote_pid,) = zygotes(work).values()
    proc.kill()  # an OOM kill, a `kill -9` of `spyre-ci run`
    proc.wait()
    wait_for(
        lambda: not warm_share.alive(test_pid) and not _running(test_pid),
        60,
        "the test died",
        every=0.1,
    )
    assert list(zygotes(work).values()) == [zygote_pid]  # still there, still serving
    assert finished(shard(work, "demo::t::quick::f32"))["statuses"] == ["passed"]
    assert forked_from(work, "quick.pids") == zygote_pid


@pytest.mark.long
def test_a_shared_zygote_ends_when_idle_and_leaves_nothing(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPYRE_CI_WARM_IDLE_S", "1")
    assert finished(shard(work, "demo::t::quick::f32"))["warm"] == 1
    pid = forked_from(work, "quick.pids")
    wait_for(lambda: not _running(pid), 60, "the idle zygote ended", every=0.1)
    wait_for(
        lambda: not [p for p in (work / "warm").iterdir() if p.is_dir()],
        60,
        "its folder went",
        every=0.1,
    )


@pytest.mark.long
def test_a_shared_zygote_whose_loaded_code_changed_is_replaced_by_the_next_process(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = editable_contract_plugin(work, monkeypatch)
    finished(shard(work, "demo::t::quick::f32"))
    old = forked_from(work, "quick.pids")
    plugin.write_text(plugin.read_text() + "\n# edited while the zygote is kept\n")
    assert finished(shard(work, "demo::t::quick::f32"))["statuses"] == ["passed"]
    new = forked_from(work, "quick.pids")
    assert new != old
    wait_for(lambda: not _running(old), 10, "the stale zygote ended", every=0.1)
    assert list(zygotes(work).values()) == [new]


@pytest.mark.long
def test_sharing_is_off_with_no_idle_time_and_each_process_ends_its_own(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPYRE_CI_WARM_IDLE_S", "0")
    assert warm_share.place(Settings.from_env()) is None
    assert finished(shard(work, "demo::t::quick::f32"))["warm"] == 1
    assert not _running(forked_from(work, "quick.pids"))  # it ended with its process
    assert not (work / "warm").exists()


def test_the_place_is_this_user_s_alone_and_short_enough(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(warm_share.NotShared, match="read or written by others"):
        warm_share.place(Settings.from_env({"SPYRE_CI_WARM_DIR": str(shared)}))
    (tmp_path / "target").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(warm_share.NotShared, match="not a folder of this user"):
        warm_share.place(Settings.from_env({"SPYRE_CI_WARM_DIR": str(tmp_path / "link")}))
    with pytest.raises(warm_share.NotShared, match="too long"):
        warm_share.place(Settings.from_env({"SPYRE_CI_WARM_DIR": str(tmp_path / ("x" * 90))}))
    runtime = Path(tempfile.mkdtemp(dir="/tmp"))  # short: a socket's path is
    try:
        state = {"SPYRE_CI_STATE_DIR": str(tmp_path / "a"), "XDG_RUNTIME_DIR": str(runtime)}
        one = warm_share.place(Settings.from_env(state))
        other = warm_share.place(
            Settings.from_env({**state, "SPYRE_CI_STATE_DIR": str(tmp_path / "b")})
        )
        assert one is not None and other is not None and one.root != other.root  # per state
        assert one.root.parent == runtime / f"spyre-ci-{os.getuid()}" and one.idle_s == 600.0
        assert (one.root.parent.stat().st_mode & 0o777) == 0o700
    finally:
        shutil.rmtree(runtime)


def test_the_idle_time_setting() -> None:
    assert Settings.from_env({}).warm_idle_s == 600.0
    assert Settings.from_env({"SPYRE_CI_WARM_IDLE_S": "30"}).warm_idle_s == 30.0
    assert Settings.from_env({}).warm_max == 4 == warm_share.MAX_SHARED
    assert Settings.from_env({"SPYRE_CI_WARM_MAX": "8"}).warm_max == 8
    for wrong_max in ("0", "2.5", "many", "65"):
        with pytest.raises(SettingsError, match=r"SPYRE_CI_WARM_MAX.*whole number"):
            Settings.from_env({"SPYRE_CI_WARM_MAX": wrong_max})
    for wrong in ("-1", "soon", "1e9"):
        with pytest.raises(SettingsError, match=r"SPYRE_CI_WARM_IDLE_S.*seconds"):
            Settings.from_env({"SPYRE_CI_WARM_IDLE_S": wrong})


def test_room_is_made_by_stopping_the_least_recently_used_never_one_in_use(
    tmp_path: Path,
) -> None:
    root = tmp_path / "warm"
    root.mkdir()

    def used(name: str, seconds_ago: float) -> None:
        (root / name).mkdir(exist_ok=True)
        (root / name / warm_share.USED).touch()
        stamp = time.time() - seconds_ago
        os.utime(root / name / warm_share.USED, (stamp, stamp))

    for name, age in (("a", 1), ("b", 500), ("c", 400), ("d", 300), ("e", 200)):
        used(name, age)  # a: in use now, b: the least recently used
    assert warm_share.MAX_SHARED == 4
    warm_share.make_room(root)  # room for one more: MAX_SHARED - 1 stay
    assert sorted(p.name for p in root.iterdir()) == ["a", "d", "e"]
    for name in "bcdef":
        used(name, 2)  # all in use: none is stopped, more stay alive for a while
    warm_share.make_room(root)
    assert sorted(p.name for p in root.iterdir()) == list("abcdef")

    # A warm `spyre-ci` process, the least recently used of all: neither counted nor stopped.
    for age, name in enumerate("fedcb"):
        used(name, 100 + age)
    used("cli", 900)
    warm_share.describe(root / "cli", {"kind": "cli"})
    warm_share.make_room(root)  # a, and the two most recent zygotes of the others
    assert sorted(p.name for p in root.iterdir()) == ["a", "cli", "e", "f"]
    used("g", 50)
    warm_share.make_room(root, max_shared=5)  # $SPYRE_CI_WARM_MAX=5: room for one more
    assert sorted(p.name for p in root.iterdir()) == ["a", "cli", "e", "f", "g"]
    warm_share.make_room(root, max_shared=3)
    assert sorted(p.name for p in root.iterdir()) == ["a", "cli", "g"]

    # Warm `spyre-ci` processes have a bound of their own (`python -m` from many folders).
    for age, name in ((400, "cli2"), (20, "cli3")):
        used(name, age)
        warm_share.describe(root / name, {"kind": "cli"})
    assert warm_share.MAX_CLI == 2
    warm_share.make_room_for_cli(root)  # room for one more: the least recently used goes
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("cli")) == ["cli3"]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.long
def test_warm_list_shows_the_zygotes_and_warm_stop_ends_them(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workflows.cli.main import main

    assert main(["warm", "list"]) == 0
    assert "no warm process alive" in capsys.readouterr().out
    finished(shard(work, "demo::t::quick::f32"))
    (pid,) = zygotes(work).values()
    assert main(["warm", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"pid {pid}, " in listed and " MB, idle " in listed and "no change" in listed
    assert main(["warm", "stop"]) == 0
    assert "stopped 1 warm process(es)" in capsys.readouterr().out
    wait_for(lambda: not _running(pid), 10, "the stopped zygote ended", every=0.1)
    assert main(["warm", "list"]) == 0 and "no warm process alive" in capsys.readouterr().out
    monkeypatch.setenv("SPYRE_CI_WARM_IDLE_S", "0")
    assert main(["warm", "list"]) == 0
    assert "SPYRE_CI_WARM_IDLE_S=0" in capsys.readouterr().out
