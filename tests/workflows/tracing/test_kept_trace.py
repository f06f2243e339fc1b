"""The shipped trace is kept pickled in the cache folder (`workflows.stores.kept`): a
later process loads the same map from there, a damaged or foreign file there is read from
the JSON again, and a cache that cannot be written is said once and changes nothing else."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

import selector
from selector import definitions
from workflows.stores import kept
from workflows.tracing import traces

TRACE = {
    "format": 1,
    "torch_version": "2.13.0",
    "variants": {
        "ops::compare_cpu::add::float32": {
            "functions": ["torch/_tensor.py:__add__", "torch/functional.py:broadcast_tensors"],
            "aten_ops": ["aten::add.Tensor"],
            "fingerprint": "f1",
        },
        "ops::compare_cpu::mul::float32": {
            "functions": ["torch/_tensor.py:__mul__"],
            "aten_ops": ["aten::mul.Tensor", "aten::add.Tensor"],
            "fingerprint": "f2",
        },
    },
    "session_functions": ["torch/__init__.py:<module>"],
    "session_ops": [],
}


@pytest.fixture()
def trace_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(kept, "_FOLDER", [])
    monkeypatch.setattr(kept, "_STORES", {})
    monkeypatch.setattr(definitions, "_STORE", [])  # keep_in gives it a store too
    kept.keep_in(tmp_path / "cache")  # as `spyre-ci` does with Settings.cache_dir
    path = tmp_path / "trace-2.13.0.json.gz"
    traces.write_trace(path, TRACE)
    traces._shipped.cache_clear()
    yield path
    traces._shipped.cache_clear()


def _load(path: Path) -> selector.ImpactMap:
    traces._shipped.cache_clear()  # as a new process: nothing read yet
    return traces._shipped(str(path), path.stat().st_mtime_ns)


def _same(a: selector.ImpactMap, b: selector.ImpactMap) -> None:
    assert a.to_json() == b.to_json()
    assert a.executing("torch/_tensor.py:__add__") == {"ops::compare_cpu::add::float32"}
    assert b.executing("torch/_tensor.py:__add__") == {"ops::compare_cpu::add::float32"}


def test_a_later_process_loads_the_kept_trace_and_gets_the_same_map(trace_file: Path) -> None:
    first = _load(trace_file)
    (kept,) = (trace_file.parent / "cache" / "traces").glob("shipped-*.pickle")
    _same(first, traces.read_trace(trace_file))

    kept_bytes = kept.read_bytes()
    trace_file.write_bytes(b"\x1f\x8b not gzip")  # only the kept form can answer now
    with pytest.raises(traces.TraceError):
        traces.read_trace(trace_file)
    traces.write_trace(trace_file, TRACE)  # the same trace: the same bytes, the same key
    again = _load(trace_file)
    _same(again, first)
    assert kept.read_bytes() == kept_bytes


def test_another_trace_is_kept_under_another_name(trace_file: Path) -> None:
    _load(trace_file)
    other = {**TRACE, "variants": {k: v for k, v in TRACE["variants"].items() if "mul" in k}}
    traces.write_trace(trace_file, other)
    second = _load(trace_file)
    assert set(second.functions) == {"ops::compare_cpu::mul::float32"}
    assert len(list((trace_file.parent / "cache" / "traces").glob("shipped-*.pickle"))) == 2


@pytest.mark.parametrize(
    "damage",
    [b"", b"not a pickle", pickle.dumps({"functions": {}}), pickle.dumps(None)],
    ids=["empty", "garbage", "another-object", "none"],
)
def test_a_damaged_kept_file_is_read_again_from_the_json_and_replaced(
    trace_file: Path, damage: bytes
) -> None:
    _load(trace_file)
    (kept,) = (trace_file.parent / "cache" / "traces").glob("shipped-*.pickle")
    good = kept.read_bytes()
    kept.write_bytes(damage)
    _same(_load(trace_file), traces.read_trace(trace_file))
    assert kept.read_bytes() == good


def test_a_cache_that_cannot_be_written_is_said_once_and_the_trace_still_reads(
    trace_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = trace_file.parent / "not-a-folder"
    blocker.write_text("a file where the cache folder would be\n")
    kept.keep_in(blocker)
    _same(_load(trace_file), traces.read_trace(trace_file))
    _same(_load(trace_file), traces.read_trace(trace_file))
    err = capsys.readouterr().err
    assert err.count("cannot keep the shipped trace") == 1
    assert str(blocker) in err and "SPYRE_CI_CACHE_DIR" in err


def test_a_process_told_no_cache_folder_reads_the_json_and_keeps_nothing(
    trace_file: Path,
) -> None:
    kept.keep_in(None)
    _same(_load(trace_file), traces.read_trace(trace_file))
    assert not (trace_file.parent / "cache").exists()


def test_spyre_ci_keeps_it_where_its_settings_say(tmp_path: Path) -> None:
    from workflows.settings import Settings

    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert Settings.from_env(xdg).cache_dir == tmp_path / "xdg" / "spyre-ci"
    assert Settings.from_env({**xdg, "SPYRE_CI_CACHE_DIR": "/c"}).cache_dir == Path("/c")
