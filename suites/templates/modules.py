"""ModuleInfo templates: the forward check upstream test/test_modules.py makes, against CPU."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from suites.templates import Context
from suites.templates.compare import assert_close, reseed, tree_map


class NoModuleInputs(Exception):
    """The ModuleInfo yields no inputs for this dtype."""


def module_forward(info: Any, dtype: torch.dtype, device: str, ctx: Context) -> None:
    """TestModule.test_forward: a module moved to the device computes what it does on CPU."""
    reseed(0)
    inputs = info.module_inputs_func(
        info, device="cpu", dtype=dtype, requires_grad=False, training=False
    )
    ran = 0
    for module_input in inputs[: ctx.max_samples] if ctx.max_samples else inputs:
        if module_input.forward_input is None:
            continue
        c_args, c_kwargs = (
            module_input.constructor_input.args,
            module_input.constructor_input.kwargs,
        )
        reseed(0)
        module = info.module_cls(*c_args, **c_kwargs).to(dtype=dtype)
        module.eval()
        # Copy on the CPU first: the device has no allocator for deepcopy's raw storages.
        dev_module = copy.deepcopy(module).to(device)
        f_args = module_input.forward_input.args
        f_kwargs = module_input.forward_input.kwargs
        expected = module(*f_args, **f_kwargs)

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(device)

        actual = dev_module(*tree_map(move, f_args), **tree_map(move, f_kwargs))
        assert_close(
            actual,
            expected,
            dtype=dtype,
            atol=ctx.atol,
            rtol=ctx.rtol,
            what=f"module input {ran} ({module_input.desc or 'default'})",
        )
        ran += 1
    if not ran:
        raise NoModuleInputs("the ModuleInfo yields no forward inputs for this dtype")


TEMPLATES: dict[str, Callable[..., None]] = {"module_forward": module_forward}

APPLIES: dict[str, Callable[[Any, Any], bool]] = {
    "module_forward": lambda info, dt: dt in set(info.dtypes),
}
