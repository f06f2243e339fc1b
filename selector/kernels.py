"""The kernel map: which ops a changed C++ definition implements.

The Inventory carries the map of its torch's native_functions.yaml (`Inventory.kernels`: C++
function -> its dispatch keys and ops; built by `suites.inventory.kernel_table`). A changed
definition is named, first decision that names an op the inventory knows wins:

1. the map: a `dispatch:` kernel (`CPU: _cdist_forward`), the `_out` kernel that structured
   overloads delegate to (`TORCH_IMPL_FUNC(sqrt_out)`), a default `CompositeImplicitAutograd`
   kernel (`cdist`), a structured op's meta function (`TORCH_META_FUNC(sqrt)`);
2. a dispatch stub: `REGISTER_DISPATCH(cdist_stub, &cdist_kernel_impl)` in the file (or on
   the patch's lines) ties a kernel to its stub; a stub (`DEFINE_DISPATCH(x_stub)`) names the
   ops of the kernels named after it (`x`, `x_out`, `_x`, ...): **by name, a heuristic**;
3. the file's own calls (old source only): a function only this file can call (`static`,
   `inline`, a template, in an anonymous namespace or a type) or a kernel reaches the ops of
   the functions that call it, up the file's call graph; any caller that is neither named nor
   file-local leaves it undecided (other files may call that caller);
4. the name: `x_kernel`, `x_impl`, `XKernelImpl` implement `x_stub` (**a heuristic**).

An op counts when the inventory tests it (by name or family) or the trace saw a variant
dispatch it. Every decision is a sentence, kept with the op it named or the definition it
could not name. Pure: text in, records out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from selector.definitions import (
    CPP_FUNCTION,
    MODULE,
    Located,
    _blank_cpp_noise,
    _cpp_head_name,
    cpp_head_restarts,
    cpp_macro_line,
)
from selector.diff import FilePatch, iter_changed_lines, split_lines
from selector.opnames import cpp_symbols
from selector.patches import patched
from suites.model import META_KEY

NO_MAP = (
    "the Inventory carries no kernel map (built before it had one, or its torch ships no "
    "native_functions.yaml): rebuild it with `spyre-ci inventory`"
)
NO_DEFINITION = (
    "no changed definition found: the hunks show no function and the old source is not at hand"
)
_CALLER_DEPTH = 6
_HEADER_SUFFIXES = (".h", ".hpp", ".cuh")
_STUB_NAMES = ("{}_out", "{}", "_{}_out", "_{}", "{}_cpu", "{}_out_cpu", "{}_cpu_out")
# Longest first: `add_cpu_kernel` is the kernel of `add_stub`, not of `add_cpu_stub`.
_IMPL_SUFFIXES = ("_cpu_kernel", "_kernel_impl", "_kernel_cpu", "_kernel", "_impl")
_REGISTRATION = re.compile(
    r"\b(?:REGISTER_\w*DISPATCH|ALSO_REGISTER_\w*DISPATCH)\s*\(\s*(\w+)\s*,\s*&?\s*"
    r"(?:[\w:]+::)?(\w+)"
)
# Heads of the scopes that are not functions (what precedes them on the head is a macro
# call without `;`, or `template <...>`).
_NAMESPACE = re.compile(r"(?:^|\s)(?:inline\s+)?namespace\b\s*([\w:]*)\s*$")
_TYPE = re.compile(r"\b(?:struct|class|union|enum)\b[^()]*$")
_LOCAL_HEAD = re.compile(r"^template\b|\b(?:static|inline)\b")
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*")
_DEFINE = re.compile(r"\s*#\s*define\s+(\w+)")
# On a changed line outside every function: a name in call or argument position
# (`CREATE_UNARY_TORCH_IMPL_FUNC(sin_out, sin_stub)`, `DEFINE_DISPATCH(abs_stub);`).
_ARGUMENT = re.compile(r"\b([A-Za-z_]\w*)\s*(?=[(),])")


@dataclass(frozen=True)
class KernelMap:
    """C++ function -> (dispatch keys, ops), as the Inventory carries it."""

    table: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.table)

    @property
    def ops(self) -> frozenset[str]:
        cached: frozenset[str] | None = self.__dict__.get("_ops")
        if cached is None:
            cached = frozenset(op for _, ops in self.table.values() for op in ops)
            self.__dict__["_ops"] = cached  # frozen: the cache goes in the instance dict
        return cached


@dataclass(frozen=True)
class KernelNaming:
    """What the map said of one file's changed definitions."""

    found: tuple[tuple[str, str], ...] = ()  # (op, how it was named)
    unnamed: tuple[str, ...] = ()  # "symbol: why no op", per definition it could not name


@dataclass(frozen=True)
class CppFile:
    """The call structure of one C++ text: who names whom, who only the file can call."""

    file_local: Mapping[str, bool]  # function -> every definition of it is file-local
    callers: Mapping[str, frozenset[str]]  # name -> functions whose bodies name it
    registrations: Mapping[str, str]  # kernel function -> the stub it is registered for
    macros: tuple[tuple[str, int, int], ...] = ()  # (name, first line, last line) of #defines
    # macro -> the names its invocations pass (and paste: `func##_out` with `sin` -> `sin_out`)
    expansions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # macro -> the names its body uses: what the functions it defines call
    macro_calls: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def macro_at(self, line: int) -> str | None:
        """The macro whose `#define` holds `line` (1-based), if any."""
        return next((name for name, first, last in self.macros if first <= line <= last), None)


def name_changes(
    kernels: KernelMap,
    patch: FilePatch,
    innermost: Sequence[Located] | None,
    source: str | None,
    accept: Callable[[str], bool],
) -> KernelNaming:
    """`name_kernels` for one C++ file's patch: its changed definitions placed by the old
    source when it is at hand (`innermost`: the innermost definition of each changed line,
    from `selector.definitions.locate`), else read from the hunks."""
    if innermost is not None and source is not None:
        symbols, lines, macros = _changed_cpp(innermost, source, patch)
        return name_kernels(
            kernels, patch.path, symbols, lines, accept, source=source, macros=macros
        )
    symbols = [symbol for symbol, _ in cpp_symbols(patch)]
    # Without the source, a changed line is known to lie outside every function only when it
    # is a macro invocation alone at the start of a line (`CREATE_..._FUNC(sin_out, sin_stub)`).
    lines = [
        text
        for _, _, text in iter_changed_lines(patch)
        if not text[:1].isspace() and cpp_macro_line(False, text)
    ]
    if not symbols and not lines:
        return KernelNaming(unnamed=(NO_DEFINITION,))
    text = "\n".join(line[1:] for hunk in patch.hunks for line in hunk.lines)
    return name_kernels(kernels, patch.path, symbols, lines, accept, patch_text=text)


def _changed_cpp(
    innermost: Sequence[Located], source: str, patch: FilePatch
) -> tuple[list[str], list[str], list[str]]:
    """(changed functions, the text of changed lines outside every function, changed macros)
    of a C++ file, each line on its side: removed lines in the old text, added in the new."""
    texts = {"old": source}
    if any(i.side == "new" for i in innermost):
        applied = patched(source, patch)
        texts["new"] = applied.text if applied is not None else ""
    rows = {side: split_lines(text)[0] for side, text in texts.items()}
    symbols: dict[str, None] = {}
    lines: dict[str, None] = {}
    macros: dict[str, None] = {}
    for item in innermost:
        macro = read_cpp(texts[item.side]).macro_at(item.line)
        if macro is not None:
            macros[macro] = None
        elif item.kind == CPP_FUNCTION:
            symbols[item.name] = None
        elif item.kind == MODULE and 0 < item.line <= len(rows[item.side]):
            lines[rows[item.side][item.line - 1]] = None
    return list(symbols), list(lines), list(macros)


def name_kernels(
    kernels: KernelMap,
    path: str,
    symbols: Sequence[str],
    lines: Sequence[str],
    accept: Callable[[str], bool],
    source: str | None = None,
    patch_text: str = "",
    macros: Sequence[str] = (),
) -> KernelNaming:
    """The ops the changed definitions `symbols` (and the changed `lines` outside every
    function) of `path` implement. `source` is the old text of the file (the call graph
    needs it); `patch_text` the patch's lines (registrations it shows); `accept(op)` says
    whether an op is worth naming (the inventory tests it, or the trace saw it); `macros`
    the changed `#define`s, named by what their invocations in `source` pass."""
    if not kernels:
        return KernelNaming(unnamed=(NO_MAP,))
    cpp = read_cpp(source) if source is not None else None
    registered = dict(_registrations(patch_text))
    if cpp is not None:
        registered.update(cpp.registrations)
    namer = _Namer(kernels, accept, registered, cpp, path.endswith(_HEADER_SUFFIXES))
    found: dict[tuple[str, str], None] = {}
    unnamed: dict[str, None] = {}
    for symbol in dict.fromkeys(symbols):
        named, why = namer.name(symbol)
        found.update(dict.fromkeys(named))
        if not named:
            unnamed[f"{symbol}: {why}"] = None
    for macro in dict.fromkeys(macros):
        passed = cpp.expansions.get(macro, ()) if cpp is not None else ()
        named = [
            (op, f"macro {macro} changed, invoked with {name}: {how}")
            for name in passed
            for op, how in namer.direct(name)
        ]
        found.update(dict.fromkeys(named))
        if not named:
            unnamed[f"macro {macro}: no invocation in the file passes a kernel or stub"] = None
    for line in lines:
        text = line.strip()
        if text.startswith("#"):
            unnamed[f"`{text[:60]}`: a changed preprocessor line"] = None
        if not text or text.startswith(("#", "//", "/*", "*")):
            continue
        names = [m.group(1) for m in _ARGUMENT.finditer(_blank_cpp_noise(text))]
        named = [
            (op, f"named on a changed line outside every function: {how}")
            for name in dict.fromkeys(names)
            for op, how in namer.direct(name)
        ]
        found.update(dict.fromkeys(named))
        if not named:
            unnamed[f"`{text[:60]}`: a changed line outside every function names no kernel"] = None
    return KernelNaming(tuple(found), tuple(unnamed))


def stub_named(symbol: str) -> str:
    """The dispatch stub a kernel's name says it implements (`add_cpu_kernel`,
    `AddKernelImpl` -> `add_stub`); "" when its name says none."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", symbol).lower()
    for suffix in _IMPL_SUFFIXES:
        if snake.endswith(suffix) and len(snake) > len(suffix):
            return snake[: -len(suffix)].lstrip("_") + "_stub"
    return ""


class _Namer:
    def __init__(
        self,
        kernels: KernelMap,
        accept: Callable[[str], bool],
        registered: Mapping[str, str],
        cpp: CppFile | None,
        header: bool,
    ) -> None:
        self.kernels = kernels
        self.accept = accept
        self.registered = registered
        self.cpp = cpp
        self.header = header

    def name(self, symbol: str) -> tuple[list[tuple[str, str]], str]:
        """(op, how) for one changed definition, or ([], why none)."""
        named = self.direct(symbol)
        if named:
            return named, ""
        why = self._unaccepted(symbol)
        through, blocked = self._callers(symbol)
        if through:
            return through, ""
        guessed = self._by_name(symbol)
        if guessed:
            return guessed, ""
        return [], "; ".join(w for w in (why, blocked) if w) or "not in the kernel map"

    def direct(self, symbol: str) -> list[tuple[str, str]]:
        """The map's kernel, a registered kernel's stub, or a stub: the ops accepted."""
        entry = self.kernels.table.get(symbol)
        if entry is not None:
            ops = [op for op in entry[1] if self.accept(op)]
            return [(op, _kernel_how(symbol, entry)) for op in ops]
        stub = self.registered.get(symbol)
        if stub is not None:
            return [
                (op, f"REGISTER_DISPATCH({stub}, {symbol}); {how}") for op, how in self._stub(stub)
            ]
        if symbol.endswith("_stub"):
            return self._stub(symbol)
        return []

    def _stub(self, stub: str) -> list[tuple[str, str]]:
        base = stub[: -len("_stub")]
        found: list[tuple[str, str]] = []
        for pattern in _STUB_NAMES:
            kernel = pattern.format(base)
            entry = self.kernels.table.get(kernel)
            if entry is None:
                continue
            how = f"{stub} taken for the stub of {kernel} (by name: heuristic); " + _kernel_how(
                kernel, entry
            )
            found += [(op, how) for op in entry[1] if self.accept(op)]
        if not found:
            for op in (base, "_" + base):
                if op in self.kernels.ops and self.accept(op):
                    found.append((op, f"dispatch stub {stub} of op {op} (by name: heuristic)"))
        return list(dict.fromkeys(found))

    def _by_name(self, symbol: str) -> list[tuple[str, str]]:
        stub = stub_named(symbol)
        if stub:
            return [
                (op, f"{symbol} named like the kernel of {stub} (by name: heuristic); {how}")
                for op, how in self._stub(stub)
            ]
        return []

    def _unaccepted(self, symbol: str) -> str:
        entry = self.kernels.table.get(symbol)
        if entry is None:
            return ""
        return (
            f"{_kernel_how(symbol, entry)}, which no variant tests by name and no traced "
            "variant dispatches"
        )

    def _callers(self, symbol: str) -> tuple[list[tuple[str, str]], str]:
        """Ops of the functions of this file that call `symbol`, up its call graph."""
        cpp = self.cpp
        if cpp is None:
            return [], "its callers are unknown without the old source of the file"
        if self.header:
            return [], "defined in a header: any file that includes it may call it"
        kernel = symbol in self.kernels.table
        if not kernel and not cpp.file_local.get(symbol, False):
            return [], "not file-local (not static, inline or in an anonymous namespace)"
        # A kernel is also reached through the dispatcher from other files: unseen here.
        lead = "its callers in this file" + (
            "" if cpp.file_local.get(symbol, False) else " (callers elsewhere unseen: heuristic)"
        )
        lead += ": "
        found: list[tuple[str, str]] = []
        frontier: list[tuple[str, tuple[str, ...]]] = [(symbol, (symbol,))]
        seen = {symbol}
        while frontier:
            name, chain = frontier.pop(0)
            for macro, used in cpp.macro_calls.items():
                if name not in used:
                    continue
                # The functions the macro defines call it: those its invocations name.
                path = " <- ".join((*chain, f"macro {macro}"))
                named = [
                    (op, f"{lead}{path} (invoked with {passed}); {how}")
                    for passed in cpp.expansions.get(macro, ())
                    for op, how in self.direct(passed)
                ]
                if not named:
                    return [], f"its caller, macro {macro}, is invoked with no kernel ({path})"
                found += named
            callers = sorted(cpp.callers.get(name, ()))
            if not callers and not any(name in used for used in cpp.macro_calls.values()):
                return [], f"{name} is called nowhere in the file (reached some other way)"
            for caller in callers:
                if caller in seen:
                    continue
                seen.add(caller)
                path = " <- ".join((*chain, caller))
                # A file-local caller is followed up before its name is read as a guess.
                local = cpp.file_local.get(caller, False) or caller in self.kernels.table
                named = self.direct(caller) or ([] if local else self._by_name(caller))
                if named:
                    found += [(op, f"{lead}{path}; {how}") for op, how in named]
                elif not local:
                    return [], f"its caller {caller} names no op and is not file-local ({path})"
                elif len(chain) >= _CALLER_DEPTH:
                    return [], f"its callers in the file go deeper than {_CALLER_DEPTH}: {path}"
                else:
                    frontier.append((caller, (*chain, caller)))
        return list(dict.fromkeys(found)), ""


def _kernel_how(kernel: str, entry: tuple[str, tuple[str, ...]]) -> str:
    keys, ops = entry
    shown = ", ".join(ops)
    if keys == META_KEY:
        return f"native_functions.yaml structured op: TORCH_META_FUNC({kernel}) -> {shown}"
    return f"native_functions.yaml dispatch {keys}: {kernel} -> {shown}"


def _registrations(text: str) -> Iterable[tuple[str, str]]:
    """(kernel function, stub) of every `REGISTER_DISPATCH(stub, &fn)` in `text`."""
    for match in _REGISTRATION.finditer(text):
        yield match.group(2), match.group(1)


@lru_cache(maxsize=32)
def read_cpp(source: str) -> CppFile:
    """Functions of a C++ text with what their bodies name. Scopes by brace matching on the
    text with comments and strings blanked; preprocessor lines (macro bodies too) skipped."""
    text = _blank_cpp_noise(source)
    file_local: dict[str, bool] = {}
    names: dict[str, set[str]] = {}
    # (kind, function name, body start offset, file-local); kind: function, namespace,
    # anonymous, type, block
    stack: list[tuple[str, str, int, bool]] = []
    pending = ""
    offset = 0
    directive = False
    macro_line = False
    macros: list[tuple[str, int, int]] = []
    code: list[str] = []  # the text without preprocessor lines (where macros are invoked)
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        start = offset
        offset += len(line)
        if directive or line.lstrip().startswith("#"):
            defined = _DEFINE.match(line)
            if defined is not None and not directive:
                macros.append((defined.group(1), number, number))
            elif directive and macros and macros[-1][2] == number - 1:
                macros[-1] = (macros[-1][0], macros[-1][1], number)
            directive = line.rstrip().endswith("\\")
            pending = ""
            code.append("\n")
            continue
        code.append(line)
        if cpp_head_restarts(macro_line, line):
            pending = ""
        macro_line = cpp_macro_line(macro_line, line)
        for i, char in enumerate(line, start):
            if char == "{":
                head = " ".join(pending.split())
                stack.append(_scope(head, stack, i))
                pending = ""
            elif char == "}":
                if stack:
                    kind, name, body, local = stack.pop()
                    if kind == "function":
                        file_local[name] = file_local.get(name, True) and local
                        names.setdefault(name, set()).update(_IDENTIFIER.findall(text, body, i))
                pending = ""
            elif char == ";":
                pending = ""
            else:
                pending += char
    callers: dict[str, set[str]] = {}
    for function, named in names.items():
        for name in named - {function}:
            callers.setdefault(name, set()).add(function)
    return CppFile(
        file_local=file_local,
        callers={k: frozenset(v) for k, v in callers.items()},
        registrations=dict(_registrations(text)),
        macros=tuple(macros),
        expansions=_expansions(text, "".join(code), macros),
        macro_calls=_macro_calls(text, macros),
    )


def _macro_calls(text: str, macros: Sequence[tuple[str, int, int]]) -> dict[str, frozenset[str]]:
    rows = text.splitlines()
    calls: dict[str, frozenset[str]] = {}
    for name, first, last in macros:
        body = "\n".join(rows[first - 1 : last])
        calls[name] = frozenset(_IDENTIFIER.findall(body)) - {name, "define"}
    return calls


def _expansions(
    text: str, code: str, macros: Sequence[tuple[str, int, int]]
) -> dict[str, tuple[str, ...]]:
    """Per macro, the names its invocations pass, and those names with what its body pastes
    to its parameters (`func##_out` with `sin` -> `sin_out`)."""
    rows = text.splitlines()
    out: dict[str, tuple[str, ...]] = {}
    for name, first, last in macros:
        body = "\n".join(rows[first - 1 : last])
        head = re.match(r"\s*#\s*define\s+\w+\(([^)]*)\)", body)
        params = set(_IDENTIFIER.findall(head.group(1))) if head else set()
        pastes = re.findall(r"(\w+)\s*##\s*(\w+)", body)
        suffixes = {right for left, right in pastes if left in params and right not in params}
        prefixes = {left for left, right in pastes if right in params and left not in params}
        passed: dict[str, None] = {}
        for call in re.finditer(rf"\b{re.escape(name)}\s*\(([^()]*)\)", code):
            for arg in _IDENTIFIER.findall(call.group(1)):
                passed[arg] = None
                passed.update(dict.fromkeys(arg + suffix for suffix in sorted(suffixes)))
                passed.update(dict.fromkeys(prefix + arg for prefix in sorted(prefixes)))
        out[name] = tuple(passed)
    return out


def _scope(
    head: str, stack: Collection[tuple[str, str, int, bool]], at: int
) -> tuple[str, str, int, bool]:
    if any(kind == "function" for kind, _, _, _ in stack):
        return "block", "", at, False
    namespace = _NAMESPACE.search(head)
    if namespace is not None:
        return ("namespace" if namespace.group(1) else "anonymous"), "", at, False
    if _TYPE.search(head):
        return "type", "", at, False
    name = _cpp_head_name(head)
    if name is None:
        return "block", "", at, False
    enclosed = any(kind in ("anonymous", "type") for kind, _, _, _ in stack)
    return "function", name, at, enclosed or bool(_LOCAL_HEAD.search(head))
