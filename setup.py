"""The one compiled module: the `spyre` device's small-op path (backend_under_test/_fastpath.c).

Everything else is in pyproject.toml. The module uses the CPython API only (no torch
headers), so one build serves every torch. It is optional: where it cannot be built (no C
compiler), pip says so and installs the rest, and the device runs the Python version of the
same path (backend_under_test/kernels.py, `_fast_call_python`).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "backend_under_test/_fastpath.c"
# The build carries the digest of the source it was built from: backend_under_test/compiled.py
# runs it only while that source is unchanged (an edited source not yet rebuilt is ignored).
DIGEST = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "backend_under_test._fastpath",
            [SOURCE],
            define_macros=[("FASTPATH_SOURCE_SHA256", f'"{DIGEST}"')],
            optional=True,
        )
    ]
)
