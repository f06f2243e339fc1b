"""Lint spec files: every problem of a file at once, as `file:line:col: message`.

Long on purpose: lint reports every problem of a file in one pass over the schema's sections,
each check a short function keyed to the YAML path it guards, so that `file:line:col` and
the message stay next to the rule they enforce.

Lint runs no code from the specs and never imports torch. Op and module names are checked
against `suites/data/known_names.json`, recorded from torch's test databases (refresh it with
`spyre-ci suites names --refresh` inside a torch environment).
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from suites.loader import (
    Path_,
    SpecError,
    SpecFile,
    as_names,
    is_expectations_file,
    item_names,
    load_spec,
    resolve_test_path,
    schema,
)

# Characters that make a torch-spyre test name a regular expression.
REGEX_CHARS = set("\\.^$*+?{}[]|()")


@dataclass(frozen=True, order=True)
class Problem:
    """One lint finding."""

    path: str
    line: int
    col: int
    message: str
    severity: str = "error"  # or "warning"

    def __str__(self) -> str:
        prefix = "" if self.severity == "error" else "warning: "
        return f"{self.path}:{self.line}:{self.col}: {prefix}{self.message}"


@dataclass(frozen=True)
class KnownNames:
    """Names in torch's test databases, for did-you-mean without importing torch."""

    torch_version: str
    op_db: frozenset[str]
    python_ref_db: frozenset[str]
    module_db: frozenset[str]

    def for_db(self, db: str) -> frozenset[str]:
        return {"op_db": self.op_db, "python_ref_db": self.python_ref_db}.get(db, self.module_db)


@cache
def known_names() -> KnownNames:
    """The recorded database names shipped with the package."""
    text = (resources.files("suites") / "data" / "known_names.json").read_text("utf-8")
    data = json.loads(text)
    return KnownNames(
        torch_version=data["torch_version"],
        op_db=frozenset(data["op_db"]),
        python_ref_db=frozenset(data["python_ref_db"]),
        module_db=frozenset(data["module_db"]),
    )


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    return _did_you_mean(word, tuple(sorted(choices)))


@lru_cache(maxsize=65536)
def _did_you_mean(word: str, choices: tuple[str, ...]) -> str:
    # difflib takes about 10 ms over op_db's names; a big spec repeats the same names.
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _describe(where: Path_) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in where]
    return "".join(parts).lstrip(".") or "the document"


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
        type(None): "empty (null)",
    }.get(type(value), type(value).__name__)


def _leaf_errors(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """For oneOf/anyOf, the most relevant branch's errors instead of 'is not valid under'."""
    if error.validator in ("oneOf", "anyOf") and error.context:
        # Prefer a branch whose type matched: it failed deeper, so its errors say more.
        by_branch: dict[int, list[jsonschema.ValidationError]] = {}
        for sub in error.context:
            by_branch.setdefault(sub.schema_path[0] if sub.schema_path else 0, []).append(sub)
        ranked = sorted(
            by_branch.values(),
            key=lambda errs: (
                any(e.validator == "type" and not e.path for e in errs),
                -max(len(e.absolute_path) for e in errs),
            ),
        )
        best = ranked[0]
        if all(e.validator == "type" and len(e.path) == 0 for e in best):
            return [error]
        out: list[jsonschema.ValidationError] = []
        for sub in best:
            out.extend(_leaf_errors(sub))
        return out
    return [error]


def _schema_problem(spec: SpecFile, error: jsonschema.ValidationError) -> list[Problem]:
    where: Path_ = tuple(error.absolute_path)
    path = str(spec.path)
    what = _describe(where)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        out = []
        for key in extra:
            line, col = spec.mark((*where, key), key=True)
            out.append(
                Problem(
                    path,
                    line,
                    col,
                    f"unknown key {key!r} in {what}{did_you_mean(key, allowed)}"
                    f" (allowed: {', '.join(allowed)})",
                )
            )
        return out
    line, col = spec.mark(where)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [Problem(path, line, col, f"{what}: missing required key {missing!r}")]
    if error.validator == "type":
        want = error.validator_value
        words = {
            "array": "a list",
            "object": "a mapping",
            "string": "a string",
            "number": "a number",
            "integer": "an integer",
            "boolean": "a boolean",
        }
        wants = [str(w) for w in (want if isinstance(want, list) else [want])]
        want_s = " or ".join(words.get(w, w) for w in wants)
        return [
            Problem(path, line, col, f"{what} must be {want_s}, got {_type_name(error.instance)}")
        ]
    if error.validator == "enum":
        choices = [str(c) for c in error.validator_value]
        hint = did_you_mean(str(error.instance), choices)
        return [
            Problem(
                path,
                line,
                col,
                f"{what}: {error.instance!r} is not one of {', '.join(choices)}{hint}",
            )
        ]
    if error.validator == "oneOf" and not where and isinstance(error.instance, dict):
        return [
            Problem(
                path,
                line,
                col,
                "a spec file has exactly one of 'test_suite_config' (a suite) or "
                "'expectations' (a generated expectations file) at its top level",
            )
        ]
    if error.validator == "anyOf" and isinstance(error.instance, dict):
        return [
            Problem(
                path,
                line,
                col,
                f"{what} needs 'files' (upstream test files) or 'opinfo' "
                "(templates over torch's test databases)",
            )
        ]
    return [Problem(path, line, col, f"{what}: {error.message}")]


@cache
def _validator() -> jsonschema.Draft202012Validator:
    """A validator of `schema()` with its local `$ref`s inlined.

    Resolving a `$ref` costs more than checking what it points to (a third of the time over
    a 5 MB spec). Only a `$ref` beside nothing but annotations (`description`) is replaced,
    by the very object it points to, so every error (validator, value, path, message) stays
    the same.
    """
    root = schema()
    defs = root.get("$defs", {})

    def inline(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [inline(n, seen) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if (
            isinstance(ref, str)
            and ref.startswith("#/$defs/")
            and all(k == "$ref" or k in _ANNOTATIONS for k in node)
            and ref[len("#/$defs/") :] in defs
            and ref not in seen
        ):
            return inline(defs[ref[len("#/$defs/") :]], (*seen, ref))
        return {
            k: v if k in ("enum", "const", "required") else inline(v, seen) for k, v in node.items()
        }

    return jsonschema.Draft202012Validator(inline(root, ()))


class _Unsure(Exception):
    """`_valid` meets a keyword or value it does not decide exactly: ask jsonschema."""


_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$defs", "title", "description", "examples", "default", "$comment"}
)
_TYPES: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _same(a: Any, b: Any) -> bool:
    """jsonschema's equality for scalars: booleans are not numbers, 1 == 1.0."""
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        raise _Unsure
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _number(a) and _number(b):
        return bool(a == b)
    return type(a) is type(b) and a == b


def _valid(instance: Any, node: Any) -> bool:
    """Whether `instance` is valid under the (inlined) schema `node`, for the keywords the
    spec schema uses, with jsonschema's Draft 2020-12 meaning; raises _Unsure otherwise.

    jsonschema spends about 15 us per value (a validator object for every subschema): most
    of a big spec's lint. A valid document needs no errors, so this answers first.
    """
    if node is True:
        return True
    if node is False:
        return False
    if not isinstance(instance, dict | list | str | int | float | bool) and instance is not None:
        raise _Unsure
    for key, want in node.items():
        if key in _ANNOTATIONS:
            continue
        if key == "type":
            names = want if isinstance(want, list) else [want]
            if not any(_TYPES[t](instance) for t in names):
                return False
        elif key == "properties":
            if isinstance(instance, dict):
                for name, sub in want.items():
                    if name in instance and not _valid(instance[name], sub):
                        return False
        elif key == "additionalProperties":
            if isinstance(instance, dict):
                known = node.get("properties", {})
                for name, value in instance.items():
                    if name not in known and not _valid(value, want):
                        return False
        elif key == "required":
            if isinstance(instance, dict) and any(k not in instance for k in want):
                return False
        elif key == "items":
            if isinstance(instance, list) and not all(_valid(v, want) for v in instance):
                return False
        elif key == "oneOf":
            if sum(1 for sub in want if _valid(instance, sub)) != 1:
                return False
        elif key == "anyOf":
            if not any(_valid(instance, sub) for sub in want):
                return False
        elif key == "enum":
            if not any(_same(instance, e) for e in want):
                return False
        elif key == "minLength":
            if isinstance(instance, str) and len(instance) < want:
                return False
        elif key == "minItems":
            if isinstance(instance, list) and len(instance) < want:
                return False
        elif key == "minimum":
            if _number(instance) and instance < want:
                return False
        elif key == "exclusiveMinimum":
            if _number(instance) and instance <= want:
                return False
        elif key == "pattern":
            if isinstance(instance, str) and not re.search(want, instance):
                return False
        else:  # $ref beside other keywords, or a keyword added to the schema later
            raise _Unsure
    return True


def schema_problems(spec: SpecFile) -> list[Problem]:
    """Problems the JSON Schema finds, mapped to lines."""
    validator = _validator()
    try:
        if _valid(spec.data, validator.schema):
            return []
    except (_Unsure, RecursionError):
        pass
    problems: list[Problem] = []
    for error in validator.iter_errors(spec.data):
        for leaf in _leaf_errors(error):
            problems.extend(_schema_problem(spec, leaf))
    return problems


def semantic_problems(spec: SpecFile, env: dict[str, str] | None = None) -> list[Problem]:
    """Checks beyond the schema: names, duplicates, regexes, referenced files."""
    out: list[Problem] = []
    path = str(spec.path)
    for where, (line, col) in spec.duplicate_keys:
        out.append(
            Problem(path, line, col, f"duplicate key {where[-1]!r} in {_describe(where[:-1])}")
        )
    root = spec.get(("test_suite_config",))
    if isinstance(spec.data, dict) and "expectations" in spec.data:
        seen: dict[str, int] = {}
        for i, rule in enumerate(spec.data.get("expectations") or ()):
            if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                if rule["id"] in seen:
                    line, col = spec.mark(("expectations", i, "id"))
                    first = spec.mark(("expectations", seen[rule["id"]], "id"))[0]
                    out.append(
                        Problem(
                            path, line, col, f"duplicate id {rule['id']!r} (first at line {first})"
                        )
                    )
                else:
                    seen[rule["id"]] = i
    if not isinstance(root, dict):
        return out
    base: Path_ = ("test_suite_config",)
    # files: torch-spyre entries.
    seen_paths: dict[str, int] = {}
    for fi, entry in enumerate(root.get("files") or ()):
        if not isinstance(entry, dict):
            continue
        fbase = (*base, "files", fi)
        raw = entry.get("path")
        if isinstance(raw, str):
            if raw in seen_paths:
                line, col = spec.mark((*fbase, "path"))
                out.append(Problem(path, line, col, f"duplicate file path {raw!r}"))
            seen_paths.setdefault(raw, fi)
            target, _missing = resolve_test_path(raw, spec.path, env)
            # An unset ${TORCH_ROOT} is not an error: the suite is reported unavailable.
            if target is not None and not target.exists():
                line, col = spec.mark((*fbase, "path"))
                out.append(Problem(path, line, col, f"test file {str(target)!r} does not exist"))
        names_seen: dict[str, Path_] = {}
        for ti, test in enumerate(entry.get("tests") or ()):
            if not isinstance(test, dict):
                continue
            tbase = (*fbase, "tests", ti)
            names = test.get("names")
            name_list = as_names(names)
            earlier: set[str] = set()
            for ni, name in enumerate(name_list):
                where = (*tbase, "names", ni) if isinstance(names, list) else (*tbase, "names")
                line, col = spec.mark(where)
                parts = name.split("::")
                if len(parts) > 2 or not all(parts):
                    out.append(
                        Problem(
                            path,
                            line,
                            col,
                            f"test name {name!r} must be 'Class::method' or 'method'",
                        )
                    )
                    continue
                method = parts[-1]
                if REGEX_CHARS & set(method):
                    try:
                        re.compile(method)
                    except re.error as exc:
                        out.append(
                            Problem(
                                path, line, col, f"test name {name!r} is not a valid regex: {exc}"
                            )
                        )
                # The same name twice in one entry is harmless (torch-spyre's own configs do it);
                # across entries it is the documented per-dtype choice.
                if name in earlier:
                    out.append(
                        Problem(
                            path,
                            line,
                            col,
                            f"duplicate test name {name!r} in this entry",
                            "warning",
                        )
                    )
                earlier.add(name)
                names_seen.setdefault(name, where)
            edits: dict[str, Any] = test["edits"] if isinstance(test.get("edits"), dict) else {}
            ops: dict[str, Any] = edits["ops"] if isinstance(edits.get("ops"), dict) else {}
            for key in ("include", "exclude"):
                for i, n in item_names(ops.get(key)):
                    _fix_single(spec, (*tbase, "edits", "ops", key, i, "name"), n, "op_db", out)
    glob: dict[str, Any] = root["global"] if isinstance(root.get("global"), dict) else {}
    # torch-spyre only warns about supported_ops that are not in op_db (Spyre kernel names).
    for key, db in (("supported_ops", "op_db"), ("supported_modules", "module_db")):
        for i, name in item_names(glob.get(key)):
            item = glob[key][i]
            where = (
                (*base, "global", key, i)
                if isinstance(item, str)
                else (*base, "global", key, i, "name")
            )
            _fix_single(spec, where, name, db, out)
    # opinfo: our extension, where an unknown name is an error.
    for oi, entry in enumerate(root.get("opinfo") or ()):
        if not isinstance(entry, dict) or not isinstance(entry.get("db"), str):
            continue
        obase = (*base, "opinfo", oi)
        db = entry["db"]
        selection = entry["ops"] if isinstance(entry.get("ops"), dict) else {}
        for key in ("include", "exclude"):
            for i, name in item_names(selection.get(key)):
                _fix_single(spec, (*obase, "ops", key, i, "name"), name, db, out, warn=False)
        if db == "module_db" and any(
            t
            in (
                "out",
                "noncontiguous_samples",
                "variant_consistency_eager",
                "errors",
                "compile",
                "backward",
                "compare_cpu",
                "numpy_ref",
                "python_ref",
            )
            for t in entry.get("templates") or ()
        ):
            line, col = spec.mark((*obase, "templates"))
            out.append(
                Problem(path, line, col, "module_db takes the 'module_forward' template only")
            )
        if db != "module_db" and "module_forward" in (entry.get("templates") or ()):
            line, col = spec.mark((*obase, "templates"))
            out.append(Problem(path, line, col, "'module_forward' applies to db: module_db only"))
        if db != "python_ref_db" and "python_ref" in (entry.get("templates") or ()):
            line, col = spec.mark((*obase, "templates"))
            out.append(Problem(path, line, col, "'python_ref' applies to db: python_ref_db only"))
        for ti, rule in enumerate(entry.get("tests") or ()):
            if not isinstance(rule, dict):
                continue
            rops = rule.get("ops")
            for ni, name in enumerate(as_names(rops)):
                where = (
                    (*obase, "tests", ti, "ops", ni)
                    if isinstance(rops, list)
                    else (*obase, "tests", ti, "ops")
                )
                _fix_single(spec, where, name, db, out, warn=False)
            if rule.get("mode") in ("xfail", "xfail_strict", "skip") and not rule.get("reason"):
                line, col = spec.mark((*obase, "tests", ti))
                out.append(
                    Problem(path, line, col, f"a {rule['mode']} rule needs a 'reason' (say why)")
                )
        exp = entry.get("expectations_file")
        if isinstance(exp, str):
            target = spec.path.parent / exp
            line, col = spec.mark((*obase, "expectations_file"))
            if not target.exists():
                out.append(
                    Problem(
                        path,
                        line,
                        col,
                        f"expectations file {exp!r} does not exist (looked for {target})",
                    )
                )
            elif not is_expectations_file(target):
                out.append(
                    Problem(
                        path,
                        line,
                        col,
                        f"expectations file {exp!r} must be named *.expectations.yaml",
                    )
                )
    return out


def _fix_single(
    spec: SpecFile, where: Path_, name: str, db: str, out: list[Problem], *, warn: bool = True
) -> None:
    message = _unknown_name(name, db)
    if message:
        line, col = spec.mark(where)
        out.append(Problem(str(spec.path), line, col, message, "warning" if warn else "error"))


@lru_cache(maxsize=65536)
def _unknown_name(name: str, db: str) -> str:
    """Why `name` is not in `db` (with a did-you-mean), or "" when it is."""
    known = known_names().for_db(db)
    bare = name[len("torch.") :] if db == "module_db" and name.startswith("torch.") else name
    ok = bool(fnmatch.filter(known, bare)) if any(c in bare for c in "*?[") else bare in known
    if ok:
        return ""
    kind = "module" if db == "module_db" else "op"
    return (
        f"unknown {kind} {name!r} (not in {db} of torch "
        f"{known_names().torch_version}){did_you_mean(bare, known)}"
    )


def lint_spec(spec: SpecFile, env: dict[str, str] | None = None) -> list[Problem]:
    """All problems of one parsed file, sorted by position."""
    problems = schema_problems(spec)
    try:
        problems.extend(semantic_problems(spec, env))
    except (TypeError, AttributeError, KeyError, IndexError):
        # The semantic checks read the structure the schema describes; a value of the wrong
        # type (`files: 4`) is already reported above, with its line.
        if not problems:
            raise
    return sorted(set(problems))


def lint_paths(paths: Sequence[Path], env: dict[str, str] | None = None) -> list[Problem]:
    """Lint files (and the expectations files they reference); suites must have unique names."""
    problems: list[Problem] = []
    suites: dict[str, Path] = {}
    todo = list(paths)
    done: set[Path] = set()
    while todo:
        path = todo.pop(0)
        if path.resolve() in done:
            continue
        done.add(path.resolve())
        try:
            spec = load_spec(path)
        except SpecError as exc:
            text = str(exc)
            file_, line, col, msg = _split_location(text)
            problems.append(Problem(file_, line, col, msg))
            continue
        file_problems = lint_spec(spec, env)
        problems.extend(file_problems)
        if isinstance(spec.data, dict) and "test_suite_config" in spec.data:
            name = spec.suite_name
            if name in suites:
                line, col = spec.mark(("test_suite_config", "name"))
                problems.append(
                    Problem(
                        str(path), line, col, f"duplicate suite name {name!r} (also {suites[name]})"
                    )
                )
            else:
                suites[name] = path
            entries = spec.get(("test_suite_config", "opinfo"))
            for entry in entries if isinstance(entries, list) else ():
                if isinstance(entry, dict) and isinstance(entry.get("expectations_file"), str):
                    target = path.parent / entry["expectations_file"]
                    if target.exists():
                        todo.append(target)
    return problems


def _split_location(text: str) -> tuple[str, int, int, str]:
    match = re.match(r"^(.*?):(\d+):(\d+): (.*)$", text, re.S)
    if not match:
        return "?", 1, 1, text
    return match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
