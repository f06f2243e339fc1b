"""A second PrivateUse1 backend for the tests, registered under another name: `otherdev`.

It is the emulator's machinery (`backend_under_test.register_as`) under a name nothing in the
project spells, so a run against it proves that the suites, the runner and the exports take
the device from configuration (`SPYRE_CI_BACKEND=otherdev SPYRE_CI_DEVICE=otherdev`). Each
process that registers it appends `<pid> <privateuse1 name>` to `$OTHERDEV_MARKER`.
"""

import os

import torch

import backend_under_test

backend_under_test.register_as("otherdev")

_marker = os.environ.get("OTHERDEV_MARKER")
if _marker:
    with open(_marker, "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()} {torch._C._get_privateuse1_backend_name()}\n")
