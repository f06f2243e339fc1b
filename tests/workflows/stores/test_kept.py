"""Loaded forms kept in the cache folder (`workflows.stores.kept.Kept`): what is saved loads
back equal, under a name that changes with the code that made it; the folder keeps at most
its limit (the least recently used go) and no partial file of a dead writer; a damaged file
is removed; a folder that cannot be written is said once."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from workflows.stores.kept import Kept


def _kept(folder: Path, code: Path, limit: int = 3) -> Kept:
    return Kept(folder, [code], "the test values", limit, lambda v: isinstance(v, dict))


@pytest.fixture()
def code(tmp_path: Path) -> Path:
    path = tmp_path / "maker.py"
    path.write_text("VERSION = 1\n")
    return path


def test_a_saved_value_loads_back_equal_in_another_instance(tmp_path: Path, code: Path) -> None:
    _kept(tmp_path / "c", code).save(b"key", {"a": [1, 2]})
    assert _kept(tmp_path / "c", code).load(b"key") == {"a": [1, 2]}
    assert _kept(tmp_path / "c", code).load(b"other") is None


def test_other_code_makes_other_names(tmp_path: Path, code: Path) -> None:
    before = _kept(tmp_path / "c", code)
    before.save(b"key", {"a": 1})
    code.write_text("VERSION = 2\n")
    after = _kept(tmp_path / "c", code)
    assert after.path(b"key") != before.path(b"key")
    assert after.load(b"key") is None


def test_the_folder_keeps_its_limit_the_least_recently_used_going_first(
    tmp_path: Path, code: Path
) -> None:
    kept = _kept(tmp_path / "c", code, limit=3)
    for i, key in enumerate((b"a", b"b", b"c")):
        kept.save(key, {"i": i})
        os.utime(kept.path(key), (1000 + i, 1000 + i))  # saved in this order, long ago
    assert kept.load(b"a") == {"i": 0}  # used now: the newest
    kept.save(b"d", {"i": 3})
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(
        kept.path(k).name for k in (b"a", b"c", b"d")
    )


def test_a_dead_writer_s_partial_file_goes_when_an_hour_old(tmp_path: Path, code: Path) -> None:
    kept = _kept(tmp_path / "c", code)
    kept.save(b"a", {"i": 0})
    old = tmp_path / "c" / f"{kept.path(b'x').name}.4242.tmp"
    new = tmp_path / "c" / f"{kept.path(b'y').name}.4343.tmp"
    for path in (old, new):
        path.write_bytes(b"half a pickle")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    kept.save(b"b", {"i": 1})
    assert not old.exists()
    assert new.exists()  # it may be a writer still at work


@pytest.mark.parametrize(
    "damage", [b"", b"garbage", b"\x80\x05K\x01."], ids=["empty", "text", "int"]
)
def test_a_damaged_file_is_removed_and_loads_as_nothing(
    tmp_path: Path, code: Path, damage: bytes
) -> None:
    kept = _kept(tmp_path / "c", code)
    kept.save(b"key", {"a": 1})
    kept.path(b"key").write_bytes(damage)
    assert kept.load(b"key") is None
    assert not kept.path(b"key").exists()


def test_a_folder_that_cannot_be_written_is_said_once(
    tmp_path: Path, code: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the folder would be\n")
    kept = _kept(blocker / "c", code)
    kept.save(b"a", {"a": 1})
    kept.save(b"b", {"b": 1})
    assert kept.load(b"a") is None
    err = capsys.readouterr().err
    assert err.count("cannot keep the test values") == 1
    assert str(blocker) in err and "SPYRE_CI_CACHE_DIR" in err
