"""`@ops` tests whose dtypes upstream restricts (`allowed_dtypes`), as the ufunc and view
files do; a config widens them with `edits.dtypes.include` and `supported_ops[].dtypes`."""

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

_PAIR = [op for op in op_db if op.name in ("abs", "neg")]


class TestWiden(TestCase):
    def assert_kept_dtype(self, t, dtype):
        self.assertEqual(t.cpu().dtype, dtype)

    @ops(_PAIR, allowed_dtypes=(torch.float32,))
    def test_float32_only(self, device, dtype, op):
        sample = next(iter(op.sample_inputs("cpu", dtype)))
        expected = op(sample.input, *sample.args, **sample.kwargs)
        actual = op(sample.input.to(device), *sample.args, **sample.kwargs)
        self.assertEqual(actual.cpu(), expected)

    @ops(_PAIR, allowed_dtypes=(torch.float32,))
    def test_not_widened(self, device, dtype, op):
        self.assert_kept_dtype(op(torch.ones(2, dtype=dtype, device=device)), dtype)


instantiate_device_type_tests(TestWiden, globals())

if __name__ == "__main__":
    run_tests()
