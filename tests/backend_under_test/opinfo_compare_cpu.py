"""Upstream's OpInfo compare-with-CPU test, instantiated for the spyre device.

Not collected by the default run (the file name does not start with `test_`): the slow
sweep (`test_opinfo_sweep.py`) runs it in a pytest subprocess. The class and test names are
upstream's (`TestCommon`, `test_compare_cpu`) so that every OpInfo skip and xfail keyed on
them applies here too; other names would lose them and report false failures.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

import backend_under_test  # noqa: F401  (registers spyre even with autoloading disabled)

SWEEP_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# upstream compares with these tolerances (the test is slow and must not be flaky)
TOLERANCE = 1e-3


def _to_cpu(value: Any) -> Any:
    return value.to("cpu") if isinstance(value, torch.Tensor) else value


class TestCommon(TestCase):
    @ops(op_db, allowed_dtypes=SWEEP_DTYPES)
    def test_compare_cpu(self, device: str, dtype: torch.dtype, op: Any) -> None:
        for sample in op.reference_inputs(device, dtype):
            host_sample = sample.transform(_to_cpu)
            on_device = sample.output_process_fn_grad(
                op(sample.input, *sample.args, **sample.kwargs)
            )
            on_host = host_sample.output_process_fn_grad(
                op(host_sample.input, *host_sample.args, **host_sample.kwargs)
            )
            self.assertEqual(on_device, on_host, atol=TOLERANCE, rtol=TOLERANCE)


instantiate_device_type_tests(TestCommon, globals(), only_for=("privateuse1",))

if __name__ == "__main__":
    run_tests()
