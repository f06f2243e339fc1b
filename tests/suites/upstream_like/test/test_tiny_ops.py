"""A small device-generic test file in the layout of PyTorch's test/ folder.

It is instantiated for the device under test the way upstream files are: a generic class,
`instantiate_device_type_tests`, `@ops` over op_db and `@dtypes`.
"""

import time

import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

_OPS = [op for op in op_db if op.name in ("add", "mul", "sub", "div")]


class TestTiny(TestCase):
    def test_ones(self, device):
        self.assertEqual(torch.ones(3, device=device).sum().item(), 3.0)

    @dtypes(torch.float32, torch.float16)
    def test_add_scalar(self, device, dtype):
        x = torch.arange(4, dtype=dtype).to(device)
        self.assertEqual((x + 1).cpu(), torch.arange(1, 5, dtype=dtype))

    def assertOnCpu(self, tensor):  # noqa: N802 - upstream assertion-helper style
        self.assertEqual(tensor.device.type, "cpu")

    @dtypes(torch.float32)
    def test_device_compare(self, device, dtype):
        # Passes only when edits.functions.cpu_move wraps assertOnCpu.
        self.assertOnCpu(torch.ones(2, dtype=dtype).to(device))

    @dtypes(torch.float32)
    def test_wrong(self, device, dtype):
        self.assertEqual(torch.zeros(2, dtype=dtype, device=device).cpu(), torch.ones(2))

    def test_hangs(self, device):
        while True:  # a test that never ends: the runner's timeout is what is tested
            time.sleep(0.05)

    @ops(_OPS, allowed_dtypes=(torch.float32, torch.bfloat16))
    def test_vs_cpu(self, device, dtype, op):
        for sample in op.sample_inputs("cpu", dtype):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            moved = sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)
            actual = op(moved.input, *moved.args, **moved.kwargs)
            self.assertEqual(actual.cpu(), expected, atol=1e-2, rtol=1e-2)
            break


instantiate_device_type_tests(TestTiny, globals())

if __name__ == "__main__":
    run_tests()
