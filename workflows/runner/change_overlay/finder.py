"""The test-process side of an applied change: a meta-path finder that serves the changed
modules of the installed torch from the change's text, before anything imports torch.

`site/sitecustomize.py` calls `activate()` at interpreter start when `$SPYRE_CI_CHANGE`
names an activation file (`prepare.prepare` writes it). A changed module is found where the
installed one is (its `__file__` is the installed path) and compiled from the changed text,
never written to `__pycache__`; its lines go into `linecache`, so tracebacks and
`inspect.getsource` show the changed code. A new module is served from the change alone; a
deleted one cannot be imported. Nothing here imports torch.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import linecache
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

CHANGE_VAR = "SPYRE_CI_CHANGE"
_ACTIVE: dict[str, Any] = {}


class ChangedLoader(importlib.machinery.SourceFileLoader):
    """Loads a module from its installed path, with the code compiled from changed text."""

    def __init__(self, fullname: str, path: str, text: str) -> None:
        super().__init__(fullname, path)
        self._text = text

    def get_source(self, fullname: str) -> str:
        return self._text

    def get_code(self, fullname: str) -> Any:
        # The installed file's bytecode cache is neither read (it holds the original) nor
        # written (the install stays untouched).
        lines = self._text.splitlines(keepends=True)
        linecache.cache[self.path] = (len(self._text), None, lines, self.path)
        return compile(self._text, self.path, "exec", dont_inherit=True)


class ChangeFinder(importlib.abc.MetaPathFinder):
    """Serves `module -> changed text` for the modules of one change; refuses deleted ones."""

    def __init__(self, modules: Sequence[Mapping[str, Any]], deleted: Sequence[str] = ()) -> None:
        self._modules = {str(m["module"]): dict(m) for m in modules}
        self._deleted = set(deleted) - set(self._modules)
        self.loaded: list[str] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname in self._deleted:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (the applied change deletes it)", name=fullname
            )
        entry = self._modules.get(fullname)
        if entry is None:
            return None
        with open(entry["source"], encoding="utf-8") as fh:
            text = fh.read()
        origin = str(entry["origin"])
        if entry.get("new"):
            package = [os.path.dirname(origin)] if entry.get("package") else None
            spec = importlib.util.spec_from_file_location(
                fullname,
                origin,
                loader=ChangedLoader(fullname, origin, text),
                submodule_search_locations=package,
            )
        else:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.origin is None:
                return None
            if os.path.realpath(spec.origin) != os.path.realpath(origin):
                return None  # another torch than the change was prepared for: leave it
            spec.loader = ChangedLoader(fullname, spec.origin, text)
        self.loaded.append(fullname)
        return spec


def activate(path: str) -> ChangeFinder | None:
    """Apply the change of the activation file `path` to this process (the test process's
    `sitecustomize` hands in `$SPYRE_CI_CHANGE`): its finder goes first on `sys.meta_path`.
    Once per process; None when `path` is empty."""
    if not path:
        return None
    if "finder" in _ACTIVE:
        finder: ChangeFinder = _ACTIVE["finder"]
        return finder
    with open(path, encoding="utf-8") as fh:
        activation = json.load(fh)
    finder = ChangeFinder(activation.get("modules") or (), activation.get("deleted") or ())
    _ACTIVE.update({"id": activation.get("id"), "path": path, "finder": finder})
    sys.meta_path.insert(0, finder)
    return finder


def status() -> dict[str, Any]:
    """What this process applied (for tests and diagnostics)."""
    finder = _ACTIVE.get("finder")
    return {
        "id": _ACTIVE.get("id"),
        "activation": _ACTIVE.get("path"),
        "loaded": list(finder.loaded) if finder else [],
    }
