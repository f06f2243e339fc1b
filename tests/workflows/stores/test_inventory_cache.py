"""The Inventory cache: one key over everything that can change an Inventory, and a cached
Inventory that cannot be read is rebuilt, not a failure of every run."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from suites.model import Expectation, Inventory, Variant
from workflows.drivers import upgrade
from workflows.stores.inventory_cache import cache_key, default_inventory, read_cached

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny.yaml"
ADD = "tiny::compare_cpu::add::float32"


def _specs(folder: Path, expectations: str = "version: 1\nexpectations: []\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = TINY.read_text(encoding="utf-8").replace(
        "      unlisted_test_mode: mandatory_success\n",
        "      unlisted_test_mode: mandatory_success\n"
        "      expectations_file: exp/tiny.expectations.yaml\n",
    )
    (folder / "tiny.yaml").write_text(text, encoding="utf-8")
    (folder / "exp").mkdir(exist_ok=True)
    (folder / "exp" / "tiny.expectations.yaml").write_text(expectations, encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    "edit", ["referenced expectations", "expectations beside", "spec", "torch version"]
)
def test_key_changes_with_what_changes_an_inventory(edit: str, tmp_path: Path):
    folder = _specs(tmp_path / "specs")
    (folder / "other.expectations.yaml").write_text(
        "version: 1\nexpectations: []\n", encoding="utf-8"
    )
    key = cache_key([str(folder)], torch_version="2.13.0")
    assert key == cache_key([str(folder)], torch_version="2.13.0")
    if edit == "referenced expectations":
        (folder / "exp" / "tiny.expectations.yaml").write_text("version: 1\n", encoding="utf-8")
    elif edit == "expectations beside":
        (folder / "other.expectations.yaml").write_text("version: 1\n", encoding="utf-8")
    elif edit == "spec":
        (folder / "tiny.yaml").write_text("# edited\n" + (folder / "tiny.yaml").read_text())
    assert key != cache_key(
        [str(folder)], torch_version=("2.14.1" if edit == "torch version" else "2.13.0")
    )


def test_key_is_the_same_for_a_copy_and_for_upgrade(tmp_path: Path):
    folder = _specs(tmp_path / "a")
    copy = tmp_path / "b"
    shutil.copytree(folder, copy)
    assert cache_key([str(folder)]) == cache_key([str(copy)])
    assert upgrade.specs_key([str(folder)], "2.13.0") == cache_key(
        [str(folder)], torch_version="2.13.0"
    )
    assert cache_key() != cache_key([str(folder)])  # the bundled specs


@pytest.mark.parametrize("make", ["folder", "missing", "binary"])
def test_key_of_odd_spec_paths_does_not_raise(make: str, tmp_path: Path):
    path = tmp_path / "odd.yaml"
    if make == "folder":
        (path / "x.yaml").mkdir(parents=True)
    elif make == "binary":
        path.write_bytes(b"\xff\xfe\x00 path: \xff\n")
    assert len(cache_key([str(path)])) == 16


@pytest.mark.parametrize("damage", ["truncated", "not gzip", "not json", "empty"])
def test_unreadable_cached_inventory_is_said_and_dropped(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "inventory-x.json.gz"
    Inventory(torch_version="2.13.0", torch_git_version="g", variants=()).save(path)
    raw = path.read_bytes()
    path.write_bytes(
        {
            "truncated": raw[: len(raw) // 2],
            "not gzip": b"plain",
            "not json": gzip.compress(b"{nope"),
            "empty": b"",
        }[damage]
    )
    assert read_cached(path) is None
    assert f"the cached Inventory {path} is unreadable" in capsys.readouterr().err
    assert not path.exists()


def test_edited_expectations_reach_the_next_inventory_and_a_truncated_cache_is_rebuilt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    folder = _specs(tmp_path / "specs")
    state = tmp_path / "state"
    first = default_inventory(state, [str(folder)])
    assert Inventory.load(first).by_id()[ADD].expectation is Expectation.PASS
    (folder / "exp" / "tiny.expectations.yaml").write_text(
        f"version: 1\nexpectations:\n- id: {ADD}\n  mode: xfail\n  reason: edited\n",
        encoding="utf-8",
    )
    second = default_inventory(state, [str(folder)])
    assert second != first
    variant = Inventory.load(second).by_id()[ADD]
    assert (variant.expectation, variant.reason) == (Expectation.XFAIL, "edited")
    # A cached Inventory cut short (a full disk, a killed copy) is rebuilt, said on stderr.
    raw = second.read_bytes()
    second.write_bytes(raw[: len(raw) // 3])
    capsys.readouterr()
    again = default_inventory(state, [str(folder)])
    assert again == second
    assert "is unreadable (EOFError" in capsys.readouterr().err
    assert Inventory.load(again).by_id()[ADD].expectation is Expectation.XFAIL


def test_refused_spec_is_recorded_and_said_again_from_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    folder = _specs(tmp_path / "specs")
    (folder / "broken.yaml").write_text("test_suite_config: [\n", encoding="utf-8")
    state = tmp_path / "state"
    path = default_inventory(state, [str(folder)])
    err = capsys.readouterr().err
    assert f"{folder / 'broken.yaml'}: refused" in err
    assert f"{folder / 'broken.yaml'}:2:1: invalid YAML" in err
    inventory = Inventory.load(path)
    assert {v.suite for v in inventory} == {"tiny"}
    assert list(inventory.refused_specs) == [str(folder / "broken.yaml")]
    assert default_inventory(state, [str(folder)]) == path  # cached: said again
    assert f"{folder / 'broken.yaml'}: refused" in capsys.readouterr().err


@pytest.fixture()
def keeping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A process that keeps loaded forms in a cache folder of its own (as `spyre-ci`)."""
    from selector import definitions
    from workflows.stores import inventory_cache, kept

    monkeypatch.setattr(kept, "_FOLDER", [])
    monkeypatch.setattr(kept, "_STORES", {})
    monkeypatch.setattr(definitions, "_STORE", [])
    monkeypatch.setattr(inventory_cache, "_read", {})  # nothing read yet in this process
    kept.keep_in(tmp_path / "cache")
    return tmp_path / "cache" / "inventories"


def _saved(path: Path, *ids: str) -> Inventory:
    """An Inventory of these variants saved at `path`, read once (which keeps it)."""
    variants = []
    for vid in ids:
        suite, template, subject, dtype = vid.split("::")
        variants.append(Variant(vid, suite, template, subject, dtype))
    inventory = Inventory(torch_version="2.13.0", torch_git_version="g", variants=tuple(variants))
    inventory.save(path)
    assert read_cached(path) == inventory
    return inventory


@pytest.fixture()
def kept_once(keeping: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cached Inventory read once (so kept), then a new process: nothing read yet."""
    from workflows.stores import inventory_cache

    path = tmp_path / "inventory-x.json.gz"
    _saved(path, ADD)
    monkeypatch.setattr(inventory_cache, "_read", {})
    return path


def test_the_kept_inventory_is_the_one_in_the_file_and_a_rebuilt_file_is_read_anew(
    kept_once: Path, keeping: Path
) -> None:
    (kept_file,) = keeping.glob("*.pickle")
    with pytest.MonkeyPatch.context() as patch:  # the kept form answers: no JSON parsed
        patch.setattr(Inventory, "load", classmethod(lambda cls, p: pytest.fail("parsed")))
        patch.setattr(
            Inventory, "from_bytes", classmethod(lambda cls, r, **k: pytest.fail("parsed"))
        )
        assert [v.id for v in read_cached(kept_once).variants] == [ADD]
    # Rebuilt with another variant: other bytes, read from the file, kept beside the first.
    _saved(kept_once, ADD, "tiny::compare_cpu::mul::float32")
    assert len(list(keeping.glob("*.pickle"))) == 2 and kept_file.exists()


def test_a_damaged_kept_inventory_is_read_from_its_file_again(
    kept_once: Path, keeping: Path
) -> None:
    (kept_file,) = keeping.glob("*.pickle")
    kept_file.write_bytes(b"not a pickle")
    assert [v.id for v in read_cached(kept_once).variants] == [ADD]
    assert kept_file.read_bytes() != b"not a pickle"  # made again from the file


def test_a_missed_inventory_is_parsed_from_the_bytes_its_kept_name_digests(
    keeping: Path, tmp_path: Path
) -> None:
    # Read once: the file is never opened a second time, so a file replaced between the
    # digest and the parse cannot be kept under the digest of the one before.
    path = tmp_path / "inventory-y.json.gz"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Inventory, "load", classmethod(lambda cls, p: pytest.fail("read twice")))
        _saved(path, ADD)
    (kept_file,) = keeping.glob("*.pickle")
    assert kept_file.stat().st_size > 0


def test_an_inventory_reads_the_same_from_its_bytes_as_from_its_file(tmp_path: Path) -> None:
    for name in ("plain.json", "packed.json.gz"):
        path = tmp_path / name
        inventory = _saved(path, ADD, "tiny::compare_cpu::mul::float32")
        raw = path.read_bytes()
        assert Inventory.from_bytes(raw, compressed=name.endswith(".gz")) == inventory
        assert Inventory.load(path) == inventory
