"""A test file written for another torch: it imports a name this torch's testing internals do
not have (as a copy of test_torch.py newer than the installed torch does)."""

import torch
from torch.testing._internal.common_utils import TestCase, run_tests, skipIfNoSuchHelper


class TestNewer(TestCase):
    @skipIfNoSuchHelper
    def test_never_collected(self):
        self.assertEqual(torch.ones(1).item(), 1.0)


if __name__ == "__main__":
    run_tests()
