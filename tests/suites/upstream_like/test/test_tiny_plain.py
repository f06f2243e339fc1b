"""Plain test classes in the layout of PyTorch's test/ folder: nothing here is passed to
`instantiate_device_type_tests`, as in test_autocast.py or test/nn/test_init.py.
"""

import torch
from torch.testing._internal.common_nn import NNTestCase
from torch.testing._internal.common_utils import (
    TestCase,
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
)


def _double(t):
    return t * 2


class TestPlain(TestCase):
    def test_ones_sum(self):
        self.assertEqual(torch.ones(3).sum().item(), 3.0)

    def test_uses_helper(self):
        self.assertEqual(_double(torch.ones(2)), torch.full((2,), 2.0))

    def test_other_helper_user(self):
        self.assertEqual(_double(torch.zeros(1)), torch.zeros(1))

    def test_skipped_by_config(self):
        raise AssertionError("listed with mode skip: never generated")


class TestPlainNN(NNTestCase):
    def test_linear_shape(self):
        layer = torch.nn.Linear(3, 2)
        self.assertEqual(layer(torch.ones(1, 3)).shape, (1, 2))


class TestPlainParametrized(TestCase):
    @parametrize("n", [1, 2])
    def test_arange_len(self, n):
        self.assertEqual(len(torch.arange(n)), n)


instantiate_parametrized_tests(TestPlainParametrized)

if __name__ == "__main__":
    run_tests()
