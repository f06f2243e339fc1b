"""The one record codec: round trips, the leniency policy, wire hooks, errors with paths."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, ClassVar

import pytest

from contracts.codec import (
    ALWAYS,
    EMPTY,
    NONE,
    CodecError,
    Record,
    decode,
    from_json,
    sorted_keys,
    to_json,
    wire,
)
from contracts.errors import BadInput


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


class Size(Enum):
    SMALL = 1
    LARGE = 2


@dataclass(frozen=True)
class Leaf(Record):
    name: str
    weight: float = 0.0


@dataclass(frozen=True)
class Tree(Record):
    id: str
    color: Color = Color.RED
    size: Size = Size.SMALL
    leaves: tuple[Leaf, ...] = ()
    tags: frozenset[str] = frozenset()
    counts: Mapping[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    parent: Leaf | None = None
    age: int | None = None
    alive: bool = True
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)


TREE = Tree(
    "t",
    Color.BLUE,
    Size.LARGE,
    (Leaf("a", 1.5), Leaf("b")),
    frozenset({"z", "y"}),
    {"passed": 3},
    ["n"],
    Leaf("p"),
    7,
    False,
)
WRITTEN = {
    "id": "t",
    "color": "blue",
    "size": 2,
    "leaves": [{"name": "a", "weight": 1.5}, {"name": "b", "weight": 0.0}],
    "tags": ["y", "z"],
    "counts": {"passed": 3},
    "notes": ["n"],
    "parent": {"name": "p", "weight": 0.0},
    "age": 7,
    "alive": False,
}


def test_a_record_writes_every_field_in_order_by_its_type_and_reads_back_equal() -> None:
    assert json.dumps(TREE.to_json()) == json.dumps(WRITTEN)
    read = Tree.from_json(json.loads(json.dumps(WRITTEN)))
    assert read == TREE
    assert isinstance(read.leaves, tuple) and isinstance(read.notes, list)
    assert read.color is Color.BLUE and read.size is Size.LARGE


def test_keys_an_older_record_lacks_read_as_defaults_and_are_not_written_back() -> None:
    older = {"id": "t", "leaves": [{"name": "a"}], "age": None}
    read = Tree.from_json(older)
    assert (read.color, read.counts, read.age, read.alive) == (Color.RED, {}, None, True)
    assert read.leaves == (Leaf("a", 0.0),)
    assert "color" in read.missing and "age" not in read.missing
    assert json.dumps(read.to_json()) == json.dumps(
        {"id": "t", "leaves": [{"name": "a", "weight": 0.0}], "age": None}
    )


def test_a_null_for_a_field_that_is_not_optional_reads_as_its_default() -> None:
    assert Tree.from_json({"id": "t", "color": None, "leaves": None}).leaves == ()


def test_keys_this_version_does_not_know_are_kept_and_written_back_last() -> None:
    newer = {**WRITTEN, "grown_by": {"who": "x"}, "rings": [1, 2]}
    read = Tree.from_json(newer)
    assert read.extra == {"grown_by": {"who": "x"}, "rings": [1, 2]}
    assert json.dumps(read.to_json()) == json.dumps(newer)


def test_a_record_without_missing_or_extra_drops_unknown_keys_and_writes_defaults() -> None:
    assert Leaf.from_json({"name": "a", "colour": "red"}).to_json() == {"name": "a", "weight": 0.0}


def test_a_whole_number_reads_as_a_float_and_true_is_not_an_integer() -> None:
    assert Leaf.from_json({"name": "a", "weight": 2}).to_json() == {"name": "a", "weight": 2}
    with pytest.raises(CodecError, match=r"^age: expected an integer, not true or false$"):
        Tree.from_json({"id": "t", "age": True})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": "t", "counts": []}, "counts: expected an object, not a list"),
        (
            {"id": "t", "counts": {"passed": "3"}},
            "counts.passed: expected an integer, not a string",
        ),
        ({"id": "t", "leaves": [{"name": "a"}, {"name": 5}]}, "leaves.1.name: expected a string"),
        ({"id": "t", "leaves": {"name": "a"}}, "leaves: expected a list, not an object"),
        ({"id": "t", "parent": "p"}, "parent: expected an object, not a string"),
        ({"id": "t", "color": "green"}, "color: 'green' is not one of \\['red', 'blue'\\]"),
        ({"id": "t", "alive": "yes"}, "alive: expected true or false, not a string"),
        ({"color": "red"}, "id: missing"),
        ([], "record: expected an object, not a list"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_its_path(data: Any, message: str) -> None:
    with pytest.raises(CodecError, match=f"^{message}") as caught:
        Tree.from_json(data)
    assert isinstance(caught.value, BadInput) and isinstance(caught.value, ValueError)


@dataclass(frozen=True)
class Results:
    counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    results: Results | None = None


def test_the_path_runs_through_nested_records_without_methods() -> None:
    with pytest.raises(CodecError, match=r"^results\.counts: expected an object, not a list$"):
        from_json(Run, {"results": {"counts": []}})
    assert to_json(from_json(Run, {"results": {"counts": {"a": 1}}})) == {
        "results": {"counts": {"a": 1}}
    }


@dataclass(frozen=True)
class Triage:
    id: str = ""
    failure_class: str = field(default="", metadata=wire("class"))
    why: str = field(default="", metadata=wire(omit=EMPTY))


@dataclass(frozen=True)
class Entry(Record):
    id: str = ""
    triage: Triage | None = field(default=None, metadata=wire(flat=True))
    seen: str | None = None
    bisect: Leaf | None = field(default=None, metadata=wire(omit=NONE, keep_unreadable=True))
    analyzer_version: str = field(default="?", metadata=wire("analyzer.version"))
    analyzer_name: str = field(default="?", metadata=wire("analyzer.name"))
    rounded: float = field(default=0.0, metadata=wire(encode=lambda v: round(v, 1)))
    missing: frozenset[str] = frozenset()
    extra: Mapping[str, Any] = field(default_factory=dict)

    WIRE_ORDER: ClassVar[tuple[str, ...]] = (
        *("id", "triage", "seen", "bisect", "analyzer_name", "analyzer_version", "rounded"),
    )


def test_wire_hooks_rename_omit_flatten_nest_order_and_round() -> None:
    entry = Entry("v", Triage("v", "precision"), None, None, "1.0", "ci", 0.26)
    written = {
        "id": "v",
        "class": "precision",
        "seen": None,
        "analyzer": {"name": "ci", "version": "1.0"},
        "rounded": 0.3,
    }
    assert json.dumps(entry.to_json()) == json.dumps(written)
    read = Entry.from_json(written)
    assert read.triage == Triage("v", "precision") and read.analyzer_name == "ci"
    assert json.dumps(read.to_json()) == json.dumps(written)


def test_a_flat_part_is_none_without_any_of_its_own_keys() -> None:
    assert Entry.from_json({"id": "v", "seen": "x"}).triage is None
    assert Entry.from_json({"id": "v", "why": "w"}).triage == Triage("v", "", "w")


def test_missing_tracks_the_keys_always_written_not_those_written_when_set() -> None:
    read = Entry.from_json({"id": "v"})
    assert read.missing == {"class", "seen", "analyzer", "rounded"}
    assert read.to_json() == {"id": "v"}


def test_an_unreadable_value_of_a_keeping_field_stays_in_extra_as_read() -> None:
    data = {"id": "v", "bisect": "not an answer"}
    read = Entry.from_json(data)
    assert read.bisect is None and read.extra == {"bisect": "not an answer"}
    assert read.to_json() == data
    assert Entry.from_json({"id": "v", "bisect": {"name": 5}}).extra == {"bisect": {"name": 5}}


@dataclass(frozen=True)
class Where(Record):
    device: str
    extra: Mapping[str, str] = field(default_factory=dict, metadata=wire("extra"))
    source: str = field(default="", metadata=wire(unless="tested"))
    tested: str = field(default="", metadata=wire(unless="tested"))
    top: tuple[tuple[str, int], ...] = ()


def test_a_field_named_extra_with_wire_metadata_is_a_plain_field() -> None:
    read = Where.from_json({"device": "d", "extra": {"k": "v"}, "unknown": 1})
    assert read.extra == {"k": "v"}
    assert read.to_json() == {"device": "d", "extra": {"k": "v"}, "top": []}


def test_unless_leaves_a_field_out_while_the_named_one_is_empty() -> None:
    assert "source" not in Where("d", source="s").to_json()
    assert Where("d", source="s", tested="yes").to_json()["source"] == "s"


def test_a_fixed_tuple_reads_each_place_by_its_own_type() -> None:
    assert Where.from_json({"device": "d", "top": [["a", 2]]}).top == (("a", 2),)
    with pytest.raises(CodecError, match=r"^top\.0\.1: expected an integer, not a string$"):
        Where.from_json({"device": "d", "top": [["a", "2"]]})
    with pytest.raises(CodecError, match=r"^top\.0: expected a list of 2 items, not 1$"):
        Where.from_json({"device": "d", "top": [["a"]]})


@dataclass(frozen=True)
class Kept(Record):
    id: str
    why: Mapping[str, str] = field(default_factory=dict, metadata=wire(omit=ALWAYS))


def test_a_field_the_process_keeps_is_never_written() -> None:
    assert Kept("k", {"a": "b"}).to_json() == {"id": "k"}
    assert Kept.from_json({"id": "k"}) == Kept("k")


@dataclass(frozen=True)
class Counted(Record):
    by_path: Mapping[str, Mapping[str, int]] = field(
        default_factory=dict, metadata=wire(encode=sorted_keys)
    )


def test_sorted_keys_writes_a_mapping_in_key_order_and_its_values_as_they_are() -> None:
    written = Counted({"z": {"b": 1, "a": 2}, "a": {}}).to_json()
    assert json.dumps(written) == json.dumps({"by_path": {"a": {}, "z": {"b": 1, "a": 2}}})


@pytest.mark.parametrize(
    ("tp", "raw", "expected"),
    [
        (frozenset[str], ["b", "a", "b"], frozenset({"a", "b"})),
        (tuple[str, ...], ["b", "a"], ("b", "a")),
        (list[int], [3, 1], [3, 1]),
        (Sequence[str], [], ()),
    ],
)
def test_a_list_of_plain_items_reads_as_its_collection(tp: Any, raw: Any, expected: Any) -> None:
    read = decode(tp, raw)
    assert read == expected and type(read) is type(expected)


@pytest.mark.parametrize(
    ("tp", "raw", "message"),
    [
        (frozenset[str], ["a", 1], "^1: expected a string, not an integer$"),
        (tuple[int, ...], [1, True], "^1: expected an integer, not true or false$"),
        (tuple[int, ...], [1, 2.5], "^1: expected an integer, not a number$"),
    ],
)
def test_a_list_with_one_item_of_another_type_names_its_place(
    tp: Any, raw: Any, message: str
) -> None:
    with pytest.raises(CodecError, match=message):
        decode(tp, raw)
