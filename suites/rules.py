"""How a variant's expectation is decided: pure functions over spec data, no torch.

Two rule systems live here:

* OpInfo suites (our extension): an ordered list of `Rule`s; the last matching rule that sets
  a mode decides it (default from `unlisted_test_mode`, then OpInfo decorators, then the
  spec's `tests`, then its generated expectations file).
* torch-spyre file suites: `decide_file_variant` keeps torch-spyre's meanings exactly
  (entry choice by dtype, disabling filters, unlisted mode, force_xfail, precision).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from suites.loader import Path_, SpecFile, as_names, item_names
from suites.model import Expectation
from suites.template_names import TEMPLATE_UPSTREAM
from suites.torch_condition import installed_torch_version, torch_holds

MODES = {
    "mandatory_success": Expectation.PASS,
    "xfail": Expectation.XFAIL,
    "xfail_strict": Expectation.XFAIL_STRICT,
    "skip": Expectation.SKIP,
}

DTYPE_ALIASES = {"half": "float16"}


def canonical_dtype(name: str) -> str:
    name = name.removeprefix("torch.")
    return DTYPE_ALIASES.get(name, name)


@dataclass(frozen=True)
class Tolerance:
    atol: float | None = None
    rtol: float | None = None

    def to_json(self) -> dict[str, float | None]:
        return {"atol": self.atol, "rtol": self.rtol}


def tolerance_of(data: Any) -> Tolerance | None:
    if not isinstance(data, dict):
        return None
    atol, rtol = data.get("atol"), data.get("rtol")
    return Tolerance(None if atol is None else float(atol), None if rtol is None else float(rtol))


@dataclass(frozen=True)
class Rule:
    """One rule of an OpInfo suite; `None` filters match everything."""

    source: str  # `file:line`, or a description for rules from torch's databases
    kind: str  # default | opinfo | tests | expectations
    templates: tuple[str, ...] | None = None
    ops: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    id_glob: str | None = None
    mode: Expectation | None = None
    reason: str = ""
    precision: Tolerance | None = None
    timeout_s: float | None = None
    owners: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()

    def matches(self, key: VariantKey) -> bool:
        if self.id_glob is not None and not (
            self.id_glob == key.id or fnmatch.fnmatchcase(key.id, self.id_glob)
        ):
            return False
        if self.templates is not None and not any(
            _template_matches(t, key) for t in self.templates
        ):
            return False
        if self.ops is not None and not any(
            fnmatch.fnmatchcase(key.subject, p) or fnmatch.fnmatchcase(key.base_name, p)
            for p in self.ops
        ):
            return False
        return self.dtypes is None or key.dtype in self.dtypes

    def describe(self) -> str:
        what = f"{self.mode}" if self.mode else "settings"
        why = f": {self.reason}" if self.reason else ""
        return f"{self.source} [{self.kind}] {what}{why}"


def _template_matches(name: str, key: VariantKey) -> bool:
    if name == key.template:
        return True
    cls, test = TEMPLATE_UPSTREAM.get(key.template, ("", ""))
    # As in torch-spyre, the class part of `Class::method` is only a label.
    return name.split("::")[-1] == test


@dataclass(frozen=True)
class VariantKey:
    id: str
    template: str
    subject: str
    base_name: str  # OpInfo name without variant (`div` for `div.floor_rounding`)
    dtype: str


@dataclass(frozen=True)
class Decision:
    """What the rules decided for one variant, and which rules matched (for `explain`)."""

    expectation: Expectation = Expectation.PASS
    reason: str = ""
    rule: str = ""
    precision: Tolerance | None = None
    timeout_s: float | None = None
    owners: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    matched: tuple[Rule, ...] = field(default=(), compare=False)


def decide(key: VariantKey, rules: Sequence[Rule], *, keep_trail: bool = False) -> Decision:
    """Apply rules in order; the last one that matches and sets a field wins for that field."""
    mode, reason, source = Expectation.PASS, "", ""
    precision: Tolerance | None = None
    timeout: float | None = None
    owners: tuple[str, ...] = ()
    watch: list[str] = []
    matched: list[Rule] = []
    for rule in rules:
        if not rule.matches(key):
            continue
        if keep_trail:
            matched.append(rule)
        if rule.mode is not None:
            mode, reason, source = rule.mode, rule.reason, rule.source
        if rule.precision is not None:
            precision = rule.precision
        if rule.timeout_s is not None:
            timeout = rule.timeout_s
        if rule.owners:
            owners = rule.owners
        watch.extend(w for w in rule.watch if w not in watch)
    return Decision(mode, reason, source, precision, timeout, owners, tuple(watch), tuple(matched))


def spec_rules(spec: SpecFile, entry_where: Path_) -> list[Rule]:
    """The `tests` rules of one `opinfo` entry, in YAML order."""
    entry = spec.get(entry_where) or {}
    out: list[Rule] = []
    for ti, test in enumerate(entry.get("tests") or ()):
        where = (*entry_where, "tests", ti)
        names = test.get("names")
        ops = test.get("ops")
        dtypes = test.get("dtypes")
        mode = test.get("mode")
        out.append(
            Rule(
                source=spec.line_ref(where),
                kind="tests",
                templates=tuple(as_names(names)) if names is not None else None,
                ops=tuple(as_names(ops)) if ops is not None else None,
                dtypes=tuple(canonical_dtype(d) for d in dtypes) if dtypes is not None else None,
                mode=MODES[mode] if mode else None,
                reason=test.get("reason", "") or "",
                precision=tolerance_of(test.get("precision")),
                timeout_s=test.get("timeout_s"),
                owners=tuple(test.get("owners") or ()),
                watch=tuple(test.get("watch") or ()),
            )
        )
    return out


def expectation_rules(spec: SpecFile, torch_version: str | None = None) -> list[Rule]:
    """Rules of a generated expectations file, one per id (or id glob): those whose `torch`
    condition holds on `torch_version` (default: the installed torch's)."""
    version = installed_torch_version() if torch_version is None else torch_version
    out: list[Rule] = []
    for i, item in enumerate(spec.get(("expectations",)) or ()):
        if not torch_holds(item.get("torch"), spec.line_ref(("expectations", i)), version):
            continue
        out.append(
            Rule(
                source=spec.line_ref(("expectations", i)),
                kind="expectations",
                id_glob=item["id"],
                mode=MODES[item["mode"]],
                reason=item.get("reason", ""),
                precision=tolerance_of(item.get("precision")),
                timeout_s=item.get("timeout_s"),
            )
        )
    return out


# --- torch-spyre file suites -------------------------------------------------------------

_REGEX_CHARS = set("\\.^$*+?{}[]|()")


@dataclass(frozen=True)
class FileDecision:
    expectation: Expectation
    reason: str
    rule: str
    precision: Tolerance | None = None
    cpu_move: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    no_grad: bool = False
    timeout_s: float | None = None
    owners: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    listed: bool = True
    excluded: bool = False  # torch-spyre never generates it; `rule` says which line decided


def _entry_matches(test: dict[str, Any], base_name: str) -> tuple[bool, bool]:
    """(exact match, regex match) of a test entry's names against a base test name."""
    exact = regex = False
    for name in as_names(test.get("names")):
        method = name.split("::")[-1]
        if _REGEX_CHARS & set(method):
            try:
                if re.fullmatch(method, base_name):
                    regex = True
            except re.error:
                continue
        elif method == base_name:
            exact = True
    return exact, regex


def _dtype_items(items: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in items or ():
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out[canonical_dtype(item["name"])] = item
        elif isinstance(item, str):
            out[canonical_dtype(item)] = {"name": item}
    return out


def _edits(test: dict[str, Any], kind: str) -> dict[str, Any]:
    edits = test.get("edits") or {}
    value = edits.get(kind) or {}
    return value if isinstance(value, dict) else {}


def decide_file_variant(
    spec: SpecFile,
    file_where: Path_,
    base_name: str,
    op: str | None,
    dtype: str | None,
    *,
    test_type: str = "full",
    op_formatted: str | None = None,
) -> FileDecision:
    """torch-spyre's per-variant decision. A variant torch-spyre disables or skips (deletes
    from the test class) comes back `excluded`, with the YAML line that excluded it."""
    entry = spec.get(file_where) or {}
    root = spec.get(("test_suite_config",)) or {}
    glob = root.get("global") or {}
    dtype = canonical_dtype(dtype) if dtype else None
    supported_dtypes = _dtype_items(glob.get("supported_dtypes"))
    supported_ops = {
        name: item
        for _, name in item_names(glob.get("supported_ops"))
        for item in [_named(glob.get("supported_ops"), name)]
    }
    tests = list(enumerate(entry.get("tests") or ()))
    exact = [(i, t) for i, t in tests if _entry_matches(t, base_name)[0]]
    regex = [(i, t) for i, t in tests if _entry_matches(t, base_name)[1] and (i, t) not in exact]
    candidates = exact + regex
    chosen: tuple[int, dict[str, Any]] | None = None
    if candidates:
        if dtype is not None:
            for i, t in candidates:
                include = _dtype_items(_edits(t, "dtypes").get("include"))
                effective = set(include) or set(supported_dtypes)
                if dtype in effective:
                    chosen = (i, t)
                    break
        if chosen is None:
            for i, t in candidates:
                if not _edits(t, "dtypes"):
                    chosen = (i, t)
                    break
        if chosen is None:
            chosen = candidates[0]
    test = chosen[1] if chosen else {}
    test_where: Path_ = (*file_where, "tests", chosen[0]) if chosen else file_where
    include = _dtype_items(_edits(test, "dtypes").get("include"))
    exclude = _dtype_items(_edits(test, "dtypes").get("exclude"))

    def excluded(where: Path_, reason: str) -> FileDecision:
        # torch-spyre deletes the variant (never collected); we keep why, for `explain`.
        return FileDecision(
            Expectation.SKIP, reason, spec.line_ref(where), excluded=True, listed=bool(chosen)
        )

    # Disabling filters come before the mode.
    labels = test.get("labels") or []
    if (
        labels
        and test_type != "full"
        and not test_type.startswith("suite_")
        and (test_type not in labels)
    ):
        return excluded(
            (*test_where, "labels"), f"labels {labels} exclude TORCH_SPYRE_TEST_TYPE={test_type}"
        )
    op_item = supported_ops.get(op or "") or {}
    op_dtypes = _dtype_items(op_item.get("dtypes"))
    if dtype is not None:
        if dtype in exclude:
            index = list(exclude).index(dtype)
            return excluded(
                (*test_where, "edits", "dtypes", "exclude", index), f"dtype {dtype} excluded"
            )
        if (
            supported_dtypes
            and dtype not in supported_dtypes
            and dtype not in include
            and dtype not in op_dtypes
        ):
            return excluded(
                ("test_suite_config", "global", "supported_dtypes"),
                f"dtype {dtype} not in global.supported_dtypes",
            )
    if op is not None:
        # The op part of a test name is the OpInfo's formatted name (`div_floor_rounding`).
        shown = op_formatted or op
        excluded_ops = list(item_names(_edits(test, "ops").get("exclude")))
        for index, name in excluded_ops:
            if shown == name or shown.startswith(name + "_"):
                return excluded(
                    (*test_where, "edits", "ops", "exclude", index), f"op {shown} excluded"
                )
        included = [n for _, n in item_names(_edits(test, "ops").get("include"))]
        if "supported_ops" in glob and op not in supported_ops and op not in included:
            return excluded(
                ("test_suite_config", "global", "supported_ops"),
                f"op {op} not in global.supported_ops",
            )
        if dtype is not None and op_dtypes and dtype not in op_dtypes and dtype not in include:
            # torch-spyre overwrites the OpInfo's dtypes with the listed ones: this dtype of
            # the op is never generated.
            index = next(i for i, n in item_names(glob.get("supported_ops")) if n == op)
            return excluded(
                ("test_suite_config", "global", "supported_ops", index, "dtypes"),
                f"dtype {dtype} not in the dtypes global.supported_ops lists for {op}",
            )
    if chosen is None:
        mode = entry.get("unlisted_test_mode", "xfail")
        where: Path_ = (
            (*file_where, "unlisted_test_mode") if "unlisted_test_mode" in entry else file_where
        )
        reason = f"not listed; unlisted_test_mode {mode}"
        if mode == "skip":
            return excluded(where, reason)  # not part of the suite, as in torch-spyre
    else:
        mode = test.get("mode", "mandatory_success")
        where = test_where
        reason = test.get("reason") or _comment_free_reason(mode)
        if mode == "skip":
            return excluded(where, reason)
    expectation = MODES[mode]
    if expectation is Expectation.PASS:
        op_item = supported_ops.get(op or "") or {}
        forced = bool(op_item.get("force_xfail"))
        dtype_item = supported_dtypes.get(dtype or "") or {}
        forced_dtype = bool(dtype_item.get("force_xfail")) or bool(
            (include.get(dtype or "") or {}).get("force_xfail")
        )
        if forced or forced_dtype:
            expectation = Expectation.XFAIL
            reason = f"force_xfail on op {op}" if forced else f"force_xfail on dtype {dtype}"
    precision = None
    if dtype is not None:
        for source in (
            include.get(dtype),
            _dtype_items((supported_ops.get(op or "") or {}).get("dtypes")).get(dtype),
            supported_dtypes.get(dtype),
        ):
            if source and tolerance_of(source.get("precision")):
                precision = tolerance_of(source.get("precision"))
                break
    cpu_move: list[str] = []
    for _, t in candidates:
        for item in _edits(t, "functions").get("cpu_move") or ():
            if isinstance(item, dict) and item.get("name") not in cpu_move:
                cpu_move.append(item["name"])
    timeout = test.get("timeout_s", entry.get("timeout_s", root.get("timeout_s")))
    owners = tuple(test.get("owners") or entry.get("owners") or root.get("owners") or ())
    watch = tuple(
        dict.fromkeys(
            [*(root.get("watch") or ()), *(entry.get("watch") or ()), *(test.get("watch") or ())]
        )
    )
    return FileDecision(
        expectation=expectation,
        reason=reason,
        rule=spec.line_ref(where),
        precision=precision,
        cpu_move=tuple(cpu_move),
        tags=tuple(test.get("tags") or ()),
        no_grad=bool(test.get("no_grad")),
        timeout_s=timeout,
        owners=owners,
        watch=watch,
        listed=chosen is not None,
    )


def _named(items: Any, name: str) -> dict[str, Any]:
    for item in items or ():
        if isinstance(item, str) and item == name:
            return {"name": item}
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return {}


def _comment_free_reason(mode: str) -> str:
    return "" if mode == "mandatory_success" else f"listed with mode {mode}"


@dataclass(frozen=True)
class FileWidening:
    """What a file suite adds to what upstream's `@ops` tests generate, as torch-spyre's
    patchers do before a test is instantiated: `global.supported_ops[].dtypes` widen that
    op's dtypes and the test's `allowed_dtypes`; a test entry's `edits.dtypes.include` widens
    every op of the tests its names match, and their `allowed_dtypes`; its `edits.ops.include`
    adds op_db's OpInfos of those names to their `@ops` list (the RFC's meaning)."""

    op_dtypes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (OpInfo name, dtypes)
    test_dtypes: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()  # (names, dtypes)
    test_ops: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()  # (names, op names)

    def __bool__(self) -> bool:
        return bool(self.op_dtypes or self.test_dtypes or self.test_ops)

    def for_op(self, op: str) -> tuple[str, ...]:
        return next((d for name, d in self.op_dtypes if name == op), ())

    def for_test(self, member: str) -> tuple[str, ...]:
        """The union of the includes of every entry naming this member (torch-spyre unions
        the entries a name matches, exact and regex)."""
        return _union(self.test_dtypes, member)

    def ops_for_test(self, member: str) -> tuple[str, ...]:
        """The union of the op includes of every entry naming this member."""
        return _union(self.test_ops, member)


def _union(
    pairs: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...], member: str
) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for names, values in pairs:
        if any(_entry_matches({"names": list(names)}, member)):
            out.update(dict.fromkeys(values))
    return tuple(out)


def file_widening(spec: SpecFile, file_where: Path_) -> FileWidening:
    """The widening a file entry asks for (empty when it asks for none)."""
    entry = spec.get(file_where) or {}
    glob = (spec.get(("test_suite_config",)) or {}).get("global") or {}
    op_dtypes = []
    for _, name in item_names(glob.get("supported_ops")):
        dtypes = tuple(_dtype_items(_named(glob.get("supported_ops"), name).get("dtypes")))
        if dtypes:
            op_dtypes.append((name, dtypes))
    test_dtypes = []
    test_ops = []
    for test in entry.get("tests") or ():
        if not isinstance(test, dict):
            continue
        names = tuple(as_names(test.get("names")))
        dtypes = tuple(_dtype_items(_edits(test, "dtypes").get("include")))
        if dtypes:
            test_dtypes.append((names, dtypes))
        ops = tuple(n for _, n in item_names(_edits(test, "ops").get("include")))
        if ops:
            test_ops.append((names, ops))
    return FileWidening(tuple(op_dtypes), tuple(test_dtypes), tuple(test_ops))
