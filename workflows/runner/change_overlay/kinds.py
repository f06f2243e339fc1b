"""Which kind of file a change touches, by its repository path alone (pure): a Python module
of the installed torch, something only a build brings, a non-module file of an installed
package, upstream's test tree, or nothing of the installed torch at all. And, reading the
reused test files' imports (`imported_beside`), whether a test-tree file beside them can
change what they do."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

# Installed packages of the torch wheel whose Python modules are applied at import time.
RUNTIME_PACKAGES = ("torch", "functorch")
# Paths (first part) that only change torch through a build.
_BUILD_DIRS = ("aten", "c10", "caffe2", "cmake", "third_party", "torchgen", "tools", "android")
_BUILD_SUFFIXES = (
    ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".mm", ".m",
    ".metal", ".S", ".asm", ".cmake", ".in", ".bzl", ".bazel", ".ptx",
)  # fmt: skip
_BUILD_NAMES = (
    "CMakeLists.txt", "setup.py", "pyproject.toml", "setup.cfg", "version.txt", "BUILD",
    "BUILD.bazel", "WORKSPACE", "MODULE.bazel", "Makefile", "requirements.txt",
    "requirements-build.txt", "build.ninja",
)  # fmt: skip


def file_kind(path: str) -> str:
    """`python` (an installed module), `build` (needs a build), `other` (a non-module file of
    an installed package: not applied either), or `outside` (not part of the installed
    torch). Pure: by the repository path alone."""
    posix = PurePosixPath(path)
    parts = posix.parts
    if not parts:
        return "outside"
    top, name = parts[0], posix.name
    if top in RUNTIME_PACKAGES:
        if len(parts) > 1 and parts[1] == "csrc":
            return "build"
        if name.endswith(".py"):
            return "python"
        if name.endswith((".pyi", ".md", ".rst", ".typed")):
            return "outside"  # type stubs and docs: nothing runs them
        if name.endswith(_BUILD_SUFFIXES) or name in _BUILD_NAMES:
            return "build"
        return "other"
    if top in _BUILD_DIRS or name in _BUILD_NAMES or name.endswith(_BUILD_SUFFIXES):
        return "build"
    if name.endswith((".yaml", ".yml")) and top not in (".github", ".ci", "docs", "test"):
        return "build"  # codegen inputs (`native_functions.yaml` lives under aten/, but not only)
    return "outside"


def upstream_test_file(path: str) -> bool:
    """A file of upstream's test tree (`test/...`), what file suites import from TORCH_ROOT."""
    parts = PurePosixPath(path).parts
    return len(parts) > 1 and parts[0] == "test"


def beside_reused(path: str, tests_root: Path | None, reused: frozenset[str]) -> bool:
    """Whether an upstream test-tree file that no suite names can still change what a reused
    test file does: a module it imports from beside it (`from common_foo import ...`,
    `jit.helpers`, directly or through another such module), or a file that is not Python
    in its folder or below (an `expect/` file, data it reads next to itself)."""
    if not path.endswith(".py"):
        parts = PurePosixPath(path).parts
        for test in reused:
            folder = PurePosixPath(test).parent.parts
            if len(parts) > len(folder) and parts[: len(folder)] == folder:
                return True
        return False
    return tests_root is not None and path in imported_beside(tests_root, reused)


_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([^#\n]+)|import\s+([^#\n]+))", re.M)


def imported_beside(tests_root: Path, reused: frozenset[str]) -> frozenset[str]:
    """The repository paths of the modules the reused test files import from their own
    folder (Python puts it first on `sys.path`), and those these import in turn: read from
    their text (import statements at any indentation), not run; read again at each call (a
    checkout moves on under a long-lived worker), which only a change to a test-tree file
    that no suite names makes."""
    found: set[str] = set()
    todo = [(path, PurePosixPath(path).parent) for path in sorted(reused)]
    while todo:
        path, folder = todo.pop()
        try:
            text = (tests_root / path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for module in _imported_names(text):
            for candidate in _module_files(folder, module):
                new = candidate not in found and candidate not in reused
                if new and (tests_root / candidate).is_file():
                    found.add(candidate)
                    todo.append((candidate, folder))
    return frozenset(found)


def _imported_names(text: str) -> set[str]:
    """`a.b` for `import a.b`; `a.b` and `a.b.c` for `from a.b import c` (c may be a module)."""
    names: set[str] = set()
    for match in _IMPORT.finditer(text):
        source, what, plain = match.groups()
        if plain is not None:
            names.update(part.split()[0] for part in plain.split(",") if part.strip())
        elif source is not None and not source.startswith("."):
            names.add(source)
            for part in what.strip("()\\ ").split(","):
                word = part.strip().strip("()").split(" ")[0]
                if word.isidentifier():
                    names.add(f"{source}.{word}")
    return names


def _module_files(folder: PurePosixPath, module: str) -> list[str]:
    base = folder.joinpath(*module.split("."))
    return [f"{base}.py", f"{base}/__init__.py"]


def module_name(path: str) -> str:
    """`torch/nn/functional.py` -> `torch.nn.functional`; a package's `__init__.py` is the
    package."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)
