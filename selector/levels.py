"""How high in PyTorch's stack a change or a test sits, for family matches.

Only two levels are safe to tell apart. `torch.nn` modules (level 1) are Python composed on
top of ops: a change to `nn.Linear`'s Python reaches tests that build `nn.Linear`, not the
`mm` kernel tests of its op family. Everything else is level 0. Finer levels (refs, the
Python frontend) leak: an OpInfo's alias check runs `nn.functional.softmax` inside the
`softmax` tests, and compile variants run decompositions whatever their subject, so a
frontend or decomposition change must still reach the whole family.
"""

from __future__ import annotations

LEVEL_OP = 0
LEVEL_MODULE = 1


def source_level(path: str) -> int:
    """The level of a changed file."""
    return LEVEL_MODULE if path.startswith("torch/nn/modules/") else LEVEL_OP


def subject_level(subject: str) -> int:
    """The level a variant's subject tests at: `nn.Linear` 1, any op 0."""
    return LEVEL_MODULE if subject.startswith("nn.") and subject[3:4].isupper() else LEVEL_OP
