"""The one compiled module: the `spyre` device's small-op path (backend_under_test/_fastpath.c).

Everything else is in pyproject.toml. The module uses the CPython API only (no torch
headers), so one build serves every torch. It is optional: where it cannot be built (no C
compiler), pip says so and installs the rest, and the device runs the Python version of the
same path (backend_under_test/kernels.py, `_fast_call_python`).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "backend_under_test._fastpath",
            ["backend_under_test/_fastpath.c"],
            optional=True,
        )
    ]
)
