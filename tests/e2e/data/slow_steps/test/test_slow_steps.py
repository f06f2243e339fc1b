"""Device-generic tests that each take one second: a shard a test can interrupt midway."""

import time

from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestSlowSteps(TestCase):
    pass


def _step(self, device):
    time.sleep(1.0)  # the step's length is the point: a run these tests keep busy


for _i in range(12):
    setattr(TestSlowSteps, f"test_step_{_i:02d}", _step)

instantiate_device_type_tests(TestSlowSteps, globals())

if __name__ == "__main__":
    run_tests()
