"""The compiled small-op path (`_fastpath.c`), where `pip install` built it.

It is the same path as the Python one in `kernels.py` and `memory.py` without the
interpreter: `fast_call` and `Kernel` stand in for `kernels._fast_call_python` and
`kernels.kernel_for`'s closure; `Live`, `MemoryCounters`, `register` and `released` for
their namesakes in `memory.py`. It uses the CPython API only, so one build serves every
torch.

`FASTPATH` is the module, or None where the Python path runs instead:
- it was not built (no C compiler when the package was installed);
- the build is stale: its `ABI` is not the one this Python code was written for, or
  `_fastpath.c` beside it changed since it was built (a reinstall rebuilds it);
- `SPYRE_EMU_PYTHON_PATH=1` asks for the Python path (to compare the two, or to rule the
  compiled one out when a result looks wrong).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from types import ModuleType

ABI = 1  # FASTPATH_ABI in _fastpath.c
PYTHON_PATH_ENV = "SPYRE_EMU_PYTHON_PATH"


def _load() -> ModuleType | None:
    if os.environ.get(PYTHON_PATH_ENV, "") not in ("", "0"):
        return None
    try:
        from backend_under_test import _fastpath
    except ImportError:
        return None
    stale = _stale(_fastpath)
    if stale:
        warnings.warn(
            f"{_fastpath.__file__} is not a build of this source ({stale}); the Python path "
            "runs instead. Reinstall the package (pip install -e .) to rebuild it.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return _fastpath


def _stale(module: ModuleType) -> str:
    """Why a build is not the one this code runs with ("" when it is)."""
    abi = getattr(module, "ABI", None)
    if abi != ABI:
        return f"it offers ABI {abi}, this code wants {ABI}"
    source = Path(__file__).with_name("_fastpath.c")
    if source.exists():
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        if getattr(module, "SOURCE_SHA256", None) != digest:
            return f"{source.name} changed since it was built"
    return ""


FASTPATH = _load()
