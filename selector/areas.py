"""Stage 1 data: which area of the PyTorch tree a path belongs to, and what that area implies.

The table is data; order matters (first match wins). Policies:
  `none`      the change cannot change a test result here (docs, upstream CI configuration);
  `blind`     the change can reach any op and its effect cannot be narrowed (build, codegen,
              core, dispatcher, third_party): the planner falls back to a full run;
  `targeted`  ops or suites can be named from the patch.
"""

from __future__ import annotations

from dataclasses import dataclass

from selector.globs import first_match


@dataclass(frozen=True)
class AreaRule:
    area: str
    policy: str  # none | blind | targeted
    globs: tuple[str, ...]
    # For targeted areas: a path whose ops cannot be named is unsafe to narrow (kernel code).
    unresolved_is_blind: bool = False
    description: str = ""


AREA_RULES: tuple[AreaRule, ...] = (
    AreaRule(
        "docs",
        "none",
        (
            "docs/**",
            "**/*.md",
            "**/*.rst",
            "LICENSE",
            "NOTICE",
            "CITATION.cff",
            "CODEOWNERS",
            "**/.gitignore",
            "**/*.png",
            "**/*.svg",
        ),
        description="documentation",
    ),
    AreaRule(
        "ci",
        "none",
        (
            ".github/**",
            ".ci/**",
            ".circleci/**",
            ".jenkins/**",
            ".devcontainer/**",
            ".lintrunner.toml",
            ".flake8",
            ".clang-format",
            ".clang-tidy",
            "tools/linter/**",
            "tools/testing/**",
            "tools/stats/**",
            "scripts/**",
        ),
        description="upstream CI and lint configuration",
    ),
    AreaRule(
        "native_functions",
        "targeted",
        (
            "aten/src/ATen/native/native_functions.yaml",
            "aten/src/ATen/native/tags.yaml",
        ),
        unresolved_is_blind=True,
        description="operator schema and dispatch table",
    ),
    AreaRule(
        "derivatives",
        "targeted",
        ("tools/autograd/derivatives.yaml",),
        unresolved_is_blind=True,
        description="autograd formulas",
    ),
    AreaRule(
        "build",
        "blind",
        (
            "CMakeLists.txt",
            "**/CMakeLists.txt",
            "cmake/**",
            "setup.py",
            "pyproject.toml",
            "requirements*.txt",
            "**/*.cmake",
            "**/*.bzl",
            "**/BUILD.bazel",
            "BUILD",
            "WORKSPACE",
            "MODULE.bazel",
            "tools/setup_helpers/**",
            "tools/build_*",
            "tools/autograd/templates/**",
            "tools/autograd/*.py",
            "torchgen/**",
            "version.txt",
            "build_variables.bzl",
        ),
        description="build system and code generation",
    ),
    AreaRule(
        "third_party",
        "blind",
        ("third_party/**", ".gitmodules"),
        description="vendored libraries and submodule pins",
    ),
    AreaRule(
        "dispatcher",
        "blind",
        (
            "aten/src/ATen/core/dispatch/**",
            "aten/src/ATen/core/boxing/**",
            "aten/src/ATen/core/op_registration/**",
            "c10/core/DispatchKey*",
            "c10/core/impl/LocalDispatchKeySet*",
            "torch/csrc/utils/python_dispatch*",
            "torch/_ops.py",
            "torch/library.py",
            "torch/_library/**",
            "aten/src/ATen/native/**/DispatchStub*",
            "aten/src/ATen/native/Fallback*",
        ),
        description="dispatcher and operator registration",
    ),
    AreaRule(
        "core",
        "blind",
        (
            "c10/**",
            "aten/src/ATen/core/**",
            "aten/src/ATen/*",
            "aten/src/ATen/cpu/**",
            "aten/src/ATen/detail/**",
            "aten/src/ATen/native/TensorIterator*",
            "aten/src/ATen/native/cpu/Loops.h",
            "aten/src/ATen/native/cpu/Reduce.h",
            "aten/src/ATen/native/TensorFactories*",
            "aten/src/ATen/native/Copy*",
            "aten/src/ATen/native/Resize*",
            "torch/csrc/*",
            "torch/csrc/utils/**",
            "torch/csrc/autograd/python_variable*",
            "torch/_tensor.py",
            "torch/__init__.py",
            "torch/_C/**",
            "torch/overrides.py",
            "torch/utils/_python_dispatch.py",
        ),
        description="tensor core, TensorIterator, Python bindings",
    ),
    AreaRule(
        "aten_native",
        "targeted",
        ("aten/src/ATen/native/**",),
        unresolved_is_blind=True,
        description="aten native kernels",
    ),
    AreaRule(
        "autograd",
        "targeted",
        (
            "torch/csrc/autograd/**",
            "torch/autograd/**",
        ),
        unresolved_is_blind=True,
        description="autograd engine and functions",
    ),
    AreaRule(
        "refs_decomps",
        "targeted",
        (
            "torch/_refs/**",
            "torch/_decomp/**",
            "torch/_prims/**",
            "torch/_prims_common/**",
            "torch/_meta_registrations.py",
        ),
        description="python references, decompositions, prims, meta kernels",
    ),
    AreaRule(
        "compile",
        "targeted",
        (
            "torch/_dynamo/**",
            "torch/_inductor/**",
            "torch/fx/**",
            "torch/_functorch/**",
            "torch/_higher_order_ops/**",
            "torch/_subclasses/**",
            "torch/export/**",
            "torch/_export/**",
            "torch/csrc/dynamo/**",
            "torch/csrc/inductor/**",
        ),
        description="compile stack (dynamo, inductor, fx, aot autograd)",
    ),
    AreaRule(
        "test_db",
        "targeted",
        ("torch/testing/_internal/**",),
        description="OpInfo / ModuleInfo test database",
    ),
    AreaRule("nn", "targeted", ("torch/nn/**",), description="torch.nn"),
    AreaRule(
        "python_frontend",
        "targeted",
        (
            "torch/*.py",
            "torch/special/**",
            "torch/linalg/**",
            "torch/fft/**",
            "torch/masked/**",
            "torch/signal/**",
            "torch/utils/**",
        ),
        description="Python frontend",
    ),
    AreaRule("upstream_tests", "targeted", ("test/**",), description="upstream tests"),
    AreaRule(
        "tooling",
        "none",
        ("benchmarks/**", "tools/**", "android/**", "ios/**"),
        description="tools and benchmarks not in the wheel",
    ),
)

OTHER = AreaRule("other", "targeted", (), description="elsewhere")


def classify(path: str) -> AreaRule:
    """The first rule whose globs match `path` (OTHER when none does)."""
    for rule in AREA_RULES:
        if first_match(rule.globs, path) is not None:
            return rule
    return OTHER
