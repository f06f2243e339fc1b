"""The emulated IBM Spyre device: a PyTorch PrivateUse1 backend named `spyre`.

`import backend_under_test` registers the device; so does a plain `import torch`, through
the `torch.backends` entry point `backend_under_test:_autoload`. After registration,
`torch.randn(4, 4).to("spyre")` is a plain `torch.Tensor` on `spyre:0`, `torch.spyre` is the
device module, and `torch.compile(fn, backend="spyre")` compiles for it.

Nothing at module level imports torch: `import torch` itself calls `_autoload` while this
package may still be importing, so the entry point must exist before torch is touched.

When another PrivateUse1 backend is the one under test (`$SPYRE_CI_BACKEND` names another
package), neither the import nor the entry point registers `spyre`: only one PrivateUse1
backend can be loaded per process. `register_as(name)` registers this emulator under another
device name (what the tests of a second backend use).
"""

from __future__ import annotations

import os
from typing import Any

DEVICE_NAME = "spyre"
BACKEND_VAR = "SPYRE_CI_BACKEND"  # the package of the backend under test (default: this one)
_state = {"registered": False, "registering": False}
_libraries: list[Any] = []  # keep torch.library registrations alive


def _autoload() -> None:
    """Entry point of the `torch.backends` group, called by a plain `import torch`."""
    if _is_the_backend_under_test():
        register()


def _is_the_backend_under_test() -> bool:
    return os.environ.get(BACKEND_VAR, __name__) in ("", __name__)


def register() -> None:
    """Register the `spyre` device with PyTorch (idempotent)."""
    register_as(DEVICE_NAME)


def register_as(name: str) -> None:
    """Register the emulated device under `name` (idempotent; `spyre` by default)."""
    import torch  # a plain import may re-enter register() via _autoload and finish it

    if _state["registered"] or _state["registering"]:
        return
    _state["registering"] = True
    try:
        _register(torch, name)
        _state["registered"] = True
    finally:
        _state["registering"] = False


def _register(torch: Any, name: str) -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", name):
        raise RuntimeError(
            f"cannot register the {name} device: PrivateUse1 is already taken by {current!r} "
            "(only one PrivateUse1 backend can be loaded per process)"
        )
    from backend_under_test import device, kernels, registration

    if current != name:
        torch.utils.rename_privateuse1_backend(name)
    kernels._DEVICE_TYPE = device.DEVICE_NAME = name
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    torch._register_device_module(name, device)
    torch._C._acc.register_python_privateuseone_hook(registration.Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(registration.Guard())
    _libraries.extend(registration.register_kernels())
    registration.patch_host_entry_points()
    registration.register_compile_backend(name)


def is_registered() -> bool:
    """Whether the `spyre` device is registered in this process."""
    return _state["registered"]


if _is_the_backend_under_test():
    register()
