"""Version 2 of v1/test/test_renamed_ops.py: `test_ones_sum` is `test_ones_total`, the class
`TestMathDeviceType` is `TestMathDevice`, the OpInfo `abs` is `absolute` (same definition)
and `neg` is `negative` (another op function, `neg` among its aliases), `test_zeros` is gone,
`test_arange_len` is new, and `test_twin` has two copies under new names.
"""

import copy

import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.testing._internal.opinfo.core import AliasInfo


def _renamed(name, new_name, op=None):
    info = copy.copy(next(o for o in op_db if o.name == name))
    info.name = new_name
    info.aliases = (AliasInfo(name),)
    if op is not None:
        info.op = op
    return info


_UNARY = [_renamed("abs", "absolute"), _renamed("neg", "negative", torch.negative)]


class TestShapes(TestCase):
    def test_ones_total(self, device):
        self.assertEqual(torch.ones(3, device=device).sum().item(), 3.0)

    def test_twin_left(self, device):
        self.assertEqual(torch.full((2,), 2.0, device=device).cpu(), torch.tensor([2.0, 2.0]))

    def test_twin_right(self, device):
        self.assertEqual(torch.full((2,), 2.0, device=device).cpu(), torch.tensor([2.0, 2.0]))

    def test_stays(self, device):
        self.assertEqual(torch.arange(3, device=device).cpu().tolist(), [0, 1, 2])

    def test_arange_len(self, device):
        self.assertEqual(len(torch.arange(5, device=device)), 5)


class TestMathDevice(TestCase):
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
instantiate_device_type_tests(TestMathDevice, globals())
instantiate_device_type_tests(TestUnary, globals())

if __name__ == "__main__":
    run_tests()
