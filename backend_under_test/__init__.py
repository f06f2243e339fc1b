"""The emulated IBM Spyre device: a PyTorch PrivateUse1 backend named `spyre`.

`import backend_under_test` registers the device; so does a plain `import torch`, through
the `torch.backends` entry point `backend_under_test:_autoload`. After registration,
`torch.randn(4, 4).to("spyre")` is a plain `torch.Tensor` on `spyre:0`, `torch.spyre` is the
device module, and `torch.compile(fn, backend="spyre")` compiles for it.

Nothing at module level imports torch: `import torch` itself calls `_autoload` while this
package may still be importing, so the entry point must exist before torch is touched.
"""

from __future__ import annotations

from typing import Any

DEVICE_NAME = "spyre"
_state = {"registered": False, "registering": False}
_libraries: list[Any] = []  # keep torch.library registrations alive


def _autoload() -> None:
    """Entry point of the `torch.backends` group, called by a plain `import torch`."""
    register()


def register() -> None:
    """Register the `spyre` device with PyTorch (idempotent)."""
    import torch  # a plain import may re-enter register() via _autoload and finish it

    if _state["registered"] or _state["registering"]:
        return
    _state["registering"] = True
    try:
        _register(torch)
        _state["registered"] = True
    finally:
        _state["registering"] = False


def _register(torch: Any) -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", DEVICE_NAME):
        raise RuntimeError(
            f"cannot register the spyre device: PrivateUse1 is already taken by {current!r} "
            "(only one PrivateUse1 backend can be loaded per process)"
        )
    from backend_under_test import device, kernels, registration

    if current != DEVICE_NAME:
        torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    kernels._DEVICE_TYPE = DEVICE_NAME
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    torch._register_device_module(DEVICE_NAME, device)
    torch._C._acc.register_python_privateuseone_hook(registration.Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(registration.Guard())
    _libraries.extend(registration.register_kernels())
    registration.patch_host_entry_points()
    registration.register_compile_backend()


def is_registered() -> bool:
    """Whether the `spyre` device is registered in this process."""
    return _state["registered"]


register()
