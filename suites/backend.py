"""The backend under test, as the suites see it: its package and its device name.

    SPYRE_CI_BACKEND=backend_under_test   the package that registers the PrivateUse1 device
    SPYRE_CI_DEVICE=spyre                 the device's name (what tensors are moved `.to()`)

The bundled emulated Spyre is the default. Another installed PrivateUse1 backend (a real
`torch_spyre` names its device `spyre` too) is imported by the plugin when `import torch`
has not registered it through its entry point; the bundled one then stays out of the way
(`backend_under_test._autoload`). Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

BACKEND_VAR, DEVICE_VAR = "SPYRE_CI_BACKEND", "SPYRE_CI_DEVICE"
BUNDLED_BACKEND, BUNDLED_DEVICE = "backend_under_test", "spyre"


def backend_package(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(BACKEND_VAR) or BUNDLED_BACKEND


def device_name(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(DEVICE_VAR) or BUNDLED_DEVICE


def our_devices(environ: Mapping[str, str] | None = None) -> frozenset[str | None]:
    """Device types an upstream decorator may name to apply to the device under test."""
    return frozenset({None, device_name(environ), "privateuse1"})
