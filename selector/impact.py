"""Impact map: per variant, the torch Python functions it executed and the aten ops it
dispatched, as recorded by a tracing run (`spyre-ci impact-map`). Plain data.

JSON form: `{"format": 1, "torch_version": "...", "variants": {"<id>": {"functions":
["torch/nn/functional.py:softmax", ...], "aten_ops": ["aten::_softmax", ...]}}}`; function
entries are `<path in the PyTorch repository>:<function name>`. A recorded map also carries
`"session"` (`{"functions": [...], "aten_ops": [...]}`: what ran outside any test, imports and
collection) and `"untraced"` (variants whose trace is incomplete); this is the one reader of
the file, for the selector and the selection benchmark alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from selector.errors import SelectorError
from selector.opnames import op_key

IMPACT_FORMAT = 1
COMPACT_FORMAT = 2


@dataclass(frozen=True)
class ImpactMap:
    functions: Mapping[str, frozenset[str]] = field(default_factory=dict)  # id -> functions
    aten_ops: Mapping[str, frozenset[str]] = field(default_factory=dict)  # id -> aten ops
    torch_version: str = ""
    session_functions: frozenset[str] = frozenset()  # ran outside any test
    session_ops: frozenset[str] = frozenset()
    # id -> the variant's definition fingerprint when it was traced; a variant whose
    # fingerprint has changed since has a stale trace. Empty: not recorded (older maps).
    fingerprints: Mapping[str, str] = field(default_factory=dict)

    def inverted(self) -> tuple[_Inverted, _Inverted]:
        """(function -> ids, op_key -> ids), each entry built when it is first asked for:
        a plan asks for the few functions and ops a change touches, and inverting a whole
        shipped trace (about 2.5 million memberships) would cost more than the plan."""
        cached = self.__dict__.get("_inverted")
        if cached is None:
            cached = (_Inverted(self.functions), _Inverted(self.aten_ops, op_key))
            # A frozen dataclass: the cache goes into the instance dict directly.
            self.__dict__["_inverted"] = cached
        return cached

    def prepare(self) -> None:
        """Compute now what a plan's first look at this map computes: its inverted maps'
        names, and the hashes of every name and distinct name set (Python caches them in the
        objects). A process that forks planning processes (the warm `spyre-ci` process) calls
        it once on the shipped trace, so each fork, and the maps it overlays on this one, find
        them done (a new overlaid map's index is then a fraction of the first one's)."""
        for inverted in self.inverted():
            inverted.prepare()

    def overlaid(
        self, traces: Mapping[str, tuple[frozenset[str], frozenset[str], str]]
    ) -> ImpactMap:
        """This map with some variants' traces replaced or added: `id -> (functions, aten
        ops, fingerprint)`, newer recordings. Its index is built on demand like any map's, so
        joining a few stored traces onto a large shipped map copies three dicts, no more."""
        functions, ops, fps = dict(self.functions), dict(self.aten_ops), dict(self.fingerprints)
        for vid, (names, vops, fingerprint) in traces.items():
            functions[vid], ops[vid], fps[vid] = names, vops, fingerprint
        return ImpactMap(
            functions, ops, self.torch_version, self.session_functions, self.session_ops, fps
        )

    def executing(self, function: str) -> set[str]:
        """Ids that ran `path:qualname`, code nested in it (`.<locals>.`), or, for
        `path:Class.*`, any method of the class. A bare name the trace never saw as such
        (`path:__rpow__`: a def whose enclosing class the diff did not show) stands for any
        method or nested function of that name in the file (`Tensor.__rpow__`)."""
        by_function = self._by_file(function.split(":", 1)[0])
        ids: set[str] = set()
        for name in _standing_for(function, by_function):
            ids |= by_function[name]
        return ids

    def in_session(self, function: str) -> bool:
        """Whether the trace saw `function` (as `executing` reads it) run outside any test:
        at import or collection."""
        prefix = function.split(":", 1)[0] + ":"
        names = [name for name in self.session_functions if name.startswith(prefix)]
        return bool(_standing_for(function, names))

    def executing_file(self, path: str) -> set[str]:
        """Ids that ran any function of `path`."""
        ids: set[str] = set()
        for vids in self._by_file(path).values():
            ids |= vids
        return ids

    def _by_file(self, path: str) -> Mapping[str, frozenset[str]]:
        return self.inverted()[0].in_file(path)

    def stale(self, fingerprints: Mapping[str, str]) -> frozenset[str]:
        """Traced ids whose definition fingerprint has changed since they were traced: their
        trace no longer describes them. (Ids never traced are new to the trace; the History's
        `new` heuristic runs new variants.)"""
        return frozenset(
            vid
            for vid, recorded in self.fingerprints.items()
            if vid in fingerprints and fingerprints[vid] != recorded
        )

    def to_json(self) -> dict[str, Any]:
        ids = sorted(set(self.functions) | set(self.aten_ops))
        data: dict[str, Any] = {
            "format": IMPACT_FORMAT,
            "torch_version": self.torch_version,
            "variants": {
                vid: {
                    "functions": sorted(self.functions.get(vid, ())),
                    "aten_ops": sorted(self.aten_ops.get(vid, ())),
                }
                for vid in ids
            },
        }
        if self.fingerprints:
            data["fingerprints"] = dict(sorted(self.fingerprints.items()))
        if self.session_functions or self.session_ops:
            data["session"] = {
                "functions": sorted(self.session_functions),
                "aten_ops": sorted(self.session_ops),
            }
        return data

    def to_compact(self) -> dict[str, Any]:
        """The compact form (format 2, shipped gzipped): names interned in tables, each
        distinct set of names stored once, a variant as [function set, op set, fingerprint]."""
        names = sorted({n for fs in self.functions.values() for n in fs} | self.session_functions)
        ops = sorted({o for os_ in self.aten_ops.values() for o in os_} | self.session_ops)
        name_at = {n: i for i, n in enumerate(names)}
        op_at = {o: i for i, o in enumerate(ops)}
        sets: dict[tuple[int, ...], int] = {}
        op_sets: dict[tuple[int, ...], int] = {}

        def interned(table: dict[tuple[int, ...], int], members: tuple[int, ...]) -> int:
            return table.setdefault(members, len(table))

        variants: dict[str, list[Any]] = {}
        for vid in sorted(set(self.functions) | set(self.aten_ops)):
            f = tuple(sorted(name_at[n] for n in self.functions.get(vid, ())))
            o = tuple(sorted(op_at[n] for n in self.aten_ops.get(vid, ())))
            variants[vid] = [
                interned(sets, f),
                interned(op_sets, o),
                self.fingerprints.get(vid, ""),
            ]
        return {
            "format": COMPACT_FORMAT,
            "torch_version": self.torch_version,
            "functions": names,
            "aten_ops": ops,
            "function_sets": [_deltas(m) for m in sets],
            "op_sets": [_deltas(m) for m in op_sets],
            "variants": variants,
            "session": [
                _deltas(tuple(sorted(name_at[n] for n in self.session_functions))),
                _deltas(tuple(sorted(op_at[o] for o in self.session_ops))),
            ],
        }

    @classmethod
    def _from_compact(cls, data: Mapping[str, Any], source: str) -> ImpactMap:
        try:
            names = list(data["functions"])
            ops = list(data["aten_ops"])
            sets = [frozenset(map(names.__getitem__, accumulate(m))) for m in data["function_sets"]]
            op_sets = [frozenset(map(ops.__getitem__, accumulate(m))) for m in data["op_sets"]]
            functions: dict[str, frozenset[str]] = {}
            aten_ops: dict[str, frozenset[str]] = {}
            fingerprints: dict[str, str] = {}
            for vid, (f, o, fingerprint) in data["variants"].items():
                functions[vid], aten_ops[vid] = sets[f], op_sets[o]
                if fingerprint:
                    fingerprints[vid] = fingerprint
            session_f, session_o = data.get("session") or ([], [])
            return cls(
                functions=functions,
                aten_ops=aten_ops,
                torch_version=str(data.get("torch_version", "")),
                session_functions=frozenset(map(names.__getitem__, accumulate(session_f))),
                session_ops=frozenset(map(ops.__getitem__, accumulate(session_o))),
                fingerprints=fingerprints,
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise SelectorError(f"{source}: not a compact trace (format 2): {exc!r}") from None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "impact map") -> ImpactMap:
        if data.get("format") == COMPACT_FORMAT:
            return cls._from_compact(data, source)
        if data.get("format") != IMPACT_FORMAT:
            raise SelectorError(
                f"{source}: format {data.get('format')!r} is not {IMPACT_FORMAT}; "
                "record it again with `spyre-ci impact-map`"
            )
        variants = data.get("variants")
        if not isinstance(variants, Mapping):
            raise SelectorError(f"{source}: 'variants' must be an object of variant id -> entry")
        for vid, entry in variants.items():
            if not isinstance(entry, Mapping) or not all(
                isinstance(entry.get(k, []), list) for k in ("functions", "aten_ops")
            ):
                raise SelectorError(
                    f"{source}: not an impact map: variants[{vid!r}] must be an "
                    "object with 'functions' and 'aten_ops' lists"
                )
        session = data.get("session") or {}
        if not isinstance(session, Mapping):
            raise SelectorError(f"{source}: 'session' must be an object with functions, aten_ops")
        return cls(
            functions={v: frozenset(e.get("functions", ())) for v, e in variants.items()},
            aten_ops={v: frozenset(e.get("aten_ops", ())) for v, e in variants.items()},
            torch_version=str(data.get("torch_version", "")),
            session_functions=frozenset(session.get("functions", ())),
            session_ops=frozenset(session.get("aten_ops", ())),
            fingerprints=dict(data.get("fingerprints") or {}),
        )


class _Inverted(Mapping[str, frozenset[str]]):
    """`id -> names` read the other way, `key(name) -> ids`, an entry built when first asked
    for. Variants that ran the same set of names share it (the compact trace stores each
    distinct set once: 3,418 function sets for 9,910 variants), so an entry is one pass over
    the distinct sets, each tested against the entry's names, not over every membership."""

    def __init__(
        self, traces: Mapping[str, frozenset[str]], key: Callable[[str], str] | None = None
    ) -> None:
        groups: dict[frozenset[str], list[str]] = {}
        for vid, names in traces.items():
            if names:
                groups.setdefault(frozenset(names), []).append(vid)
        self._groups = list(groups.items())
        self._key = key
        self._names: dict[str, frozenset[str]] | None = None  # key -> the names it stands for
        self._files: dict[str, frozenset[str]] | None = None  # path -> its function names
        self._built: dict[str, frozenset[str]] = {}
        self._in_files: dict[str, dict[str, frozenset[str]]] = {}

    def prepare(self) -> None:
        """The hash of each distinct name set, and the names (`ImpactMap.prepare`)."""
        for members, _ in self._groups:
            hash(members)
        self._keys()

    def _keys(self) -> dict[str, frozenset[str]]:
        if self._names is None:
            every = set[str]().union(*(members for members, _ in self._groups))
            if self._key is None:
                self._names = {name: frozenset((name,)) for name in every}
            else:
                by_key: dict[str, set[str]] = defaultdict(set)
                for name in every:
                    by_key[self._key(name)].add(name)
                self._names = {k: frozenset(names) for k, names in by_key.items()}
        return self._names

    def __getitem__(self, key: str) -> frozenset[str]:
        built = self._built.get(key)
        if built is None:
            names = self._keys()[key]  # KeyError: no variant ran it
            ids: set[str] = set()
            for members, vids in self._groups:
                if not members.isdisjoint(names):
                    ids.update(vids)
            built = self._built[key] = frozenset(ids)
        return built

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def in_file(self, path: str) -> dict[str, frozenset[str]]:
        """`path:name -> ids` for every traced function of `path`, in one pass over the sets."""
        if self._files is None:
            files: dict[str, set[str]] = defaultdict(set)
            for name in self._keys():
                files[name.split(":", 1)[0]].add(name)
            self._files = {p: frozenset(names) for p, names in files.items()}
        built = self._in_files.get(path)
        if built is None:
            names = self._files.get(path, frozenset())
            found: dict[str, set[str]] = defaultdict(set)
            for members, vids in self._groups:
                for name in members & names:
                    found[name].update(vids)
            built = self._in_files[path] = {name: frozenset(ids) for name, ids in found.items()}
        return built


def _standing_for(function: str, names: Collection[str]) -> list[str]:
    """The traced names (of `function`'s file) a changed `function` stands for: itself and
    code nested in it; every method of `path:Class.*`; for a bare name not among `names`,
    any method or nested function of that name."""
    if function.endswith(".*"):
        prefix = function[:-1]
        return [name for name in names if name.startswith(prefix)]
    nested = function + ".<locals>."
    found = [name for name in names if name == function or name.startswith(nested)]
    qualname = function.partition(":")[2]
    if function not in names and "." not in qualname:
        bare = "." + qualname
        found += [name for name in names if name.endswith(bare) or bare + ".<locals>." in name]
    return found


def _deltas(members: tuple[int, ...]) -> list[int]:
    """Sorted indices as differences (small numbers compress well)."""
    out, last = [], 0
    for i in members:
        out.append(i - last)
        last = i
    return out
