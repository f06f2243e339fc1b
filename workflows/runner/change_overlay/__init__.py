"""The change under test, applied to the installed torch without a build.

    change = prepare(diff_text, torch_root)        # what applies, what cannot, the overlay
    env = change.env()                             # a test process imports the changed torch

`prepare` sorts the change's files (applied Python modules, files only a build brings, files
outside the installed torch) and writes an overlay folder; a test process started with
`change.env()` runs `site/sitecustomize.py`, which puts `finder.ChangeFinder` first on
`sys.meta_path` before anything imports torch. The installed files are never written.
"""

from workflows.runner.change_overlay.prepare import (
    CHANGE_VAR,
    NO_CHANGE,
    NO_LAYER,
    AppliedChange,
    ChangeError,
    FileEffect,
    Layer,
    file_kind,
    prepare,
    prepare_layer,
)

__all__ = [
    "CHANGE_VAR",
    "NO_CHANGE",
    "NO_LAYER",
    "Layer",
    "prepare_layer",
    "AppliedChange",
    "ChangeError",
    "FileEffect",
    "file_kind",
    "prepare",
]
