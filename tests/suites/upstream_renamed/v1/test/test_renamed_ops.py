"""Version 1 of an upstream-style test file; v2/ has the same file one release later (a test
renamed, a class renamed, two OpInfos renamed, a test added, a test removed, a test copied).
"""

import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

_UNARY = [op for op in op_db if op.name in ("abs", "neg")]


class TestShapes(TestCase):
    def test_ones_sum(self, device):
        self.assertEqual(torch.ones(3, device=device).sum().item(), 3.0)

    def test_zeros(self, device):
        self.assertEqual(torch.zeros(2, device=device).sum().item(), 0.0)

    def test_twin(self, device):
        self.assertEqual(torch.full((2,), 2.0, device=device).cpu(), torch.tensor([2.0, 2.0]))

    def test_stays(self, device):
        self.assertEqual(torch.arange(3, device=device).cpu().tolist(), [0, 1, 2])


class TestMathDeviceType(TestCase):
    @dtypes(torch.float32, torch.float16)
    def test_add(self, device, dtype):
        a = torch.ones(4, dtype=dtype, device=device)
        self.assertEqual((a + a).cpu(), torch.full((4,), 2.0, dtype=dtype))

    @dtypes(torch.float32, torch.float16)
    def test_mul(self, device, dtype):
        a = torch.full((4,), 3.0, dtype=dtype, device=device)
        self.assertEqual((a * a).cpu(), torch.full((4,), 9.0, dtype=dtype))


class TestUnary(TestCase):
    @ops(_UNARY, allowed_dtypes=(torch.float32,))
    def test_unary(self, device, dtype, op):
        sample = next(iter(op.sample_inputs("cpu", dtype)))
        expected = op(sample.input, *sample.args, **sample.kwargs)
        actual = op(sample.input.to(device), *sample.args, **sample.kwargs)
        self.assertEqual(actual.cpu(), expected)


instantiate_device_type_tests(TestShapes, globals())
instantiate_device_type_tests(TestMathDeviceType, globals())
instantiate_device_type_tests(TestUnary, globals())

if __name__ == "__main__":
    run_tests()
