"""Lookups over an Inventory, built once and reused by every heuristic (and across plans)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from selector.aliases import alias_index
from selector.kernels import KernelMap
from selector.levels import subject_level
from selector.opnames import compact, family_of, op_key
from suites.model import Expectation, Inventory, Variant


@dataclass(frozen=True)
class InventoryIndex:
    inventory: Inventory
    aliases: Mapping[str, str]
    ids: tuple[str, ...]
    runnable: tuple[str, ...]  # ids without a declared skip, in inventory order
    runnable_set: frozenset[str]
    declared_skip: frozenset[str]
    fingerprints: Mapping[str, str]  # id -> definition fingerprint
    by_id: Mapping[str, Variant]
    by_op: Mapping[str, tuple[str, ...]]  # op_key(subject) -> ids
    by_family: Mapping[str, tuple[str, ...]]  # family -> ids
    by_template: Mapping[str, tuple[str, ...]]
    by_watch: Mapping[tuple[str, ...], tuple[str, ...]]  # distinct watch tuple -> ids
    # File suites: `path:qualname` of an upstream test or a definition it uses -> ids, and
    # upstream test file path -> ids.
    by_source: Mapping[str, tuple[str, ...]]
    by_test_file: Mapping[str, tuple[str, ...]]
    family_of_id: Mapping[str, str]
    op_of_id: Mapping[str, str]
    level_of_id: Mapping[str, int]  # see selector.levels
    families: frozenset[str]
    compact_families: Mapping[str, str]  # compact(name) -> family, for file-stem guesses
    kernels: KernelMap  # C++ kernel function -> ops (the Inventory's native_functions.yaml)

    @classmethod
    def build(
        cls, inventory: Inventory, extra_families: Mapping[str, tuple[str, ...]] | None = None
    ) -> InventoryIndex:
        """The index of `inventory`; one built in this process for the same Inventory object
        and extra families is reused (a run's plan and its Verify ask for the same one)."""
        key = (id(inventory), tuple(sorted((extra_families or {}).items())))
        built = _BUILT.get(key)
        if built is not None and built.inventory is inventory:
            return built
        built = cls._build(inventory, extra_families)
        if len(_BUILT) >= 4:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = built
        return built

    @classmethod
    def _build(
        cls, inventory: Inventory, extra_families: Mapping[str, tuple[str, ...]] | None
    ) -> InventoryIndex:
        aliases = alias_index(dict(extra_families or {}))
        by_op: dict[str, list[str]] = defaultdict(list)
        by_family: dict[str, list[str]] = defaultdict(list)
        by_template: dict[str, list[str]] = defaultdict(list)
        by_watch: dict[tuple[str, ...], list[str]] = defaultdict(list)
        by_source: dict[str, list[str]] = defaultdict(list)
        by_test_file: dict[str, list[str]] = defaultdict(list)
        family_of_id: dict[str, str] = {}
        op_of_id: dict[str, str] = {}
        level_of_id: dict[str, int] = {}
        memo: dict[str, tuple[str, str, int]] = {}  # subjects repeat across dtypes, templates
        for v in inventory.variants:
            memo_key = f"{v.subject}\0{v.family}"
            cached = memo.get(memo_key)
            if cached is None:
                family = family_of(v.family or v.subject, aliases)
                cached = (op_key(v.subject), family, subject_level(v.subject))
                memo[memo_key] = cached
            op, family, level = cached
            op_of_id[v.id] = op
            level_of_id[v.id] = level
            family_of_id[v.id] = family
            by_op[op].append(v.id)
            by_family[family].append(v.id)
            by_template[v.template].append(v.id)
            if v.watch:
                by_watch[v.watch].append(v.id)
            for source in v.sources:
                by_source[source].append(v.id)
            if v.sources:
                by_test_file[v.sources[0].rpartition(":")[0]].append(v.id)
        families = frozenset(by_family) | frozenset(aliases.values())
        compact_families = {compact(n): f for n, f in aliases.items()}
        for name in (*by_family, *by_op):
            compact_families.setdefault(compact(name), family_of(name, aliases))
        ids = tuple(v.id for v in inventory.variants)
        skip = frozenset(v.id for v in inventory.variants if v.expectation is Expectation.SKIP)
        runnable = tuple(vid for vid in ids if vid not in skip)
        return cls(
            inventory=inventory,
            aliases=aliases,
            ids=ids,
            runnable=runnable,
            runnable_set=frozenset(runnable),
            declared_skip=skip,
            fingerprints={v.id: v.fingerprint for v in inventory.variants},
            by_id=inventory.by_id(),
            by_op={k: tuple(v) for k, v in by_op.items()},
            by_family={k: tuple(v) for k, v in by_family.items()},
            by_template={k: tuple(v) for k, v in by_template.items()},
            by_watch={k: tuple(v) for k, v in by_watch.items()},
            by_source={k: tuple(v) for k, v in by_source.items()},
            by_test_file={k: tuple(v) for k, v in by_test_file.items()},
            family_of_id=family_of_id,
            op_of_id=op_of_id,
            level_of_id=level_of_id,
            families=families,
            compact_families=compact_families,
            kernels=KernelMap(inventory.kernels),
        )

    @classmethod
    def of(cls, inventory: Inventory | InventoryIndex) -> InventoryIndex:
        """The index itself, or a new one for a bare Inventory."""
        return inventory if isinstance(inventory, InventoryIndex) else cls.build(inventory)

    def knows_op(self, name: str) -> bool:
        """True when `name` is an op the inventory tests or the alias table lists."""
        return op_key(name) in self.by_op or family_of(name, self.aliases) in self.families


# Indexes built in this process: (id of the Inventory, extra families) -> index. The index
# holds its Inventory, so an id is compared by identity before reuse (an id may be reused).
_BUILT: dict[tuple[int, tuple[tuple[str, tuple[str, ...]], ...]], InventoryIndex] = {}
