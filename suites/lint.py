"""Lint spec files: every problem of a file at once, as `file:line:col: message`.

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
from functools import cache
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
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _describe(where: Path_) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in where]
    return "".join(parts).lstrip(".") or "the document"


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean", int: "an integer", float: "a number", str: "a string",
        list: "a list", dict: "a mapping", type(None): "empty (null)",
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
            key=lambda errs: (any(e.validator == "type" and not e.path for e in errs),
                              -max(len(e.absolute_path) for e in errs)),
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
            out.append(Problem(path, line, col,
                               f"unknown key {key!r} in {what}{did_you_mean(key, allowed)}"
                               f" (allowed: {', '.join(allowed)})"))
        return out
    line, col = spec.mark(where)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [Problem(path, line, col, f"{what}: missing required key {missing!r}")]
    if error.validator == "type":
        want = error.validator_value
        words = {"array": "a list", "object": "a mapping", "string": "a string",
                 "number": "a number", "integer": "an integer", "boolean": "a boolean"}
        wants = [str(w) for w in (want if isinstance(want, list) else [want])]
        want_s = " or ".join(words.get(w, w) for w in wants)
        return [Problem(path, line, col,
                        f"{what} must be {want_s}, got {_type_name(error.instance)}")]
    if error.validator == "enum":
        choices = [str(c) for c in error.validator_value]
        hint = did_you_mean(str(error.instance), choices)
        return [Problem(path, line, col,
                        f"{what}: {error.instance!r} is not one of {', '.join(choices)}{hint}")]
    if error.validator == "oneOf" and not where and isinstance(error.instance, dict):
        return [Problem(path, line, col,
                        "a spec file has exactly one of 'test_suite_config' (a suite) or "
                        "'expectations' (a generated expectations file) at its top level")]
    if error.validator == "anyOf" and isinstance(error.instance, dict):
        return [Problem(path, line, col,
                        f"{what} needs 'files' (upstream test files) or 'opinfo' "
                        "(templates over torch's test databases)")]
    return [Problem(path, line, col, f"{what}: {error.message}")]


def schema_problems(spec: SpecFile) -> list[Problem]:
    """Problems the JSON Schema finds, mapped to lines."""
    validator = jsonschema.Draft202012Validator(schema())
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
        out.append(Problem(path, line, col,
                           f"duplicate key {where[-1]!r} in {_describe(where[:-1])}"))
    root = spec.get(("test_suite_config",))
    if isinstance(spec.data, dict) and "expectations" in spec.data:
        seen: dict[str, int] = {}
        for i, rule in enumerate(spec.data.get("expectations") or ()):
            if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                if rule["id"] in seen:
                    line, col = spec.mark(("expectations", i, "id"))
                    first = spec.mark(("expectations", seen[rule["id"]], "id"))[0]
                    out.append(Problem(path, line, col,
                                       f"duplicate id {rule['id']!r} (first at line {first})"))
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
            for ni, name in enumerate(name_list):
                where = (*tbase, "names", ni) if isinstance(names, list) else (*tbase, "names")
                line, col = spec.mark(where)
                parts = name.split("::")
                if len(parts) > 2 or not all(parts):
                    out.append(Problem(path, line, col,
                                       f"test name {name!r} must be 'Class::method' or 'method'"))
                    continue
                method = parts[-1]
                if REGEX_CHARS & set(method):
                    try:
                        re.compile(method)
                    except re.error as exc:
                        out.append(Problem(path, line, col,
                                           f"test name {name!r} is not a valid regex: {exc}"))
                # The same name twice in one entry is harmless (torch-spyre's own configs do it);
                # across entries it is the documented per-dtype choice.
                if name in name_list[:ni]:
                    out.append(Problem(path, line, col,
                                       f"duplicate test name {name!r} in this entry", "warning"))
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
            where = (*base, "global", key, i) if isinstance(item, str) else (
                *base, "global", key, i, "name")
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
            t in ("out", "noncontiguous_samples", "variant_consistency_eager", "errors", "compile",
                  "backward", "compare_cpu") for t in entry.get("templates") or ()):
            line, col = spec.mark((*obase, "templates"))
            out.append(Problem(path, line, col,
                               "module_db takes the 'module_forward' template only"))
        if db != "module_db" and "module_forward" in (entry.get("templates") or ()):
            line, col = spec.mark((*obase, "templates"))
            out.append(Problem(path, line, col,
                               "'module_forward' applies to db: module_db only"))
        for ti, rule in enumerate(entry.get("tests") or ()):
            if not isinstance(rule, dict):
                continue
            rops = rule.get("ops")
            for ni, name in enumerate(as_names(rops)):
                where = (*obase, "tests", ti, "ops", ni) if isinstance(rops, list) else (
                    *obase, "tests", ti, "ops")
                _fix_single(spec, where, name, db, out, warn=False)
            if rule.get("mode") in ("xfail", "xfail_strict", "skip") and not rule.get("reason"):
                line, col = spec.mark((*obase, "tests", ti))
                out.append(Problem(path, line, col,
                                   f"a {rule['mode']} rule needs a 'reason' (say why)"))
        exp = entry.get("expectations_file")
        if isinstance(exp, str):
            target = spec.path.parent / exp
            line, col = spec.mark((*obase, "expectations_file"))
            if not target.exists():
                out.append(Problem(path, line, col, f"expectations file {exp!r} does not exist "
                                   f"(looked for {target})"))
            elif not is_expectations_file(target):
                out.append(Problem(path, line, col,
                                   f"expectations file {exp!r} must be named *.expectations.yaml"))
    return out


def _fix_single(
    spec: SpecFile, where: Path_, name: str, db: str, out: list[Problem], *, warn: bool = True
) -> None:
    known = known_names().for_db(db)
    bare = name[len("torch."):] if db == "module_db" and name.startswith("torch.") else name
    ok = bool(fnmatch.filter(known, bare)) if any(c in bare for c in "*?[") else bare in known
    if not ok:
        line, col = spec.mark(where)
        kind = "module" if db == "module_db" else "op"
        out.append(Problem(str(spec.path), line, col,
                           f"unknown {kind} {name!r} (not in {db} of torch "
                           f"{known_names().torch_version}){did_you_mean(bare, known)}",
                           "warning" if warn else "error"))


def lint_spec(spec: SpecFile, env: dict[str, str] | None = None) -> list[Problem]:
    """All problems of one parsed file, sorted by position."""
    problems = schema_problems(spec)
    problems.extend(semantic_problems(spec, env))
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
                problems.append(Problem(str(path), line, col,
                                        f"duplicate suite name {name!r} (also {suites[name]})"))
            else:
                suites[name] = path
            for entry in spec.get(("test_suite_config", "opinfo")) or ():
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
