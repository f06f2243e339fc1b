"""Op names: how spellings relate (aliases, in-place, out, private, refs) and how to find
the ops a patch touches (native_functions.yaml, derivatives.yaml, hunk function context,
function definitions, OpInfo entries, `aten::` and `torch.ops.aten.` names)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath

from selector.definitions import (
    CLASS,
    CPP_FUNCTION,
    ENTRY,
    FUNCTION,
    SIGNATURE,
    YAML_ENTRY,
    Located,
)
from selector.diff import FilePatch

# Spellings of the same op that only say where it lives.
_PREFIXES = (
    "torch.ops.aten.",
    "torch.ops.prims.",
    "ops.aten.",
    "aten::",
    "aten.",
    "torch._refs.",
    "_refs.",
    "torch._decomp.",
    "torch.",
    "prims::",
)
# Namespaces that belong to the op's name (linalg.norm is not norm).
_NAMESPACES = (
    "nn.functional.",
    "special.",
    "linalg.",
    "fft.",
    "masked.",
    "sparse.",
    "nested.",
    "signal.windows.",
    "nn.",
)
# Namespaces whose ops run their base op (nn.functional.hardswish -> hardswish).
_FAMILY_NAMESPACES = ("nn.functional.", "special.", "linalg.", "masked.")
_FAMILY_SUFFIXES = (
    "_backward_data",
    "_backward_input",
    "_backward_weight",
    "_double_backward",
    "_backward",
    "_forward",
    "_functional",
    "_out",
    "_jvp",
)
# Words in C++ kernel names that do not name the op (softmax_lastdim_kernel_impl -> softmax).
_KERNEL_NOISE = frozenset(
    {
        "cpu",
        "cuda",
        "mps",
        "xpu",
        "kernel",
        "kernels",
        "impl",
        "stub",
        "lastdim",
        "vec",
        "host",
        "out",
        "template",
        "fn",
        "func",
        "meta",
        "vectorized",
        "contiguous",
        "serial",
        "parallel",
        "avx2",
        "avx512",
        "default",
        "generic",
        "cpp",
        "apply",
        "launch",
        "structured",
        "reduced",
        "float",
        "floating",
        "inner",
        "outer",
        "dim",
    }
)
_STEM_NOISE = ("kernels", "kernel", "utils", "impl", "ops", "cpu", "cuda")


def canonical(name: str) -> str:
    """The op with its namespace, without location prefixes, overload or OpInfo variant."""
    n = name.strip()
    changed = True
    while changed:  # `torch._refs.nn.functional.x` needs two passes
        changed = False
        for prefix in _PREFIXES:
            if n.startswith(prefix):
                n, changed = n[len(prefix) :], True
    namespace = next((ns for ns in _NAMESPACES if n.startswith(ns)), "")
    return namespace + n[len(namespace) :].split(".", 1)[0]


@lru_cache(maxsize=1 << 16)
def op_key(name: str) -> str:
    """`canonical` with in-place and out spellings folded: add_, add.out, add_out -> add.
    Memoized: a trace names the same few thousand ops hundreds of thousands of times."""
    key = canonical(name)
    if key.endswith("_") and not key.endswith("__"):
        key = key[:-1]
    if key.endswith("_out") and len(key) > 4:
        key = key[:-4]
    return key


def family_of(name: str, aliases: Mapping[str, str]) -> str:
    """The family a name belongs to: the alias table first, then spelling rules."""
    key = op_key(name)
    if key in aliases:
        return aliases[key]
    for ns in _FAMILY_NAMESPACES:
        if key.startswith(ns):
            key = key[len(ns) :]
            if key in aliases:
                return aliases[key]
            break
    if key.startswith("nn.") and key[3:4].isupper():
        # A module runs the op it is named after: nn.ELU -> elu, nn.LayerNorm -> layer_norm.
        op = _module_op(key[3:])
        return aliases.get(op, op)
    core = key.lstrip("_") if not key.startswith("__") else key
    if core in aliases:
        return aliases[core]
    for suffix in _FAMILY_SUFFIXES:
        if core.endswith(suffix) and len(core) > len(suffix):
            stripped = core[: -len(suffix)].lstrip("_")
            return aliases.get(stripped, stripped)
    return core


# Module names whose capitals do not mark word breaks.
_MODULE_SPELLING = {"ReLU": "Relu", "PReLU": "Prelu", "RReLU": "Rrelu", "SiLU": "Silu"}


def _module_op(camel: str) -> str:
    """`LayerNorm` -> `layer_norm`, `ELU` -> `elu`, `BatchNorm2d` -> `batch_norm`."""
    for spelled, plain in sorted(_MODULE_SPELLING.items(), key=lambda kv: -len(kv[0])):
        camel = camel.replace(spelled, plain)
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel).lower()
    return re.sub(r"_?[123]d$", "", snake)


def compact(name: str) -> str:
    """Case and underscores folded, to meet file stems (SoftMax.cpp, layer_norm_kernel.cpp)."""
    return name.replace("_", "").replace(".", "").lower()


@dataclass(frozen=True)
class Touch:
    """A name a patch points at, and where and how it was found."""

    name: str
    path: str
    evidence: str  # e.g. "native_functions.yaml func", "hunk context", "OpInfo entry"
    weak: bool = False  # a guess from a file name, not from the patch text


# --- extraction ---------------------------------------------------------------------------

_YAML_FUNC = re.compile(r"^\s*-?\s*func:\s*([A-Za-z_][\w.]*)\s*\(")
_YAML_NAME = re.compile(r"^\s*-?\s*name:\s*([A-Za-z_][\w.]*)\s*\(")
_YAML_KERNEL = re.compile(r"^\s+[\w, ]+:\s*(\w+)\s*$")
_IMPL_MACRO = re.compile(
    r"\b(?:TORCH_IMPL_FUNC|TORCH_META_FUNC|TORCH_META_FUNC2|TORCH_PRECOMPUTE_META_FUNC|"
    r"REGISTER_DISPATCH|DEFINE_DISPATCH|DECLARE_DISPATCH|REGISTER_ARCH_DISPATCH|"
    r"ALSO_REGISTER_AVX512_DISPATCH)\s*\(\s*(?:[\w:<>, ]+?,\s*)?(\w+)"
)
_CPP_DEF = re.compile(
    r"^\s*(?!(?:return|else|case|delete|throw|new|goto|co_return|using|typedef)\b)"
    r"(?:template\s*<[^>]*>\s*)?(?:(?:static|inline|constexpr|C10_ALWAYS_INLINE|"
    r"TORCH_API|C10_EXPORT|__global__|__device__|__host__|virtual|explicit)\s+)*"
    r"[\w:<>,\*&\s]*?[\w>\*&]\s+[\*&]?\s*(?:\w+::)*(\w+)\s*\((?!.*;\s*$)"
)
_PY_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)\s*\(")
_PY_CLASS = re.compile(r"^\s*class\s+(\w+)\s*[(:]")
_OPINFO = re.compile(r"\b\w*(?:OpInfo|Info)\(\s*['\"]([\w.]+)['\"]")
_MODULEINFO = re.compile(r"\bModuleInfo\(\s*(?:torch\.)?(nn\.\w+)")
_ATEN_QUALIFIED = re.compile(r"\baten::(\w+)")
_ATEN_ATTR = re.compile(r"\b(?:torch\.ops\.)?aten\.(\w+)")
_CPP_KEYWORDS = frozenset(
    {
        "if",
        "for",
        "while",
        "switch",
        "return",
        "sizeof",
        "catch",
        "static_assert",
        "decltype",
        "TORCH_CHECK",
        "TORCH_INTERNAL_ASSERT",
        "AT_DISPATCH_FLOATING_TYPES",
    }
)
_INPUT_FUNC_PREFIXES = ("sample_inputs_", "reference_inputs_", "error_inputs_", "reference_")
_CPP_SUFFIXES = (".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".mm", ".c")

# Where a Python `def x` lives decides which op it is.
_PY_QUALIFIERS: tuple[tuple[str, str], ...] = (
    ("torch/nn/functional.py", "nn.functional."),
    ("torch/_refs/nn/functional/", "nn.functional."),
    ("torch/_refs/special/", "special."),
    ("torch/_refs/linalg/", "linalg."),
    ("torch/_refs/fft.py", "fft."),
    ("torch/special/", "special."),
    ("torch/linalg/", "linalg."),
    ("torch/fft/", "fft."),
    ("torch/masked/", "masked."),
    ("torch/nn/modules/", "nn."),
)


def touched_names(patch: FilePatch) -> Iterator[Touch]:
    """Every name the patch of one file points at (unfiltered: the caller keeps real ops)."""
    path = patch.path
    name = PurePosixPath(path).name
    if name in ("native_functions.yaml", "tags.yaml"):
        yield from _yaml_entries(patch, _YAML_FUNC, "native_functions.yaml func")
    elif name == "derivatives.yaml":
        yield from _yaml_entries(patch, _YAML_NAME, "derivatives.yaml name")
    elif path.endswith(_CPP_SUFFIXES):
        yield from _cpp_names(patch)
        yield from _stem_guess(patch)
    elif path.endswith(".py"):
        yield from _python_names(patch)
    for hunk in patch.hunks:
        for line in hunk.lines:
            if line[:1] not in "+-":
                continue
            for m in _ATEN_QUALIFIED.finditer(line):
                yield Touch(m.group(1), path, "aten:: name")
            for m in _ATEN_ATTR.finditer(line):
                if m.group(1) not in ("ops", "default"):
                    yield Touch(m.group(1), path, "aten. name")


def _yaml_entries(patch: FilePatch, pattern: re.Pattern[str], evidence: str) -> Iterator[Touch]:
    """The entry around each changed line: the nearest `- func:` / `- name:` line above it,
    plus kernel names on changed `dispatch:` lines (`CPU: softmax_cpu_out`)."""
    for hunk in patch.hunks:
        m = pattern.match(hunk.context)
        current = m.group(1) if m else None
        for line in hunk.lines:
            m = pattern.match(line[1:])
            if m:
                current = m.group(1)
            if line[:1] not in "+-" or not line[1:].strip():
                continue
            if current:
                yield Touch(current, patch.path, evidence)
            kernel = _YAML_KERNEL.match(line[1:])
            if kernel and m is None:
                yield Touch(_kernel_words(kernel.group(1)), patch.path, "dispatch kernel")


def _kernel_words(symbol: str) -> str:
    words = [w for w in symbol.split("_") if w and w.lower() not in _KERNEL_NOISE]
    prefix = "_" if symbol.startswith("_") else ""
    return prefix + "_".join(words)


def _cpp_symbols(text: str) -> Iterator[str]:
    for m in _IMPL_MACRO.finditer(text):
        yield m.group(1)
    definition = _CPP_DEF.match(text)
    if definition and definition.group(1) not in _CPP_KEYWORDS:
        yield definition.group(1)


def cpp_symbols(patch: FilePatch) -> Iterator[tuple[str, str]]:
    """(symbol, evidence) of the C++ definitions a patch shows changed, from its text alone:
    each hunk's function context, definitions on changed lines, the last definition a context
    line opened above a changed line."""
    for hunk in patch.hunks:
        for symbol in _cpp_symbols(hunk.context):
            yield symbol, "hunk context"
        enclosing: str | None = None
        for line in hunk.lines:
            for symbol in _cpp_symbols(line[1:]):
                if line[:1] in "+-":
                    yield symbol, "changed definition"
                else:
                    enclosing = symbol
            if line[:1] in "+-" and enclosing:
                yield enclosing, "enclosing function"
                enclosing = None


def _cpp_names(patch: FilePatch) -> Iterator[Touch]:
    for symbol, evidence in cpp_symbols(patch):
        yield Touch(symbol, patch.path, evidence)
        folded = _kernel_words(symbol)
        if folded and folded != symbol:
            yield Touch(folded, patch.path, evidence)


def _stem_guess(patch: FilePatch) -> Iterator[Touch]:
    stem = PurePosixPath(patch.path).stem.lower()
    for noise in _STEM_NOISE:
        if stem.endswith(noise) and len(stem) > len(noise):
            stem = stem[: -len(noise)].rstrip("_")
    yield Touch(stem, patch.path, "file name", weak=True)


def _qualify(path: str, name: str) -> str:
    for prefix, namespace in _PY_QUALIFIERS:
        if path.startswith(prefix):
            return namespace + name
    return name


def _def_names(path: str, name: str) -> Iterator[tuple[str, str]]:
    """The op names a Python function's name points at (qualified by where it lives)."""
    for prefix in _INPUT_FUNC_PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            parts = rest.split("_")
            # sample_inputs_softmax_variant: every prefix; the vocabulary keeps real ops.
            for n in range(len(parts), 0, -1):
                yield "_".join(parts[:n]), "OpInfo sample inputs"
            return
    yield _qualify(path, name), "def"


def _python_symbols(path: str, text: str) -> Iterator[tuple[str, str]]:
    m = _PY_DEF.match(text)
    if m:
        yield from _def_names(path, m.group(1))
    m = _PY_CLASS.match(text)
    if m:
        yield _qualify(path, m.group(1)), "class"
    for m in _OPINFO.finditer(text):
        yield m.group(1), "OpInfo entry"
    for m in _MODULEINFO.finditer(text):
        yield m.group(1), "ModuleInfo entry"


def _python_names(patch: FilePatch) -> Iterator[Touch]:
    for hunk in patch.hunks:
        for symbol, how in _python_symbols(patch.path, hunk.context):
            yield Touch(symbol, patch.path, f"hunk context {how}")
        enclosing: list[tuple[str, str]] = []
        for i, line in enumerate(hunk.lines):
            found = list(_python_symbols(patch.path, line[1:]))
            if line[:1] in "+-" and line[1:].lstrip().startswith("@"):
                # A changed decorator belongs to the def below it.
                below = next(
                    (_PY_DEF.match(n[1:]) for n in hunk.lines[i + 1 :] if _PY_DEF.match(n[1:])),
                    None,
                )
                if below:
                    yield Touch(_qualify(patch.path, below.group(1)), patch.path, "decorated def")
            if line[:1] in "+-":
                for symbol, how in found:
                    yield Touch(symbol, patch.path, f"changed {how}")
                for symbol, how in enclosing:
                    yield Touch(symbol, patch.path, f"enclosing {how}")
                enclosing = []
            elif found:
                enclosing = found


def located_touches(path: str, located: Iterable[Located]) -> Iterator[Touch]:
    """The names the definitions holding a patch's changed lines point at (from the file's
    structure, `selector.definitions`): the same for every form of the same diff."""
    for item in located:
        how = "(source)"
        if item.kind in (FUNCTION, SIGNATURE):
            outer = item.name.split(".<locals>.", 1)[0].split(".")
            if len(outer) > 1:
                yield Touch(_qualify(path, outer[0]), path, f"method's class {how}")
            for name, what in _def_names(path, outer[-1]):
                yield Touch(name, path, f"{what} {how}")
        elif item.kind == CLASS:
            yield Touch(_qualify(path, item.name.split(".", 1)[0]), path, f"class {how}")
        elif item.kind == ENTRY:
            what = "ModuleInfo entry" if item.name.startswith("nn.") else "OpInfo entry"
            yield Touch(item.name, path, f"{what} {how}")
        elif item.kind == CPP_FUNCTION:
            yield Touch(item.name, path, f"enclosing function {how}")
            folded = _kernel_words(item.name)
            if folded and folded != item.name:
                yield Touch(folded, path, f"enclosing function {how}")
        elif item.kind == YAML_ENTRY:
            name = PurePosixPath(path).name
            evidence = (
                "derivatives.yaml name"
                if name == "derivatives.yaml"
                else ("native_functions.yaml func")
            )
            yield Touch(item.name, path, evidence)


def line_names(patch: FilePatch) -> Iterator[Touch]:
    """Names written on the changed lines themselves (`aten::x`, `torch.ops.aten.x`, a new
    `OpInfo('x'` or `def x(`): content, not position, so every diff form gives them."""
    path = patch.path
    for hunk in patch.hunks:
        for line in hunk.lines:
            if line[:1] not in "+-":
                continue
            text = line[1:]
            if path.endswith(".py"):
                for symbol, how in _python_symbols(path, text):
                    yield Touch(symbol, path, f"changed {how}")
            for m in _ATEN_QUALIFIED.finditer(text):
                yield Touch(m.group(1), path, "aten:: name")
            for m in _ATEN_ATTR.finditer(text):
                if m.group(1) not in ("ops", "default"):
                    yield Touch(m.group(1), path, "aten. name")
