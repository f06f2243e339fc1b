"""The change under test, applied to the installed torch without a build.

    change = prepare(diff_text, torch_root, tests=UpstreamTests(checkout, reused))
    env = change.env()                             # a test process imports the changed torch

`prepare` sorts the change's files (applied Python modules, files only a build brings, files
outside the installed torch, upstream test files the suites reuse) and writes an overlay
folder; a test process started with `change.env()` runs `site/sitecustomize.py`, which puts
`finder.ChangeFinder` first on `sys.meta_path` before anything imports torch, and imports
the edited upstream tests from the overlay's mirror of TORCH_ROOT. The installed files and
the checkout are never written.
"""

from workflows.runner.change_overlay.hunks import ChangeError
from workflows.runner.change_overlay.kinds import beside_reused, file_kind, upstream_test_file
from workflows.runner.change_overlay.prepare import (
    CHANGE_VAR,
    NO_CHANGE,
    NO_LAYER,
    TREE_VAR,
    AppliedChange,
    FileEffect,
    Layer,
    UpstreamTests,
    prepare,
    prepare_layer,
)

__all__ = [
    "CHANGE_VAR",
    "NO_CHANGE",
    "NO_LAYER",
    "TREE_VAR",
    "Layer",
    "UpstreamTests",
    "upstream_test_file",
    "beside_reused",
    "prepare_layer",
    "AppliedChange",
    "ChangeError",
    "FileEffect",
    "file_kind",
    "prepare",
]
