"""From a change (its unified diff) to an overlay of the installed torch: what applies, what
cannot, and the files a test process needs to import the changed modules.

Every file of the change falls in one of three groups:

* **applied**: a Python module of an installed package (`torch/`, `functorch/`): its hunks
  are applied to the installed file's text (`selector.patches.apply_patch`: the selector
  places them the same way) and the result is written into the overlay folder; new modules,
  deleted modules and renames are applied too.
  A file the diff gives in several sections (`git log -p --reverse`) gets them in the diff's
  order, each over the text the ones before it made, as `selector.diff` reads them.
* **not applied**: what only a build of torch would bring (C++/CUDA sources and headers,
  `native_functions.yaml` and the other codegen inputs, `torchgen/`, build files), and any
  file of the installed packages that is not a Python module. A run names each of them.
* **no effect**: files outside the installed torch (docs, CI configuration, type stubs, and
  upstream's own `test/` files no file suite reuses): what runs is the same with or without
  them.

Upstream's test files that a file suite reuses (`${TORCH_ROOT}/test/...`, `UpstreamTests`)
are applied too, to the checkout the suites import them from: their hunks over TORCH_ROOT's
text, the results in a mirror of TORCH_ROOT inside the overlay folder (`tree/`: the edited
files written, every other entry a symlink to the checkout's), which the changed side's test
processes get as their TORCH_ROOT (`AppliedChange.env`); the base side keeps the checkout.

The overlay is keyed by the diff and the installed torch (and the edited test files' texts),
so the same change prepared on another machine, or again for a resumed run, lands in the
same folder with the same files.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.change import FileNote
from selector import SelectorError
from selector.diff import FilePatch, parse_unified_diff
from selector.patches import PatchError, apply_patch
from suites.loader import EDITED_TESTS_VAR
from workflows.runner.change_overlay.hunks import ChangeError, check_hunk_counts
from workflows.runner.change_overlay.kinds import (
    beside_reused,
    file_kind,
    module_name,
    upstream_test_file,
)
from workflows.runner.change_overlay.overlay_files import (
    ACTIVATION_FILE,
    FORMAT,
    TREE_DIR,
    write_overlay,
)
from workflows.settings import child_environment
from workflows.stores import kept

CHANGE_VAR = "SPYRE_CI_CHANGE"  # the activation file a test process applies at start
TREE_VAR = "TORCH_ROOT"  # the upstream checkout file suites import their tests from
SITE_DIR = Path(__file__).resolve().parent / "site"


# One changed file and what happened to it, as planned.json and run.json hold it.
FileEffect = FileNote


@dataclass(frozen=True)
class UpstreamTests:
    """The upstream checkout file suites import their tests from (`${TORCH_ROOT}` as a test
    process sees it; None: unset) and the repository paths of its files a suite reuses
    (`test/test_x.py`): those are applied to it, the rest of `test/` has no effect."""

    root: Path | None
    reused: frozenset[str] = frozenset()


@dataclass(frozen=True)
class AppliedChange:
    """What a change does to the torch under test; `folder` holds the overlay when any module
    applied (`activation.json` and the changed modules' texts), `tree` the mirror of
    TORCH_ROOT with the edited upstream test files when any applied."""

    id: str
    applied: tuple[FileEffect, ...] = ()
    not_applied: tuple[FileEffect, ...] = ()
    no_effect: tuple[FileEffect, ...] = ()
    folder: str = ""
    broken: tuple[str, ...] = field(default=())  # changed modules that do not compile
    tree: str = ""

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
        site folder first) and the edited upstream tests (TORCH_ROOT the mirror, and the
        edited files named, `EDITED_TESTS_VAR`: a warm runner's zygote leaves them to each
        test process); empty when nothing applied."""
        found: dict[str, str] = {}
        if self.tree:
            edited = [str(Path(self.tree) / f.path) for f in self.applied if f.tree]
            found = {TREE_VAR: self.tree, EDITED_TESTS_VAR: os.pathsep.join(edited)}
        if not self.folder:
            return found
        environ = child_environment() if environ is None else environ
        paths = [str(SITE_DIR)] + [
            p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SITE_DIR)
        ]
        return {
            CHANGE_VAR: str(Path(self.folder) / ACTIVATION_FILE),
            "PYTHONPATH": os.pathsep.join(paths),
            **found,
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


_WHY_BUILD = "needs a build of torch (C++/CUDA, codegen input or build file)"
_WHY_OTHER = "not a Python module of the installed torch: only a build or install brings it"
WHY_OUTSIDE = "not part of the installed torch (no effect on the torch under test)"
WHY_UNUSED_TEST = "an upstream test file no file suite reuses (no config names it): no effect"
# A helper or data file next to a reused test file, which imports or reads it from there:
# the mirror of TORCH_ROOT does not carry it to those tests yet, so it is never "no effect".
WHY_BESIDE_REUSED = (
    "imported or read by upstream test files a file suite reuses (a helper or data file "
    "beside them): not applied to their checkout here, so what it changes is not tested"
)
WHY_NO_TREE = (
    f"an upstream test file; ${{{TREE_VAR}}} is unset, so no file suite reuses it here: no effect"
)


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
    `tests`: the checkout the file suites import upstream's tests from, and what of it they
    reuse; its edited files are applied to it in the same way (None: `test/` has no effect).
    The overlay (the layer's modules and the change's over them) is written under
    `cache_dir` (a run passes STATE_DIR/changes; default: the system's temporary folder) in
    a folder named by the change, the layer and the torch, once."""
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
    tests: UpstreamTests | None = None,
) -> tuple[AppliedChange, Layer]:
    """`prepare`, and the layer the result makes (`under` with the change's modules over it):
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
    applied: list[FileEffect] = []
    not_applied: list[FileEffect] = []
    no_effect: list[FileEffect] = []
    texts: dict[str, str | None] = dict(under.texts)  # path -> new text, None: removed
    tree: dict[str, str | None] = {}  # the same for the upstream test files applied
    for patch in parsed.files if parsed else ():
        paths = [patch.path, *([patch.previous_path] if patch.previous_path else [])]
        if tests is not None and all(upstream_test_file(p) for p in paths):
            bucket, effect = _sort_test(patch, tests, source, strict, tree)
            {"applied": applied, "not_applied": not_applied}.get(bucket, no_effect).append(effect)
            continue
        kinds = {file_kind(p) for p in paths}
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
    seed = f"{FORMAT}\0{torch_root}\0{torch_sha}\0{under.id}\0{diff_text}"
    if tree and tests is not None:  # the mirror's files are the checkout's as it is now
        seed += f"\0{tests.root}\0" + "\0".join(f"{p}\0{t}" for p, t in sorted(tree.items()))
    key = hashlib.sha256(seed.encode()).hexdigest()[:20]
    own = {f.path for f in applied}
    changed = {p: t for p, t in (*texts.items(), *tree.items()) if p in own}
    broken = tuple(_broken(changed, applied))
    change = AppliedChange(key, tuple(applied), tuple(not_applied), tuple(no_effect), broken=broken)
    layer = Layer(key, texts) if any(not f.tree for f in applied) else under
    if not texts and not tree:
        return change, layer
    folder = (cache_dir or Path(tempfile.gettempdir()) / "spyre-ci-changes") / key
    mirror = (tests.root, tree) if tree and tests is not None and tests.root else None
    write_overlay(folder, change.id, texts, torch_root, mirror)
    return (
        replace(
            change,
            folder=str(folder) if texts else "",
            tree=str(folder / TREE_DIR) if mirror else "",
        ),
        layer,
    )


def _sort_test(
    patch: FilePatch,
    tests: UpstreamTests,
    source: str,
    strict: bool,
    tree: dict[str, str | None],
) -> tuple[str, FileEffect]:
    """Where an upstream test file of the change goes (`applied`, `not_applied`,
    `no_effect`) and its effect: applied to the suites' checkout when a suite reuses it (its
    text into `tree`), else of no effect. A hunk that does not apply there is a ChangeError
    when `strict`, else the file is not applied, with the reason."""
    if tests.root is None:
        return "no_effect", _effect(patch, WHY_NO_TREE)
    if patch.path not in tests.reused and patch.previous_path not in tests.reused:
        paths = [patch.path, *([patch.previous_path] if patch.previous_path else [])]
        if any(beside_reused(p, tests.root, tests.reused) for p in paths):
            return "not_applied", _effect(patch, WHY_BESIDE_REUSED)
        return "no_effect", _effect(patch, WHY_UNUSED_TEST)
    try:
        effect, text = _apply_one(patch, tests.root, source, tree=True)
    except ChangeError as exc:
        if strict:
            raise
        return "not_applied", _effect(patch, str(exc).split(": ", 1)[-1])
    tree[patch.path] = text
    if patch.status == "renamed" and patch.previous_path:
        tree[patch.previous_path] = None
    return "applied", effect


def _effect(patch: FilePatch, why: str) -> FileEffect:
    return FileEffect(patch.path, patch.status, why, previous_path=patch.previous_path)


def _apply_one(
    patch: FilePatch, root: Path, source: str, under: Layer = NO_LAYER, *, tree: bool = False
) -> tuple[FileEffect, str | None]:
    """(the applied effect, the file's new text; None for a deletion). `tree`: an upstream
    test file over the suites' checkout `root` (TORCH_ROOT), else a module over the
    installed torch."""
    module = None if tree else module_name(patch.path)
    where = f"${TREE_VAR}" if tree else "the installed torch"
    hint = (
        f"is ${TREE_VAR} a checkout of the change's base?"
        if tree
        else "is this diff against another torch version?"
    )
    if patch.binary:
        raise ChangeError(f"{source}: {patch.path}: a binary diff cannot be applied")
    if patch.status == "added":
        target = root / patch.path
        there = under.texts[patch.path] is not None if patch.path in under.texts else None
        if there or (there is None and target.exists()):
            raise ChangeError(
                f"{source}: {patch.path}: the diff adds this file, but {where} already has "
                f"it ({target}): {hint}"
            )
        text = apply_patch("", patch) if patch.hunks else ""
        why = "new upstream test file" if tree else "new module"
        return FileEffect(patch.path, "added", why, module, tree=TREE_VAR if tree else ""), text
    old_path = patch.previous_path or patch.path
    original = root / old_path
    try:
        layered = under.texts.get(old_path, "") if old_path in under.texts else None
        if old_path in under.texts and layered is None:
            raise FileNotFoundError(2, "removed by the upstream drift under the change")
        old_text = layered if layered is not None else original.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChangeError(
            f"{source}: {old_path}: not in {where} ({original}): "
            f"{getattr(exc, 'strerror', None) or exc}; {hint}"
        ) from None
    try:
        against = f"{where}'s file ({original})" if tree else "the installed file"
        new_text = (
            apply_patch(old_text, patch, against=against, hint=hint) if patch.hunks else old_text
        )
    except PatchError as exc:
        raise ChangeError(f"{source}: {exc}") from None
    mark = TREE_VAR if tree else ""
    if patch.status == "removed":
        why = "upstream test file deleted" if tree else "module deleted"
        return FileEffect(patch.path, "removed", why, module, tree=mark), None
    if patch.status == "renamed":
        why = f"renamed from {patch.previous_path}"
        return (
            FileEffect(patch.path, "renamed", why, module, patch.previous_path, tree=mark),
            new_text,
        )
    hunks = len(patch.hunks)
    why = f"{hunks} hunk{'s' if hunks != 1 else ''}"
    if patch.sections:
        why += f" in {len(patch.sections)} sections, applied in the diff's order"
    if tree:
        why += f", applied to the upstream tests under ${TREE_VAR}"
    return FileEffect(patch.path, patch.status, why, module, tree=mark), new_text


def _broken(texts: Mapping[str, str | None], applied: Sequence[FileEffect]) -> list[str]:
    """`path:line: message` of each changed module or test file (path -> text) that does not
    compile: the change's own failure (every test that imports it fails), never the tool's.
    A text checked before is not compiled again (`kept`, by a digest of its path and text:
    `torch/nn/functional.py` takes 30 ms, a run again of the same change none)."""
    store = kept.store("compiles", [Path(__file__)], "the compile checks of changed files",
                       256, lambda value: isinstance(value, list))  # fmt: skip
    found: list[str] = []
    for path, text in texts.items():
        if text is None:
            continue
        key = hashlib.sha256(f"{path}\0{text}".encode(errors="surrogatepass")).digest()
        known = store.load(key) if store is not None else None
        if isinstance(known, list):
            found.extend(str(message) for message in known)
            continue
        said = _compiles(path, text)
        if store is not None:
            store.save(key, said)
        found.extend(said)
    return found


def _compiles(path: str, text: str) -> list[str]:
    try:
        compile(text, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return [f"{path}:{exc.lineno}: {exc.msg}"]
    except ValueError as exc:  # a NUL byte
        return [f"{path}: {exc}"]
    return []
