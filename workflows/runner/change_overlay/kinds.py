"""Which kind of file a change touches, by its repository path alone (pure): a Python module
of the installed torch, something only a build brings, a non-module file of an installed
package, upstream's test tree, or nothing of the installed torch at all."""

from __future__ import annotations

from pathlib import PurePosixPath

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


def module_name(path: str) -> str:
    """`torch/nn/functional.py` -> `torch.nn.functional`; a package's `__init__.py` is the
    package."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)
