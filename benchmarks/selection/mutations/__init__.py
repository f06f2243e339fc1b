"""Mutations of PyTorch for the selection benchmark (`python -m benchmarks.selection`).

A mutation is a real upstream-style edit: a unified diff in PyTorch's repository layout
(what the selector sees) plus how to make it happen in a test subprocess, and only there:

* `python`: the diff is applied to the installed torch source in memory and the module is
  imported from the mutated text through a meta-path finder (`overlay.py`), activated by an
  environment variable; the installed files are never written.
* `kernel`: an aten C++ kernel edit cannot be rebuilt here; it is emulated by a
  `torch.library` override on the CPU key that calls the original kernel and perturbs its
  result (`overlay.py`). The diff shows the corresponding `aten/src/ATen/native/...` or
  `native_functions.yaml` edit.

    from benchmarks.selection.mutations import load_mutations, subprocess_env
    mutations = load_mutations("benchmarks/selection/mutations.yaml")
    env = subprocess_env(mutations[0], workdir)   # pass to workflows.runner.shard_runner.run_shard
"""

from benchmarks.selection.mutations.model import (
    ENV_VAR,
    Mutation,
    MutationError,
    Perturbation,
    load_mutations,
    mutated_source,
    subprocess_env,
    torch_root,
)
from selector.patches import apply_patch

__all__ = [
    "ENV_VAR",
    "Mutation",
    "MutationError",
    "Perturbation",
    "apply_patch",
    "load_mutations",
    "mutated_source",
    "subprocess_env",
    "torch_root",
]
