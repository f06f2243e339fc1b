"""One JSON codec for the frozen dataclass records every package writes and reads.

A record's JSON object has one key per field, in field order (or in `WIRE_ORDER`, a ClassVar
of field names, where the wire's order differs), each value written by its type: a nested
record as its object, a tuple or list as a list, a mapping as an object, an enum as its
value, a frozenset as a sorted list. One leniency policy for every record:

- a key an older record lacks reads as the field's default, and a null as the default of a
  field that is not Optional; a record with a `missing` field remembers the keys it lacked
  and does not write them back (a reader that tells an older record by a key it lacks still
  can after the record is saved again);
- a record with an `extra` field keeps the keys it does not know as read and writes them
  back (last, or where `"extra"` stands in `WIRE_ORDER`);
- a value of the wrong type is refused with a `CodecError` that names its path
  (`results.counts: expected an object, not a list`).

Where a record's wire form differs, a field says so in its metadata (`wire(...)`): another
key (`"class"`, or `"analyzer.name"` inside a nested object), left out when `omit` says so,
its own `encode`/`decode`, or `flat`: a nested record whose keys sit in its parent's object.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import operator
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, TypeVar

from contracts.errors import BadInput

R = TypeVar("R")
_META = "contracts.codec"
_MISSING = "missing"
_EXTRA = "extra"
_ABSENT = object()


class CodecError(BadInput, ValueError):
    """A record's JSON holds a value this version cannot read; the message names its path."""

    def __init__(self, path: tuple[str, ...], problem: str) -> None:
        super().__init__(f"{'.'.join(path) or 'record'}: {problem}")
        self.path = path
        self.problem = problem

    def within(self, key: str) -> CodecError:
        return CodecError((key, *self.path), self.problem)


def EMPTY(value: object) -> bool:  # noqa: N802 (a predicate named like the constant it acts as)
    """`omit=EMPTY`: left out when empty (None, "", 0, False, no items)."""
    return not value


def NONE(value: object) -> bool:  # noqa: N802
    """`omit=NONE`: left out when None."""
    return value is None


def ALWAYS(value: object) -> bool:  # noqa: N802
    """`omit=ALWAYS`: never written (a field the process keeps and the wire does not)."""
    return True


def wire(
    key: str | None = None,
    *,
    omit: Callable[[Any], bool] | None = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    flat: bool = False,
    keep_unreadable: bool = False,
    unless: str | None = None,
) -> dict[str, Any]:
    """A field's metadata where its wire form differs: `field(default=..., metadata=wire(...))`.

    `keep_unreadable`: a value this version cannot read leaves the field its default and is
    kept in the record's `extra` as read, not refused. `unless`: left out when the field of
    that name is empty. A field named `missing` or `extra` with `wire(...)` is a plain one."""
    return {_META: _Wire(key, omit, encode, decode, flat, keep_unreadable, unless)}


@dataclasses.dataclass(frozen=True)
class _Wire:
    key: str | None
    omit: Callable[[Any], bool] | None
    encode: Callable[[Any], Any] | None
    decode: Callable[[Any], Any] | None
    flat: bool
    keep_unreadable: bool = False
    unless: str | None = None


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: tuple[str, ...]  # its path in the object: one key, or "analyzer.name" split
    type: Any
    optional: bool
    required: bool
    how: _Wire


@dataclasses.dataclass(frozen=True)
class _Shape:
    order: tuple[_Field | None, ...]  # None: where the extra keys go
    known: frozenset[str]  # every top-level key this record (and its flat parts) reads
    always: frozenset[str]  # the keys written whatever the values: those `missing` tracks
    has_missing: bool
    has_extra: bool


def _optional(tp: Any) -> tuple[Any, bool]:
    """`X | None` as (X, True); any other type as (it, False)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return functools.reduce(operator.or_, args), True
    return tp, False


_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    if cls not in _SHAPES:
        _SHAPES[cls] = _read_shape(cls)
    return _SHAPES[cls]


def _read_shape(cls: type) -> _Shape:
    hints = typing.get_type_hints(cls)
    names: set[str] = set()  # "missing kept", "extra kept": the conventions it follows
    own: list[_Field] = []
    for f in dataclasses.fields(cls):
        if f.name in (_MISSING, _EXTRA) and _META not in f.metadata:
            names.add(f"{f.name} kept")
            continue
        how = f.metadata.get(_META) or _Wire(None, None, None, None, False)
        tp, optional = _optional(hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        key = tuple((how.key or f.name).split("."))
        own.append(_Field(f.name, key, tp, optional, required, how))
    order: list[_Field | None] = list(own)
    wanted: Sequence[str] = getattr(cls, "WIRE_ORDER", ())
    if wanted:
        by_name = {f.name: f for f in own}
        order = [None if n == _EXTRA else by_name[n] for n in wanted]
        order += [f for f in own if f.name not in wanted]
    if f"{_EXTRA} kept" in names and None not in order:
        order.append(None)
    known: set[str] = set()
    always: set[str] = set()
    for g in own:
        if g.how.flat:
            part = _shape(g.type)
            known |= part.known
            always |= part.always
        else:
            known.add(g.key[0])
            if g.how.omit is None and g.how.unless is None:
                always.add(g.key[0])
    return _Shape(
        tuple(order),
        frozenset(known),
        frozenset(always),
        f"{_MISSING} kept" in names,
        f"{_EXTRA} kept" in names,
    )


def to_json(record: object) -> dict[str, Any]:
    """The record's JSON object (see the module's docstring for the policy)."""
    shape = _shape(type(record))
    data: dict[str, Any] = {}
    for f in shape.order:
        if f is None:
            data.update(getattr(record, _EXTRA))
            continue
        value = getattr(record, f.name)
        if f.how.omit is not None and f.how.omit(value):
            continue
        if f.how.unless is not None and not getattr(record, f.how.unless):
            continue
        if f.how.flat:
            if value is not None:
                for k, v in encode(value).items():
                    data.setdefault(k, v)
            continue
        encoded = f.how.encode(value) if f.how.encode else encode(value)
        *outer, last = f.key
        into = data
        for k in outer:
            into = into.setdefault(k, {})
        into[last] = encoded
    if shape.has_missing:
        gone: frozenset[str] = getattr(record, _MISSING)
        data = {k: v for k, v in data.items() if k not in gone}
    return data


def encode(value: object) -> Any:
    """Any value as JSON: a record (its own `to_json` first), enum, mapping, sequence, set."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, frozenset | set):
        return sorted(encode(v) for v in value)
    return value


def sorted_keys(value: Mapping[str, Any]) -> dict[str, Any]:
    """`wire(encode=sorted_keys)`: a mapping written in the order of its keys."""
    return {k: encode(v) for k, v in sorted(value.items())}


def from_json(cls: type[R], data: object) -> R:
    """The record `data` holds, written by this version or an earlier one."""
    if not isinstance(data, Mapping):
        raise CodecError((), f"expected an object, not {_kind(data)}")
    shape = _shape(cls)
    values: dict[str, Any] = {}
    unread: dict[str, Any] = {}
    for f in (f for f in shape.order if f is not None):
        if f.how.flat:
            keys = _shape(f.type).known - {g.key[0] for g in shape.order if g and not g.how.flat}
            if f.optional and not keys & data.keys():
                values[f.name] = None
            else:
                values[f.name] = decode(f.type, data)
            continue
        raw: Any = data
        for k in f.key:
            raw = raw.get(k, _ABSENT) if isinstance(raw, Mapping) else _ABSENT
        if raw is None and f.optional:
            values[f.name] = None
            continue
        if raw is None or raw is _ABSENT:  # an older record's: the default
            if f.required:
                raise CodecError(f.key, "missing")
            continue
        try:
            values[f.name] = f.how.decode(raw) if f.how.decode else decode(f.type, raw)
        except CodecError as e:
            if f.how.keep_unreadable and shape.has_extra:
                unread[f.key[0]] = data[f.key[0]]
                continue
            for k in reversed(f.key):
                e = e.within(k)
            raise e from None
    if shape.has_missing:
        values[_MISSING] = shape.always - data.keys()
    if shape.has_extra:
        values[_EXTRA] = {k: v for k, v in data.items() if k not in shape.known} | unread
    return cls(**values)


def decode(tp: Any, raw: object) -> Any:
    """`raw` read as a value of type `tp`; a CodecError (path from here down) if it is not one."""
    tp, optional = _optional(tp)
    if raw is None and optional:
        return None
    origin = typing.get_origin(tp) or tp
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return raw
    if isinstance(origin, type) and hasattr(origin, "from_json"):
        return origin.from_json(raw)
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        return from_json(origin, raw)
    if origin is typing.Union or origin is types.UnionType:
        for arg in args:
            try:
                return decode(arg, raw)
            except CodecError:
                pass
        raise CodecError((), f"expected one of {tp}, not {_kind(raw)}")
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        try:
            return origin(raw)
        except ValueError:
            raise CodecError((), f"{raw!r} is not one of {[m.value for m in origin]}") from None
    if origin in (dict, Mapping):
        if not isinstance(raw, Mapping):
            raise CodecError((), f"expected an object, not {_kind(raw)}")
        item = args[1] if args else Any
        return {str(k): _at(str(k), item, v) for k, v in raw.items()}
    if origin is tuple and args and args[-1] is not Ellipsis:  # a pair, a triple
        if not isinstance(raw, list | tuple):
            raise CodecError((), f"expected a list of {len(args)} items, not {_kind(raw)}")
        if len(raw) != len(args):
            raise CodecError((), f"expected a list of {len(args)} items, not {len(raw)}")
        return tuple(_at(str(i), a, v) for i, (a, v) in enumerate(zip(args, raw, strict=True)))
    if origin in (tuple, list, frozenset, set, Sequence):
        if not isinstance(raw, list | tuple):
            raise CodecError((), f"expected a list, not {_kind(raw)}")
        item = args[0] if args else Any
        make = _SEQUENCES.get(origin, tuple)
        if item in _PLAIN and all(type(v) is item for v in raw):
            return make(list(raw))  # the common case, at once: History's 10,000 known ids
        return make([_at(str(i), item, v) for i, v in enumerate(raw)])
    if origin is float and isinstance(raw, int) and not isinstance(raw, bool):
        return raw  # a whole number is a float's value too, written back as read
    # true is an int to Python, not to a record
    if (
        isinstance(origin, type)
        and isinstance(raw, origin)
        and (origin is bool or raw is not True and raw is not False)
    ):
        return raw
    raise CodecError((), f"expected {_NAMES.get(origin, str(origin))}, not {_kind(raw)}")


def _at(key: str, tp: Any, raw: object) -> Any:
    try:
        return decode(tp, raw)
    except CodecError as e:
        raise e.within(key) from None


_SEQUENCES: dict[Any, Callable[[list[Any]], Any]] = {list: list, frozenset: frozenset, set: set}
# Item types whose values a list holds as they are read (`type(v) is int` leaves out true).
_PLAIN = (str, int)
_NAMES: dict[Any, str] = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "true or false",
    int: "an integer",
    float: "a number",
}


def _kind(raw: object) -> str:
    """How an error names a JSON value: `an object`, `a list`, `a string`, `null`, ..."""
    if raw is None:
        return "null"
    if isinstance(raw, Mapping):
        return "an object"
    if isinstance(raw, tuple):
        return "a list"
    return _NAMES.get(type(raw), type(raw).__name__)


class Record:
    """A base for records whose callers call `to_json()`/`from_json()`: the codec's."""

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: object) -> Self:
        return from_json(cls, data)
