"""Line-level change facts: which definitions contain the lines a patch changes.

Hunk headers (`@@ ... @@ def glu(`) are a hint some diff tools print and others do not
(`diff -u`, GitHub's compare patches, other diff algorithms). The source of truth is the
file itself: given the old side's text (the installed torch of the base version, or the file
at the base sha), every changed line range is mapped to the definitions that contain it, on
the old side (removed lines, insertion points) and on the new side (added lines, in the text
the patch produces). The hunks are placed as the change overlay applies them
(`selector.patches`): a patch the overlay would refuse is not located. Pure: text in, records
out.

* Python, by `ast`: functions and methods by their `co_qualname` spelling
  (`Outer.<locals>.inner`, `Tensor.__rsub__`), classes, and OpInfo-style entries
  (`OpInfo('glu', ...)`, `UnaryUfuncInfo(...)`, `ModuleInfo(torch.nn.ELU, ...)`): the call
  whose arguments hold the line names the op.
* C++, by brace structure: the function (or `TORCH_IMPL_FUNC(x)` / dispatch registration)
  whose body or head holds the line.
* YAML (`native_functions.yaml`, `derivatives.yaml`): the `- func:` / `- name:` entry.

A line that no definition holds is `module` level: it runs at import.

The definitions of a text are read once per process, and, given a store (`keep_with`: the
workflows keep them in their cache folder), once per text: a 1 MB OpInfo database parses in
half a second, `torch/nn/functional.py` in 0.06 s, and every plan of a change reads the same
old side again.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Protocol

from selector.diff import FilePatch, split_lines
from selector.patches import patched

# What a changed line is part of, innermost first.
FUNCTION = "function"  # a function or method body: its code object runs when called
SIGNATURE = "signature"  # decorators, defaults, the `def` line: evaluated at import
CLASS = "class"  # a class body outside its methods
ENTRY = "entry"  # an OpInfo/ModuleInfo call's arguments (the test database)
MODULE = "module"  # top-level code
CPP_FUNCTION = "cpp-function"
YAML_ENTRY = "yaml-entry"
DOCSTRING = "docstring"  # a module's, class's or function's docstring
STRING = "string"  # another string constant over several lines (its `#` lines are text)
COSMETIC = "cosmetic"  # a blank or comment line (Python): no code changes with it

_CPP_SUFFIXES = (".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".mm", ".c")
_YAML_NAMES = ("native_functions.yaml", "tags.yaml", "derivatives.yaml")


@dataclass(frozen=True)
class Located:
    """One definition a changed line belongs to."""

    kind: str  # FUNCTION | SIGNATURE | CLASS | ENTRY | MODULE | CPP_FUNCTION | YAML_ENTRY
    name: str  # qualname (Python), entry name (OpInfo/YAML), symbol (C++); "" for MODULE
    side: str  # "old" | "new"
    line: int  # the changed line's number on that side
    start: int = 0  # the definition's first line (decorators included)
    end: int = 0
    # A memoized function (`functools.cache`, `lru_cache`, ...): its body runs once per
    # process, so a trace credits it to whichever variant called it first.
    cached: bool = False


@dataclass(frozen=True)
class _Span:
    kind: str
    name: str
    start: int
    end: int
    body_start: int = 0  # functions: first line of the body
    cached: bool = False


def can_locate(path: str) -> bool:
    """Whether this module understands the file's structure."""
    name = PurePosixPath(path).name
    return path.endswith((".py", *_CPP_SUFFIXES)) or name in _YAML_NAMES


def locate(patch: FilePatch, old_source: str) -> list[Located] | None:
    """Every definition each changed line belongs to, innermost first per line; None when
    the file's structure cannot be read (unknown type, a syntax error on the old side, or a
    patch that does not apply to `old_source`)."""
    if not can_locate(patch.path):
        return None
    old_spans = _spans(patch.path, old_source)
    if old_spans is None:
        return None
    applied = patched(old_source, patch)
    if applied is None:
        return None
    new_source = applied.text
    old_lines, new_lines = list(applied.removed), list(applied.added)
    new_spans = _spans(patch.path, new_source)
    if new_spans is None:
        # The new side does not parse (a syntax error upstream): added lines are placed by
        # the old lines around them, whose definitions hold the insertion.
        new_spans, new_lines = [], []
        old_lines = sorted({*old_lines, *applied.neighbours})
    python = patch.path.endswith(".py")
    found: list[Located] = []
    for side, spans, lines, text in (
        ("old", old_spans, old_lines, old_source),
        ("new", new_spans, new_lines, new_source),
    ):
        rows = split_lines(text)[0] if python else []
        for line in lines:
            held = list(_containing(spans, line, side))
            row = rows[line - 1].strip() if 0 < line <= len(rows) else None
            in_string = bool(held) and held[0].kind in (STRING, DOCSTRING)
            if row is not None and (not row or (row.startswith("#") and not in_string)):
                found.append(Located(COSMETIC, "", side, line))
            else:
                # A string is not a definition: its change is its function's (a message).
                found.extend(h for h in held if h.kind != STRING)
                if held and all(h.kind == STRING for h in held):
                    found.append(Located(MODULE, "", side, line))
    return found


def _containing(spans: Sequence[_Span], line: int, side: str) -> Iterator[Located]:
    held = sorted(
        (s for s in spans if s.start <= line <= s.end),
        key=lambda s: (s.start, -s.end),
        reverse=True,
    )
    if not held:
        yield Located(MODULE, "", side, line)
        return
    for span in held:
        kind = span.kind
        if kind == FUNCTION and line < span.body_start:
            kind = SIGNATURE
        yield Located(kind, span.name, side, line, span.start, span.end, span.cached)


class Store(Protocol):
    """Where the definitions of texts are kept between processes, by a key of the text."""

    def load(self, key: bytes) -> object | None: ...

    def save(self, key: bytes, value: object) -> None: ...


_STORE: list[Store] = []
# Texts below this size parse faster than a kept form is found and loaded.
_KEPT_MIN_CHARS = 20_000


def keep_with(store: Store | None) -> None:
    """Keep the definitions of the texts this process reads in `store` (None: none)."""
    _STORE[:] = [store] if store is not None else []
    _spans.cache_clear()


@lru_cache(maxsize=32)
def _spans(path: str, source: str) -> list[_Span] | None:
    """Definitions of one text (once per process, and once per text in the store)."""
    store = _STORE[0] if _STORE and len(source) >= _KEPT_MIN_CHARS else None
    kind = ".py" if path.endswith(".py") else "cpp" if path.endswith(_CPP_SUFFIXES) else "yaml"
    key = b""
    if store is not None:
        key = hashlib.sha256(f"{kind}\0{source}".encode(errors="surrogatepass")).digest()
        kept = store.load(key)
        if isinstance(kept, list) and all(type(span) is _Span for span in kept):
            return kept
    if kind == ".py":
        spans = _python_spans(source)
    elif kind == "cpp":
        spans = _cpp_spans(source)
    else:
        spans = _yaml_spans(source)
    if store is not None and spans is not None:
        store.save(key, spans)
    return spans


# --- Python -------------------------------------------------------------------------------

# Test-database entry constructors: OpInfo, UnaryUfuncInfo, ReductionOpInfo, ModuleInfo, ...
_ENTRY_CALL = re.compile(r"\w*Info$")
# Calls named like entries that are parts of one (decorators, skips, tolerances).
_NOT_ENTRIES = frozenset({"DecorateInfo", "SkipInfo", "XFailInfo"})


def _python_spans(source: str) -> list[_Span] | None:
    """Docstrings, multi-line strings and definitions (functions, classes, lambdas, database
    entries) of a Python text, in one walk of its tree (a 1 MB OpInfo database has about two
    million nodes: each walk of them costs)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    docstrings: list[_Span] = []
    strings: list[_Span] = []
    definitions: list[_Span] = []
    docstring_ids: set[int] = set()
    node_type = ast.AST

    def docstring(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            docstring_ids.add(id(first.value))
            name = getattr(node, "name", "")
            docstrings.append(
                _Span(DOCSTRING, name, first.lineno, first.end_lineno or first.lineno)
            )

    def visit(node: ast.AST, prefix: str, in_function: bool) -> None:
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type):
                        child(item, prefix, in_function)
            elif isinstance(value, node_type):
                child(value, prefix, in_function)

    def child(node: ast.AST, prefix: str, in_function: bool) -> None:
        if isinstance(node, ast.Constant):
            if (
                isinstance(node.value, str)
                and id(node) not in docstring_ids
                and (node.end_lineno or node.lineno) > node.lineno
            ):
                strings.append(_Span(STRING, "", node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            docstring(node)
            name = prefix + node.name
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            end = node.end_lineno or node.lineno
            cached = any(_memoizes(d) for d in node.decorator_list)
            definitions.append(_Span(FUNCTION, name, first, end, node.body[0].lineno, cached))
            visit(node, name + ".<locals>.", True)
        elif isinstance(node, ast.ClassDef):
            docstring(node)
            name = prefix + node.name
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            definitions.append(_Span(CLASS, name, first, node.end_lineno or node.lineno))
            visit(node, name + ".", in_function)
        elif isinstance(node, ast.Lambda):
            # A lambda's code object is `<lambda>` inside the enclosing scope; its body runs
            # when called, like a function's (a sample-input lambda of an OpInfo).
            definitions.append(
                _Span(
                    FUNCTION,
                    prefix + "<lambda>",
                    node.lineno,
                    node.end_lineno or node.lineno,
                    node.body.lineno,
                )
            )
            visit(node, prefix + "<lambda>.<locals>.", True)
        elif isinstance(node, ast.Call) and not in_function:
            entry = _entry_name(node)
            if entry is not None:
                definitions.append(_Span(ENTRY, entry, node.lineno, node.end_lineno or node.lineno))
            visit(node, prefix, in_function)
        else:
            visit(node, prefix, in_function)

    docstring(tree)
    visit(tree, "", False)
    return [*docstrings, *strings, *definitions]


def _memoizes(decorator: ast.expr) -> bool:
    """`@cache`, `@functools.lru_cache(...)`, `@cached_property`, ..."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = _dotted(node) or ""
    return "cache" in name.rsplit(".", 1)[-1].lower()


def _entry_name(call: ast.Call) -> str | None:
    """`OpInfo('glu', variant_test_name='x')` -> 'glu'; `ModuleInfo(torch.nn.ELU)` -> 'nn.ELU'."""
    func = call.func
    callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if not callee or not _ENTRY_CALL.match(callee) or callee in _NOT_ENTRIES:
        return None
    first: ast.expr | None = call.args[0] if call.args else None
    for keyword in call.keywords:
        if keyword.arg in ("name", "op_name", "module_cls") and first is None:
            first = keyword.value
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    dotted = _dotted(first) if first is not None and callee == "ModuleInfo" else None
    if dotted is not None and ".nn." in f".{dotted}":
        return "nn." + dotted.rsplit(".", 1)[-1]
    return None


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


# --- C++ ----------------------------------------------------------------------------------

_CPP_HEAD = re.compile(
    r"\b(?:TORCH_IMPL_FUNC|TORCH_META_FUNC2?|TORCH_PRECOMPUTE_META_FUNC)\s*\(\s*(\w+)"
    r"|(?:(?:\w+::)*(\w+))\s*\([^;{}]*\)\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[\w:<>]+\s*)?$"
)
_CPP_NOT_FUNCTIONS = frozenset(
    {"if", "for", "while", "switch", "catch", "return", "sizeof", "namespace", "TORCH_CHECK"}
)
_CPP_REGISTRATION = re.compile(r"\b(?:REGISTER_DISPATCH|REGISTER_ARCH_DISPATCH)\s*\(\s*(\w+)")
# A line that is a macro invocation alone, without `;` (`CREATE_UNARY_TORCH_IMPL_FUNC(sin_out,
# sin_stub)`): a statement of its own, unless the next line goes on with `(`, `{` or `:`
# (`TORCH_IMPL_FUNC(x_out)` above its parameters).
_MACRO_LINE = re.compile(r"^\s*[A-Z_][A-Z0-9_]*\s*\([^;{}]*\)\s*$")


def cpp_head_restarts(after_macro_line: bool, line: str) -> bool:
    """Whether `line` starts a new head: the line above was a macro invocation alone and this
    one does not go on with it (otherwise every function after a row of such invocations
    would take the first invocation's name)."""
    stripped = line.strip()
    return after_macro_line and bool(stripped) and not stripped.startswith(("(", "{", ":"))


def cpp_macro_line(after_macro_line: bool, line: str) -> bool:
    """The state `cpp_head_restarts` reads for the next line (a blank line keeps it)."""
    return bool(_MACRO_LINE.match(line)) or (after_macro_line and not line.strip())


def _cpp_spans(source: str) -> list[_Span]:
    """Function bodies by brace matching: a `{` opened right after a head `name(...)` (or a
    TORCH_IMPL_FUNC) starts the function; its matching `}` ends it. Comments and strings are
    blanked first so their braces do not count."""
    text = _blank_cpp_noise(source)
    lines = split_lines(text)[0]
    spans: list[_Span] = []
    stack: list[tuple[str | None, int]] = []
    pending = ""  # text since the last `;`, `{` or `}`: the head of the next block
    pending_line = 1
    macro_line = False
    for number, line in enumerate(lines, start=1):
        if cpp_head_restarts(macro_line, line):
            pending = ""
        macro_line = cpp_macro_line(macro_line, line)
        for match in _CPP_REGISTRATION.finditer(line):
            spans.append(_Span(CPP_FUNCTION, match.group(1), number, number))
        for char in line:
            if char == "{":
                head = " ".join(pending.split())
                stack.append((_cpp_head_name(head), pending_line))
                pending, pending_line = "", number
            elif char == "}":
                if stack:
                    name, start = stack.pop()
                    if name is not None and not any(n for n, _ in stack if n is not None):
                        spans.append(_Span(CPP_FUNCTION, name, start, number))
                pending, pending_line = "", number
            elif char == ";":
                pending, pending_line = "", number
            else:
                if not pending.strip():
                    pending_line = number
                pending += char
        pending += " "
    return spans


def _cpp_head_name(head: str) -> str | None:
    match = _CPP_HEAD.search(head)
    if match is None:
        return None
    name = match.group(1) or match.group(2)
    if name in _CPP_NOT_FUNCTIONS or head.startswith(("namespace", "struct", "class", "enum")):
        return None
    return name


def _blank_cpp_noise(source: str) -> str:
    """Comments and string/char literals replaced by spaces, newlines kept."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        two = source[i : i + 2]
        if two == "//":
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif two == "/*":
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(c if c == "\n" else " " for c in source[i:j]))
            i = j
        elif source[i] in "\"'":
            quote, j = source[i], i + 1
            while j < n and source[j] != quote and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(source[i])
            i += 1
    return "".join(out)


# --- YAML ---------------------------------------------------------------------------------

_YAML_ENTRY = re.compile(r"^-\s*(?:func|name):\s*([A-Za-z_][\w.]*)\s*\(")


def _yaml_spans(source: str) -> list[_Span]:
    """Each top-level `- func:` / `- name:` entry runs to the line before the next entry."""
    heads = [
        (number, m.group(1))
        for number, line in enumerate(split_lines(source)[0], start=1)
        if (m := _YAML_ENTRY.match(line))
    ]
    total = source.count("\n") + 1
    spans = []
    for i, (start, name) in enumerate(heads):
        end = heads[i + 1][0] - 1 if i + 1 < len(heads) else total
        spans.append(_Span(YAML_ENTRY, name, start, end))
    return spans


def definitions_of(located: Iterable[Located]) -> list[Located]:
    """One record per (kind, name), first seen first (a digest for reasons)."""
    seen: dict[tuple[str, str], Located] = {}
    for item in located:
        seen.setdefault((item.kind, item.name), item)
    return list(seen.values())
