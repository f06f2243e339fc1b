"""From a change (its unified diff) to an overlay of the installed torch: what applies, what
cannot, and the files a test process needs to import the changed modules.

Every file of the change falls in one of three groups:

* **applied**: a Python module of an installed package (`torch/`, `functorch/`): its hunks
  are applied to the installed file's text (`patching.apply_patch`) and the result is
  written into the overlay folder; new modules, deleted modules and renames are applied too.
  A file the diff gives in several sections (`git log -p --reverse`) gets them in the diff's
  order, each over the text the ones before it made, as `selector.diff` reads them.
* **not applied**: what only a build of torch would bring (C++/CUDA sources and headers,
  `native_functions.yaml` and the other codegen inputs, `torchgen/`, build files), and any
  file of the installed packages that is not a Python module. A run names each of them.
* **no effect**: files outside the installed torch (upstream's own `test/`, docs, CI
  configuration, type stubs): the torch under test is the same with or without them.

The overlay is keyed by the diff and the installed torch, so the same change prepared on
another machine, or again for a resumed run, lands in the same folder with the same files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from selector import SelectorError
from selector.diff import FilePatch, parse_unified_diff, repository_path
from workflows.runner.change_overlay.patching import PatchError, apply_patch
from workflows.settings import child_environment

CHANGE_VAR = "SPYRE_CI_CHANGE"  # the activation file a test process applies at start
SITE_DIR = Path(__file__).resolve().parent / "site"
ACTIVATION_FILE = "activation.json"
FORMAT = 1

# Installed packages of the torch wheel whose Python modules are applied at import time.
RUNTIME_PACKAGES = ("torch", "functorch")
# Paths (first part) that only change torch through a build.
_BUILD_DIRS = ("aten", "c10", "caffe2", "cmake", "third_party", "torchgen", "tools", "android")
_BUILD_SUFFIXES = (
    ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".mm", ".m",
    ".metal", ".S", ".asm", ".cmake", ".in", ".bzl", ".bazel", ".ptx",
)  # fmt: skip
_BUILD_NAMES = (
    "CMakeLists.txt", "setup.py", "pyproject.toml", "setup.cfg", "version.txt", "BUILD",
    "BUILD.bazel", "WORKSPACE", "MODULE.bazel", "Makefile", "requirements.txt",
    "requirements-build.txt", "build.ninja",
)  # fmt: skip


class ChangeError(Exception):
    """The change cannot be applied as given: bad input (exit code 2). The message names the
    file and the hunk."""


@dataclass(frozen=True)
class FileEffect:
    path: str
    status: str  # added | modified | removed | renamed | copied
    why: str  # what happened to it, in a few words
    module: str | None = None  # the module an applied file is
    previous_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "status": self.status, "why": self.why}
        if self.module:
            data["module"] = self.module
        if self.previous_path:
            data["previous_path"] = self.previous_path
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FileEffect:
        return cls(
            str(data["path"]),
            str(data.get("status", "modified")),
            str(data.get("why", "")),
            data.get("module"),
            data.get("previous_path"),
        )


@dataclass(frozen=True)
class AppliedChange:
    """What a change does to the torch under test; `folder` holds the overlay when any file
    applied (`activation.json` and the changed modules' texts)."""

    id: str
    applied: tuple[FileEffect, ...] = ()
    not_applied: tuple[FileEffect, ...] = ()
    no_effect: tuple[FileEffect, ...] = ()
    folder: str = ""
    broken: tuple[str, ...] = field(default=())  # changed modules that do not compile

    @property
    def state(self) -> str:
        """`applied` (every file that changes torch), `partial`, `not_applied` (none of
        them could be), or `none` (nothing in the change touches the torch under test)."""
        if self.not_applied:
            return "partial" if self.applied else "not_applied"
        return "applied" if self.applied else "none"

    def env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment additions that make a Python process import torch with the change
        (its PYTHONPATH that of `environ`, default: the one it inherits, with the overlay's
        site folder first); empty when nothing applied."""
        if not self.folder:
            return {}
        environ = child_environment() if environ is None else environ
        paths = [str(SITE_DIR)] + [
            p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SITE_DIR)
        ]
        return {
            CHANGE_VAR: str(Path(self.folder) / ACTIVATION_FILE),
            "PYTHONPATH": os.pathsep.join(paths),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "applied": [f.to_json() for f in self.applied],
            "not_applied": [f.to_json() for f in self.not_applied],
            "no_effect": [f.to_json() for f in self.no_effect],
            "broken": list(self.broken),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AppliedChange:
        return cls(
            str(data.get("id", "")),
            tuple(FileEffect.from_json(f) for f in data.get("applied") or ()),
            tuple(FileEffect.from_json(f) for f in data.get("not_applied") or ()),
            tuple(FileEffect.from_json(f) for f in data.get("no_effect") or ()),
            broken=tuple(str(b) for b in data.get("broken") or ()),
        )


NO_CHANGE = AppliedChange("")


def file_kind(path: str) -> str:
    """`python` (an installed module), `build` (needs a build), `other` (a non-module file of
    an installed package: not applied either), or `outside` (not part of the installed
    torch). Pure: by the repository path alone."""
    posix = PurePosixPath(path)
    parts = posix.parts
    if not parts:
        return "outside"
    top, name = parts[0], posix.name
    if top in RUNTIME_PACKAGES:
        if len(parts) > 1 and parts[1] == "csrc":
            return "build"
        if name.endswith(".py"):
            return "python"
        if name.endswith((".pyi", ".md", ".rst", ".typed")):
            return "outside"  # type stubs and docs: nothing runs them
        if name.endswith(_BUILD_SUFFIXES) or name in _BUILD_NAMES:
            return "build"
        return "other"
    if top in _BUILD_DIRS or name in _BUILD_NAMES or name.endswith(_BUILD_SUFFIXES):
        return "build"
    if name.endswith((".yaml", ".yml")) and top not in (".github", ".ci", "docs", "test"):
        return "build"  # codegen inputs (`native_functions.yaml` lives under aten/, but not only)
    return "outside"


def module_name(path: str) -> str:
    """`torch/nn/functional.py` -> `torch.nn.functional`; a package's `__init__.py` is the
    package."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


_WHY_BUILD = "needs a build of torch (C++/CUDA, codegen input or build file)"
_WHY_OTHER = "not a Python module of the installed torch: only a build or install brings it"
WHY_OUTSIDE = "not part of the installed torch (no effect on the torch under test)"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def check_hunk_counts(diff_text: str, source: str) -> None:
    """Every hunk holds exactly the lines its header counts (ChangeError otherwise, naming
    the file, the hunk and the diff's line): a hand-edited or cut diff is refused before
    anything is applied."""
    lines = diff_text.splitlines()
    current = "?"
    number = 0
    pos = 0
    while pos < len(lines):
        line = lines[pos]
        if line.startswith("diff --git "):
            current, number = _shown(line.split(" b/", 1)[-1]), 0
        elif line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            name = line[4:].split("\t", 1)[0].strip()
            current = _shown(name[2:] if name.startswith(("a/", "b/")) else name)
        match = _HUNK.match(line)
        if not match:
            pos += 1
            continue
        number += 1
        old = int(match.group(2) or 1) if match.group(2) != "0" else 0
        new = int(match.group(4) or 1) if match.group(4) != "0" else 0
        start, pos = pos, pos + 1
        seen_old = seen_new = 0
        while pos < len(lines):
            body = lines[pos]
            if body.startswith(("@@", "diff --git ")) or (
                body.startswith("--- ") and pos + 1 < len(lines) and lines[pos + 1][:4] == "+++ "
            ):
                break
            tag = body[:1]
            if tag == "\\":
                pass
            elif tag == "+":
                seen_new += 1
            elif tag == "-":
                seen_old += 1
            elif tag == " " or body == "":
                if body == "" and seen_old >= old and seen_new >= new:
                    break  # a blank line after a complete hunk: not part of it
                seen_old += 1
                seen_new += 1
            else:
                break
            pos += 1
        if (seen_old, seen_new) != (old, new):
            raise ChangeError(
                f"{source}:{start + 1}: {current}: hunk {number} ({line.split('@@')[1].strip()})"
                f" counts {old} old and {new} new lines but holds {seen_old} and {seen_new}: "
                "the diff is cut or was edited by hand; make it again with `git diff`"
            )


def _shown(name: str) -> str:
    """A diff's file name as the change's files are listed (the parser has refused the
    names it cannot resolve)."""
    try:
        return repository_path(name)
    except SelectorError:
        return name


@dataclass(frozen=True)
class Layer:
    """Module texts a change is applied over instead of the installed files' (the upstream
    drift from a build to the change's base): path -> new text, None for a removed module.
    `id` keys the overlays made over it."""

    id: str
    texts: Mapping[str, str | None] = field(default_factory=dict)


NO_LAYER = Layer("")


def prepare(diff_text: str | None, torch_root: Path, **options: Any) -> AppliedChange:
    """The change `diff_text` over the installed torch under `torch_root` (site-packages),
    or over the layer `under` where it has a file; `options` those of `prepare_layer`.

    `strict` (a diff the user gave): a hunk that does not apply, a module that is not there,
    a cut hunk are ChangeErrors. Otherwise (an event's compare diff, made against upstream's
    base, rarely the installed torch) such a file is not applied and named with the reason.
    The overlay (the layer's modules and the change's over them) is written under
    `cache_dir` (default: the system's temporary folder) in a folder named by the change,
    the layer and the torch, once."""
    return prepare_layer(diff_text, torch_root, **options)[0]


def prepare_layer(
    diff_text: str | None,
    torch_root: Path,
    *,
    source: str = "<diff>",
    strict: bool = True,
    torch_sha: str = "",
    cache_dir: Path | None = None,
    under: Layer = NO_LAYER,
) -> tuple[AppliedChange, Layer]:
    """`prepare`, and the layer the result makes (`under` with the change's files over it):
    what a further change is applied over."""
    empty = not diff_text or not diff_text.strip()
    if empty and not under.texts:
        return NO_CHANGE, under
    diff_text = diff_text or ""
    try:
        # The selector's reading of the diff: its files (paths resolved, a file's sections
        # joined) are what is applied, listed and selected on.
        parsed = parse_unified_diff(diff_text, source) if not empty else None
    except SelectorError as exc:
        raise ChangeError(str(exc)) from None
    if strict and not empty:
        check_hunk_counts(diff_text, source)
    key = hashlib.sha256(
        f"{FORMAT}\0{torch_root}\0{torch_sha}\0{under.id}\0{diff_text}".encode()
    ).hexdigest()[:20]
    applied: list[FileEffect] = []
    not_applied: list[FileEffect] = []
    no_effect: list[FileEffect] = []
    texts: dict[str, str | None] = dict(under.texts)  # path -> new text, None: removed
    for patch in parsed.files if parsed else ():
        kinds = {file_kind(patch.path)} | (
            {file_kind(patch.previous_path)} if patch.previous_path else set()
        )
        if "python" not in kinds:
            if "build" in kinds:
                not_applied.append(_effect(patch, _WHY_BUILD))
            elif "other" in kinds:
                not_applied.append(_effect(patch, _WHY_OTHER))
            else:
                no_effect.append(_effect(patch, WHY_OUTSIDE))
            continue
        try:
            effect, text = _apply_one(patch, torch_root, source, under)
        except ChangeError as exc:
            if strict:
                raise
            not_applied.append(_effect(patch, str(exc).split(": ", 1)[-1]))
            continue
        if kinds - {"python"}:  # a module renamed to or from a non-module file
            not_applied.append(_effect(patch, _WHY_OTHER))
            continue
        applied.append(effect)
        texts[patch.path] = text
        if patch.status == "renamed" and patch.previous_path:
            texts[patch.previous_path] = None
    own = {f.path for f in applied}
    broken = tuple(_broken({p: t for p, t in texts.items() if p in own}, applied))
    change = AppliedChange(key, tuple(applied), tuple(not_applied), tuple(no_effect), broken=broken)
    layer = Layer(key, texts) if applied else under
    if not texts:
        return change, layer
    folder = (cache_dir or Path(tempfile.gettempdir()) / "spyre-ci-changes") / key
    _write_overlay(folder, change.id, texts, torch_root)
    return replace(change, folder=str(folder)), layer


def _effect(patch: FilePatch, why: str) -> FileEffect:
    return FileEffect(patch.path, patch.status, why, previous_path=patch.previous_path)


def _apply_one(
    patch: FilePatch, root: Path, source: str, under: Layer = NO_LAYER
) -> tuple[FileEffect, str | None]:
    """(the applied effect, the module's new text; None for a deletion)."""
    module = module_name(patch.path)
    if patch.binary:
        raise ChangeError(f"{source}: {patch.path}: a binary diff cannot be applied")
    if patch.status == "added":
        target = root / patch.path
        there = under.texts[patch.path] is not None if patch.path in under.texts else None
        if there or (there is None and target.exists()):
            raise ChangeError(
                f"{source}: {patch.path}: the diff adds this file, but the installed torch "
                f"already has it ({target}): is this diff against another torch version?"
            )
        text = apply_patch("", patch) if patch.hunks else ""
        return FileEffect(patch.path, "added", "new module", module), text
    old_path = patch.previous_path or patch.path
    original = root / old_path
    try:
        layered = under.texts.get(old_path, "") if old_path in under.texts else None
        if old_path in under.texts and layered is None:
            raise FileNotFoundError(2, "removed by the upstream drift under the change")
        old_text = layered if layered is not None else original.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChangeError(
            f"{source}: {old_path}: not in the installed torch ({original}): "
            f"{getattr(exc, 'strerror', None) or exc}; is this diff against another "
            "torch version?"
        ) from None
    try:
        new_text = apply_patch(old_text, patch) if patch.hunks else old_text
    except PatchError as exc:
        raise ChangeError(f"{source}: {exc}") from None
    if patch.status == "removed":
        return FileEffect(patch.path, "removed", "module deleted", module), None
    if patch.status == "renamed":
        why = f"renamed from {patch.previous_path}"
        return FileEffect(patch.path, "renamed", why, module, patch.previous_path), new_text
    hunks = len(patch.hunks)
    why = f"{hunks} hunk{'s' if hunks != 1 else ''}"
    if patch.sections:
        why += f" in {len(patch.sections)} sections, applied in the diff's order"
    return FileEffect(patch.path, patch.status, why, module), new_text


def _broken(texts: Mapping[str, str | None], applied: Sequence[FileEffect]) -> list[str]:
    """`path:line: message` of each changed module (path -> text) that does not compile: the
    change's own failure (every test that imports it fails), never the tool's."""
    found = []
    for path, text in texts.items():
        if text is None:
            continue
        try:
            compile(text, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            found.append(f"{path}:{exc.lineno}: {exc.msg}")
        except ValueError as exc:  # a NUL byte
            found.append(f"{path}: {exc}")
    return found


def _write_overlay(
    folder: Path, change_id: str, texts: Mapping[str, str | None], root: Path
) -> None:
    """The activation file and the changed modules' texts (path -> text, None: removed),
    written once: a finished folder is never rewritten (a test process may be reading it),
    a half-written one is replaced."""
    if (folder / ACTIVATION_FILE).is_file():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    modules = []
    deleted = []
    for number, (path, text) in enumerate(sorted(texts.items())):
        module = module_name(path)
        if text is None:
            deleted.append(module)
            continue
        target = staging / f"{number}.{module}.py"
        target.write_text(text, encoding="utf-8")
        modules.append(
            {
                "module": module,
                "origin": str(root / path),
                "source": str(folder / target.name),
                "package": PurePosixPath(path).name == "__init__.py",
                "new": not (root / path).exists(),
            }
        )
    activation = {"format": FORMAT, "id": change_id, "modules": modules, "deleted": deleted}
    (staging / ACTIVATION_FILE).write_text(json.dumps(activation, indent=1) + "\n", "utf-8")
    try:
        os.rename(staging, folder)
    except OSError:  # another process finished it first, or a half-written one is in the way
        if (folder / ACTIVATION_FILE).is_file():
            shutil.rmtree(staging, ignore_errors=True)
            return
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(staging, folder)
