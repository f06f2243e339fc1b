"""Expansion: spec files -> variant tests with expectations, fingerprints and run details.

Long on purpose: expansion is one pass that torch-spyre's semantics define in order (suites,
their files, classes, tests, dtypes, edits, rules) over torch's own databases, and the
stages share the same loaded modules and caches; torch-spyre's framework keeps the same steps
in one place.

Imports torch (lazily, inside the functions): it enumerates torch's test databases and, for
file suites, imports upstream test files.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from suites.backend import device_name, our_devices
from suites.lint import lint_paths
from suites.loader import (
    Path_,
    SpecError,
    SpecFile,
    load_spec,
    resolve_test_path,
    spec_paths,
)
from suites.model import Expectation, Variant, variant_id
from suites.rules import (
    MODES,
    Decision,
    FileWidening,
    Rule,
    Tolerance,
    VariantKey,
    canonical_dtype,
    decide,
    decide_file_variant,
    expectation_rules,
    file_widening,
    spec_rules,
)
from suites.template_names import TEMPLATE_UPSTREAM

DTYPE_NONE = "none"


@dataclass(frozen=True)
class Planned:
    """A variant plus what the runner needs to execute it (not serialised)."""

    variant: Variant
    kind: str  # "opinfo" | "file"
    db: str = ""
    info: Any = None  # OpInfo / ModuleInfo
    dtype: Any = None  # torch.dtype or None
    precision: Tolerance | None = None
    max_samples: int | None = None
    # File suites.
    file: Path | None = None
    device_class: str = ""
    method: str = ""
    cpu_move: tuple[str, ...] = ()
    no_grad: bool = False
    tags: tuple[str, ...] = ()
    widening: FileWidening = field(default_factory=FileWidening)
    matched: tuple[Rule, ...] = field(default=(), compare=False)


@dataclass
class Expansion:
    """Everything the loaded suites expand to, and the suites that cannot run here."""

    planned: list[Planned] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    # File-suite variants torch-spyre never generates (disabled, or skipped: deleted from the
    # test class), by id, with the rule that excluded each; not run, not in the Inventory.
    excluded: dict[str, Variant] = field(default_factory=dict)
    # File suites: every enumerated upstream test (excluded ones too) as rename matching
    # sees it (`suites.renames`), by variant id.
    records: dict[str, Any] = field(default_factory=dict)

    @property
    def variants(self) -> list[Variant]:
        return [p.variant for p in self.planned]

    def by_id(self) -> dict[str, Planned]:
        return {p.variant.id: p for p in self.planned}


def load_suites(
    paths: Iterable[str | Path] | None = None, env: dict[str, str] | None = None
) -> list[SpecFile]:
    """Load and lint suites (bundled by default); raise SpecError listing every error."""
    files = spec_paths(paths)
    problems = [p for p in lint_paths(files, env) if p.severity == "error"]
    if problems:
        raise SpecError("\n".join(str(p) for p in problems))
    return [load_spec(f) for f in files]


def load_suites_each(
    paths: Iterable[str | Path] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[list[SpecFile], dict[str, str]]:
    """Load and lint each suite on its own: the suites that lint, and the refused spec files
    (file -> its errors, `file:line:col: message` lines). One bad spec refuses only itself;
    a suite whose name an earlier suite has is refused too."""
    loaded: list[SpecFile] = []
    refused: dict[str, str] = {}
    names: dict[str, Path] = {}
    for path in spec_paths(paths):
        problems = [p for p in lint_paths([path], env) if p.severity == "error"]
        if not problems:
            try:
                spec = load_spec(path)
            except SpecError as exc:  # changed since it was linted
                problems_text = str(exc)
            else:
                name = spec.suite_name
                if (
                    name not in names
                    or not isinstance(spec.data, dict)
                    or ("test_suite_config" not in spec.data)
                ):
                    if isinstance(spec.data, dict) and "test_suite_config" in spec.data:
                        names[name] = path
                    loaded.append(spec)
                    continue
                problems_text = (
                    f"{spec.location(('test_suite_config', 'name'))}: duplicate "
                    f"suite name {name!r} (also {names[name]})"
                )
        else:
            problems_text = "\n".join(str(p) for p in problems)
        refused[str(path)] = problems_text
    return loaded, refused


def expand(
    specs: Sequence[SpecFile],
    *,
    suite: str | None = None,
    env: dict[str, str] | None = None,
    keep_trail: bool = False,
    subjects: Mapping[str, Collection[str]] | None = None,
    fingerprints: bool = True,
) -> Expansion:
    """Expand suites into variants (only `suite` when given), in a stable order.

    `subjects` (suite name -> subject names) expands only those OpInfo subjects of the
    suites it names: a test process asked for a few ids builds their variants, not the
    thousands of the whole database. Each subject's variants depend on that subject and the
    suite's rules alone, so they come out as in the whole expansion. File suites expand whole.

    `fingerprints=False` (a test process: it runs variants and never compares them) leaves
    each variant's `fingerprint` empty and everything else as it is; hashing the OpInfo
    definitions' source is most of the cost of expanding a whole database.
    """
    result = Expansion()
    for spec in specs:
        if suite is not None and spec.suite_name != suite:
            continue
        root = spec.get(("test_suite_config",)) or {}
        only = None if subjects is None else subjects.get(spec.suite_name)
        for oi, _ in enumerate(root.get("opinfo") or ()):
            result.planned.extend(
                _expand_opinfo(
                    spec, ("test_suite_config", "opinfo", oi), keep_trail, only, fingerprints
                )
            )
        for fi, _ in enumerate(root.get("files") or ()):
            _expand_file(spec, ("test_suite_config", "files", fi), env, result, fingerprints)
    seen: dict[str, Planned] = {}
    for planned in result.planned:
        vid = planned.variant.id
        if vid in seen:
            raise SpecError(
                f"{planned.variant.rule or seen[vid].variant.rule}: duplicate "
                f"variant id {vid!r}; give the suites distinct names"
            )
        seen[vid] = planned
    return result


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, canonical_dtype(name))


def _select(subjects: Sequence[Any], entry: dict[str, Any]) -> list[Any]:
    ops = entry.get("ops") or {}
    include = [i["name"] for i in ops.get("include") or ()] or ["*"]
    exclude = [i["name"] for i in ops.get("exclude") or ()]

    def hit(subject: Any, patterns: list[str]) -> bool:
        base = getattr(subject.info, "name", subject.name)
        names = {subject.name, base, base.removeprefix("torch.")}
        return any(
            fnmatch.fnmatchcase(n, p.removeprefix("torch.") if p.startswith("torch.nn") else p)
            for n in names
            for p in patterns
        )

    return [s for s in subjects if hit(s, include) and not hit(s, exclude)]


def _decorator_rules(
    info: Any, template: str, dtype: Any, dtype_name: str, subject: str, source: str
) -> tuple[list[Rule], list[Any]]:
    """OpInfo/ModuleInfo decorators for one upstream test as rules, and the raw decorators
    (with the tolerance decorators of the tests `tolerance_tests` adds, for fingerprints)."""
    from suites.fingerprint import applicable_decorators, skip_reason
    from suites.templates import tolerance_tests

    cls, test = TEMPLATE_UPSTREAM[template]
    decorators = applicable_decorators(info, cls, test, device_name(), dtype)
    rules: list[Rule] = []
    one = {"templates": (template,), "ops": (subject,), "dtypes": (dtype_name,)}
    for dec in decorators:
        qualname = getattr(dec, "__qualname__", type(dec).__qualname__)
        if qualname == "skip.<locals>.decorator":
            reason = skip_reason(dec) or "skipped"
            rules.append(
                Rule(
                    f"{source} -> {cls}.{test} skip",
                    "opinfo",
                    mode=Expectation.SKIP,
                    reason=f"OpInfo skip: {reason}",
                    **one,  # type: ignore[arg-type]
                )
            )
        elif qualname == "expectedFailure" or type(dec).__name__ == "expectedFailure":
            device = getattr(dec, "device_type", None)
            if device not in our_devices():
                continue
            rules.append(
                Rule(
                    f"{source} -> {cls}.{test} expectedFailure",
                    "opinfo",
                    mode=Expectation.XFAIL,
                    reason="OpInfo expectedFailure",
                    **one,  # type: ignore[arg-type]
                )
            )
        elif type(dec).__name__ in ("onlyCUDA", "onlyCPU", "onlyNativeDeviceTypes", "onlyOn"):
            rules.append(
                Rule(
                    f"{source} -> {cls}.{test} {type(dec).__name__}",
                    "opinfo",
                    mode=Expectation.SKIP,
                    reason=f"OpInfo {type(dec).__name__}: not for this device",
                    **one,  # type: ignore[arg-type]
                )
            )
    seen = {id(d) for d in decorators}
    overrides: dict[int, tuple[str, Any]] = {}  # by identity, in the order upstream applies them
    for tcls, ttest in tolerance_tests(template, info):
        found = (
            decorators
            if (tcls, ttest) == (cls, test)
            else applicable_decorators(info, tcls, ttest, device_name(), dtype)
        )
        for dec in found:
            if type(dec).__name__ in _TOLERANCE_DECORATORS:
                overrides.setdefault(id(dec), (f"{tcls}.{ttest}", dec))
                if id(dec) not in seen:
                    seen.add(id(dec))
                    decorators.append(dec)
    chosen = _tolerance_override(list(overrides.values()), dtype)
    if chosen is not None:
        where, kind, tol = chosen
        rules.append(
            Rule(f"{source} -> {where} {kind}", "opinfo", precision=tol, **one)  # type: ignore[arg-type]
        )
    return rules, decorators


_TOLERANCE_DECORATORS = ("toleranceOverride", "precisionOverride")


def _tolerance_override(
    overrides: Sequence[tuple[str, Any]], dtype: Any
) -> tuple[str, str, Tolerance] | None:
    """The tolerance upstream's test runs at for `dtype`, as common_device_type sets it: a
    toleranceOverride naming the dtype has priority over a precisionOverride (atol only); of
    each kind the last applied (listed) wins."""
    if dtype is None:
        return None
    by_kind: dict[str, tuple[str, str, Tolerance]] = {}
    for where, dec in overrides:
        kind = type(dec).__name__
        value = dec.d.get(dtype)
        if value is None:
            continue
        tol = (
            Tolerance(float(value.atol), float(value.rtol))
            if kind == "toleranceOverride"
            else Tolerance(float(value), None)
        )
        by_kind[kind] = (where, kind, tol)
    return by_kind.get("toleranceOverride") or by_kind.get("precisionOverride")


def _expectations_file(spec: SpecFile, entry: dict[str, Any]) -> list[Rule]:
    name = entry.get("expectations_file")
    if not name:
        return []
    return expectation_rules(load_spec(spec.path.parent / name))


def _expand_opinfo(
    spec: SpecFile,
    where: Path_,
    keep_trail: bool,
    only: Collection[str] | None = None,
    fingerprints: bool = True,
) -> list[Planned]:
    from suites.databases import family_of, load_db
    from suites.fingerprint import callable_digest, definition_digest, variant_fingerprint
    from suites.templates import applies, get_template

    entry = spec.get(where)
    root = spec.get(("test_suite_config",)) or {}
    suite = spec.suite_name
    db = entry["db"]
    dtypes = [canonical_dtype(d) for d in entry.get("dtypes") or ["float32"]]
    default_mode = entry.get("unlisted_test_mode", "mandatory_success")
    default_rule = Rule(
        source=spec.line_ref(where),
        kind="default",
        mode=MODES[default_mode],
        reason="" if default_mode == "mandatory_success" else f"unlisted_test_mode {default_mode}",
        timeout_s=entry.get("timeout_s", root.get("timeout_s")),
        owners=tuple(entry.get("owners") or root.get("owners") or ()),
        watch=tuple(dict.fromkeys([*(root.get("watch") or ()), *(entry.get("watch") or ())])),
    )
    use_decorators = entry.get("opinfo_decorators", True)
    rules = spec_rules(spec, where)
    exp_rules = _expectations_file(spec, entry)
    exp_by_id = {
        r.id_glob: r for r in exp_rules if r.id_glob and not any(c in r.id_glob for c in "*?[")
    }
    by_id = {id(r) for r in exp_by_id.values()}  # by identity: rules compare field by field
    exp_globs = [r for r in exp_rules if id(r) not in by_id]
    decorator_source = (
        spec.line_ref((*where, "opinfo_decorators"))
        if ("opinfo_decorators" in entry)
        else spec.line_ref((*where, "db"))
    )
    subjects = _select(load_db(db), entry)
    if only is not None:
        subjects = [s for s in subjects if s.name in only]
    out: list[Planned] = []
    for template in entry["templates"]:
        template_digest = callable_digest(get_template(template)) if fingerprints else ""
        template_dtypes = [None] if template == "errors" else dtypes
        for subject in subjects:
            info = subject.info
            definition = definition_digest(info) if fingerprints else ""
            base_name = str(getattr(info, "name", subject.name))
            for dtype_name in template_dtypes:
                dtype = None if dtype_name is None else _torch_dtype(dtype_name)
                if not applies(template, info, dtype):
                    continue
                dname = dtype_name or DTYPE_NONE
                vid = variant_id(suite, template, subject.name, dname)
                key = VariantKey(vid, template, subject.name, base_name, dname)
                dec_rules, decorators = (
                    _decorator_rules(
                        info,
                        template,
                        dtype,
                        dname,
                        subject.name,
                        f"{decorator_source} ({db} {subject.name})",
                    )
                    if use_decorators
                    else ([], [])
                )
                chain = [default_rule, *dec_rules, *rules, *exp_globs]
                if vid in exp_by_id:
                    chain.append(exp_by_id[vid])
                decision: Decision = decide(key, chain, keep_trail=keep_trail)
                fingerprint = (
                    variant_fingerprint(
                        definition,
                        decorators,
                        template_digest,
                        dname,
                        str(decision.expectation),
                        repr(decision.precision),
                    )
                    if fingerprints
                    else ""
                )
                variant = Variant(
                    id=vid,
                    suite=suite,
                    template=template,
                    subject=subject.name,
                    dtype=dname,
                    expectation=decision.expectation,
                    reason=decision.reason,
                    rule=decision.rule,
                    fingerprint=fingerprint,
                    family=family_of(db, subject.name, info),
                    owners=decision.owners,
                    watch=decision.watch,
                    timeout_s=decision.timeout_s,
                )
                out.append(
                    Planned(
                        variant=variant,
                        kind="opinfo",
                        db=db,
                        info=info,
                        dtype=dtype,
                        precision=decision.precision,
                        max_samples=entry.get("max_samples"),
                        matched=decision.matched,
                    )
                )
    return out


def file_suite_unavailable(
    spec: SpecFile, where: Path_, env: dict[str, str] | None = None
) -> tuple[Path | None, str]:
    """The resolved test file, or why this file suite cannot run here (no torch needed)."""
    raw = spec.get((*where, "path"))
    path, missing = resolve_test_path(raw, spec.path, env)
    if path is None:
        names = ", ".join(f"${{{m}}}" for m in missing)
        return None, (
            f"{spec.location((*where, 'path'))}: test file {raw!r} needs {names}, "
            f"which is unset; set {missing[0]} to a PyTorch source checkout to run "
            "this suite"
        )
    if not path.exists():
        return None, f"{spec.location((*where, 'path'))}: test file {str(path)!r} does not exist"
    return path, ""


def _expand_file(
    spec: SpecFile,
    where: Path_,
    env: dict[str, str] | None,
    result: Expansion,
    fingerprints: bool = True,
) -> None:
    from suites.databases import family_of
    from suites.fingerprint import definition_digest, variant_fingerprint
    from suites.upstream import UpstreamError, enumerate_tests

    suite = spec.suite_name
    path, why = file_suite_unavailable(spec, where, env)
    if path is None:
        result.unavailable[suite] = _join(result.unavailable.get(suite), why)
        return
    test_type = (env if env is not None else os.environ).get("TORCH_SPYRE_TEST_TYPE", "full")
    template = path.stem
    try:
        widening = file_widening(spec, where)
        tests = list(enumerate_tests(path, widening))
    except UpstreamError as exc:
        result.unavailable[suite] = _join(result.unavailable.get(suite), str(exc))
        return
    repo_path = upstream_repo_path(spec.get((*where, "path")), path, env)
    text = path.read_text(encoding="utf-8", errors="replace")
    for test in tests:
        # torch-spyre's rules see the dtype its name shows (one word of a tuple of dtypes,
        # `bool` of `test_gather_bool`); the id keeps the whole dtype part.
        decision = decide_file_variant(
            spec,
            where,
            test.base_name,
            test.op_name,
            test.spyre_dtype,
            test_type=test_type,
            op_formatted=test.op_formatted,
        )
        if not decision.listed and test.written_name:
            # Our addition: an entry naming the test as written governs its parametrized
            # members too (torch-spyre lists members of injected parametrized classes).
            by_written = decide_file_variant(
                spec,
                where,
                test.written_name,
                test.op_name,
                test.spyre_dtype,
                test_type=test_type,
                op_formatted=test.op_formatted,
            )
            if by_written.listed:
                decision = by_written
        dname = test.dtype or DTYPE_NONE
        vid = variant_id(suite, template, test.subject, dname)
        result.records[vid] = _file_record(vid, suite, template, text, test, decision)
        if decision.excluded:
            result.excluded[vid] = Variant(
                id=vid,
                suite=suite,
                template=template,
                subject=test.subject,
                dtype=dname,
                expectation=Expectation.SKIP,
                reason=decision.reason,
                rule=decision.rule,
            )
            continue
        source_digest, sources = _test_sources(text, repo_path, test)
        fingerprint = ""
        if fingerprints:
            extra = [definition_digest(test.op)] if test.op is not None else []
            fingerprint = variant_fingerprint(
                source_digest,
                [],
                str(decision.expectation),
                repr(decision.precision),
                ",".join(decision.cpu_move),
                str(decision.no_grad),
                *extra,
            )
        family = family_of("op_db", test.op_name) if test.op_name else test.base_name
        variant = Variant(
            id=vid,
            suite=suite,
            template=template,
            subject=test.subject,
            dtype=dname,
            expectation=decision.expectation,
            reason=decision.reason,
            rule=decision.rule,
            fingerprint=fingerprint,
            family=family,
            owners=decision.owners,
            watch=decision.watch,
            timeout_s=decision.timeout_s,
            sources=sources,
        )
        result.planned.append(
            Planned(
                variant=variant,
                kind="file",
                precision=decision.precision,
                file=path,
                device_class=test.device_class,
                method=test.method,
                cpu_move=decision.cpu_move,
                no_grad=decision.no_grad,
                tags=decision.tags,
                widening=widening,
            )
        )


def _file_record(vid: str, suite: str, template: str, text: str, test: Any, decision: Any) -> Any:
    """The rename-matching record of one upstream test (`suites.renames.RenameRecord`)."""
    from suites.renames import RenameRecord
    from suites.sources import body_digest

    fn = test.source or test.function
    qualname = getattr(fn, "__qualname__", "") or f"{test.generic_class}.{test.base_name}"
    body = body_digest(text, qualname) or ""
    if body and test.op is not None:
        body = f"{body}+{unnamed_definition_digest(test.op)}"
    return RenameRecord(
        id=vid,
        suite=suite,
        template=template,
        subject=test.subject,
        dtype=test.dtype or DTYPE_NONE,
        test=f"{test.generic_class}::{test.base_name}",
        body=body,
        op=test.op_formatted or test.op_name or "",
        aliases=_alias_names(test.op),
        listed=bool(decision.listed),
        expectation=str(decision.expectation),
        rule=decision.rule,
    )


def _alias_names(info: Any) -> tuple[str, ...]:
    return tuple(str(getattr(a, "name", a)) for a in getattr(info, "aliases", None) or ())


_UNNAMED: dict[int, tuple[Any, str]] = {}


def unnamed_definition_digest(info: Any) -> str:
    """An OpInfo's definition digest without the fields that only name it: a renamed OpInfo
    with nothing else changed keeps it."""
    import hashlib

    from suites.fingerprint import definition_text
    from suites.renames import NAME_FIELDS

    cached = _UNNAMED.get(id(info))
    if cached is None or cached[0] is not info:
        lines = [
            line
            for line in definition_text(info).split("\n")
            if line.partition("=")[0] not in NAME_FIELDS
        ]
        digest = hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]
        cached = (info, digest)
        _UNNAMED[id(info)] = cached
    return cached[1]


def rename_records(expansion: Expansion) -> list[Any]:
    """Every variant as rename matching sees it (`suites.renames.RenameRecord`): the file
    suites' upstream tests (excluded ones too) and the OpInfo suites' variants, whose body is
    the template and the OpInfo's definition without its names."""
    from suites.renames import RenameRecord

    out = list(expansion.records.values())
    for planned in expansion.planned:
        v = planned.variant
        if planned.kind != "opinfo" or planned.info is None:
            continue
        out.append(
            RenameRecord(
                id=v.id,
                suite=v.suite,
                template=v.template,
                subject=v.subject,
                dtype=v.dtype,
                test=v.template,
                body=f"{v.template}+{unnamed_definition_digest(planned.info)}",
                op=v.subject,
                aliases=_alias_names(planned.info),
                listed=True,
                expectation=str(v.expectation),
                rule=v.rule,
            )
        )
    return sorted(out, key=lambda r: r.id)


def upstream_repo_path(raw: Any, path: Path, env: dict[str, str] | None = None) -> str:
    """A test file's path in the PyTorch repository (`test/test_torch.py`), as changes name it."""
    token = "${TORCH_ROOT}/"
    if isinstance(raw, str) and raw.startswith(token):
        return raw[len(token) :]
    root = (env if env is not None else os.environ).get("TORCH_ROOT")
    if root:
        try:
            return path.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            pass
    return f"{path.parent.name}/{path.name}"


def _test_sources(text: str, repo_path: str, test: Any) -> tuple[str, tuple[str, ...]]:
    """Digest of the test's own sources and its `path:qualname` list (see suites.sources)."""
    from suites.fingerprint import callable_digest
    from suites.sources import sources_of

    fn = test.source or test.function
    qualname = getattr(fn, "__qualname__", "") or f"{test.generic_class}.{test.base_name}"
    found = sources_of(text, qualname)
    if found is not None:
        return found.digest, tuple(f"{repo_path}:{q}" for q in found.qualnames)
    try:
        digest = callable_digest(fn)
    except (AttributeError, TypeError):
        digest = test.method
    return digest, (f"{repo_path}:{qualname}",)


def _join(old: str | None, new: str) -> str:
    return new if not old else f"{old}; {new}"


def with_expectation(planned: Planned, expectation: Expectation, reason: str) -> Planned:
    return replace(
        planned, variant=replace(planned.variant, expectation=expectation, reason=reason)
    )
