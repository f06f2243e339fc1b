"""What one upstream test is made of in its file: its own source and the file's definitions it
uses (helpers it calls, methods it calls on `self`, module-level names it reads), transitively.

Pure (text in, records out; no torch). A file-suite variant's fingerprint hashes these
sources, so an edit to one test changes only its variants' fingerprints (and those of the tests
that use an edited helper); the qualnames are what a change's line-level facts
(`selector.definitions`) are joined with to select exactly those variants.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from functools import lru_cache

_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Sources:
    """One test's sources: a digest and the in-file definitions it reaches."""

    digest: str
    qualnames: tuple[str, ...]  # `Class.test_x` first, then what it uses, sorted
    module_names: tuple[str, ...] = ()  # module-level assignments it reads (`_OPS`)


@dataclass(frozen=True)
class _File:
    functions: dict[str, ast.AST]  # qualname -> def (module functions, classes, methods)
    classes: dict[str, ast.ClassDef]
    assignments: dict[str, ast.AST]  # module-level name -> the statement that binds it


def _strip_docstrings(node: ast.AST) -> None:
    for inner in ast.walk(node):
        if isinstance(inner, _Def | ast.Module):
            body = inner.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                inner.body = body[1:] or [ast.Pass()]


@lru_cache(maxsize=64)
def _parse(text: str) -> _File:
    tree = ast.parse(text)
    _strip_docstrings(tree)
    functions: dict[str, ast.AST] = {}
    classes: dict[str, ast.ClassDef] = {}
    assignments: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
            functions[node.name] = node
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions[f"{node.name}.{item.name}"] = item
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        assignments[name.id] = node
    return _File(functions, classes, assignments)


def _class_chain(file: _File, cls: str) -> list[str]:
    """`cls` and its bases defined in the same file, in a depth-first order."""
    out: list[str] = []
    todo = [cls]
    while todo:
        name = todo.pop(0)
        if name in out or name not in file.classes:
            continue
        out.append(name)
        for base in file.classes[name].bases:
            if isinstance(base, ast.Name):
                todo.append(base.id)
    return out


def _uses(node: ast.AST, owner: str | None, file: _File) -> tuple[set[str], set[str]]:
    """In-file definitions (qualnames) and module-level assignments one definition uses."""
    defs: set[str] = set()
    names: set[str] = set()
    chain = _class_chain(file, owner) if owner else []
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
            if inner.id in file.functions:
                defs.add(inner.id)
            elif inner.id in file.assignments:
                names.add(inner.id)
        elif (
            isinstance(inner, ast.Attribute)
            and isinstance(inner.value, ast.Name)
            and inner.value.id in ("self", "cls")
        ):
            for cls in chain:
                if f"{cls}.{inner.attr}" in file.functions:
                    defs.add(f"{cls}.{inner.attr}")
                    break
    return defs, names


def sources_of(text: str, qualname: str) -> Sources | None:
    """The sources of the test `Class.method` (or a module-level `function`) in `text`;
    None when the file does not define it."""
    try:
        file = _parse(text)
    except SyntaxError:
        return None
    if qualname not in file.functions:
        return None
    seen: list[str] = []
    module_names: set[str] = set()
    todo = [qualname]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.append(name)
        node = file.functions[name]
        owner = name.split(".")[0] if "." in name else None
        if isinstance(node, ast.ClassDef):
            # A class used by name (a helper module, a base): its body is what it is.
            owner = node.name
        defs, names = _uses(node, owner, file)
        module_names |= names
        todo.extend(sorted(defs - set(seen)))
    # Module-level names read transitively through other module-level names (`_OPS` built
    # from `_NAMES`) count too.
    pending = sorted(module_names)
    while pending:
        name = pending.pop()
        defs, names = _uses(file.assignments[name], None, file)
        for extra in sorted(names - module_names):
            module_names.add(extra)
            pending.append(extra)
        for d in sorted(defs - set(seen)):
            seen.append(d)
    parts = [f"{q}\n{ast.unparse(file.functions[q])}" for q in seen]
    parts += [f"{n}\n{ast.unparse(file.assignments[n])}" for n in sorted(module_names)]
    digest = hashlib.sha256("\n\n".join(parts).encode("utf-8")).hexdigest()[:16]
    return Sources(digest, (seen[0], *sorted(seen[1:])), tuple(sorted(module_names)))


def body_digest(text: str, qualname: str) -> str | None:
    """Digest of one test as written in `text`, its own name and its class left out: the same
    body under a new name or in a renamed class has the same digest (a rename's evidence).
    None when the file does not define it."""
    try:
        file = _parse(text)
    except SyntaxError:
        return None
    node = file.functions.get(qualname)
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    # Unparse with the name replaced, on a copy (the parsed tree is cached).
    text = ast.unparse(node)
    header = "async def " if isinstance(node, ast.AsyncFunctionDef) else "def "
    text = text.replace(f"{header}{node.name}(", f"{header}_(", 1)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
