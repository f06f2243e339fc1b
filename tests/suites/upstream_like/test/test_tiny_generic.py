"""Device-generic patterns of PyTorch's test/ folder: tuple dtypes from
`@dtypes(*product(...))`, `@onlyCPU`, `@onlyNativeDeviceTypes`, `skipIf`, `@ops` over an OpInfo
list, and a class upstream instantiates `only_for` other devices.
"""

import unittest
from itertools import product

import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    onlyCPU,
    onlyNativeDeviceTypes,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

_UNARY = [op for op in op_db if op.name in ("abs", "neg")]


class TestGeneric(TestCase):
    @dtypes(*product((torch.int32, torch.int64), (torch.float32, torch.float16)))
    def test_index_dtypes(self, device, dtypes):
        index_dtype, value_dtype = dtypes
        values = torch.arange(4, dtype=value_dtype).to(device)
        index = torch.tensor([0, 2], dtype=index_dtype).to(device)
        self.assertEqual(values[index].cpu(), torch.tensor([0, 2], dtype=value_dtype))

    @onlyCPU
    def test_only_cpu(self, device):
        self.assertEqual(torch.ones(1, device=device).cpu(), torch.ones(1))

    @onlyNativeDeviceTypes
    @dtypes(torch.float32)
    def test_native_only(self, device, dtype):
        self.assertEqual(torch.zeros(2, dtype=dtype, device=device).sum().item(), 0.0)

    @unittest.skipIf(True, "skipped upstream on every device")
    def test_skip_if(self, device):
        raise AssertionError("never runs")

    @ops(_UNARY, allowed_dtypes=(torch.float32, torch.float16, torch.bfloat16))
    def test_unary(self, device, dtype, op):
        sample = next(iter(op.sample_inputs("cpu", dtype)))
        expected = op(sample.input, *sample.args, **sample.kwargs)
        actual = op(sample.input.to(device), *sample.args, **sample.kwargs)
        self.assertEqual(actual.cpu(), expected)


class TestCpuOnlyUpstream(TestCase):
    def test_restricted(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)


instantiate_device_type_tests(TestGeneric, globals())
instantiate_device_type_tests(TestCpuOnlyUpstream, globals(), only_for=("cpu",))

if __name__ == "__main__":
    run_tests()
