"""The benchmark's mutations apply their hunks as a run applies a change's:
`workflows.runner.change_overlay.patching` is the one implementation."""

from workflows.runner.change_overlay.patching import PatchError, apply_patch

__all__ = ["PatchError", "apply_patch"]
