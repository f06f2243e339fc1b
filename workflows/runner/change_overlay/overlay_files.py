"""The overlay folder of a change: written once, atomically, checked before it is reused (a
folder that no longer holds the change's texts is made again, never believed), and pruned
when no run has used it for a day."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from workflows.runner.change_overlay.kinds import module_name

ACTIVATION_FILE = "activation.json"
TREE_DIR = "tree"  # the mirror of TORCH_ROOT in an overlay folder
FORMAT = 1


def write_overlay(
    folder: Path,
    change_id: str,
    texts: Mapping[str, str | None],
    root: Path,
    mirror: tuple[Path, Mapping[str, str | None]] | None = None,
) -> None:
    """The activation file and the changed modules' texts (path -> text, None: removed), and
    the mirror of TORCH_ROOT (`mirror`: the checkout and its edited files' texts), written
    once: a finished folder is never rewritten (a test process may be reading it), a
    half-written one is replaced."""
    if (folder / ACTIVATION_FILE).is_file():
        if _intact(folder, texts, mirror):
            with contextlib.suppress(OSError):
                os.utime(folder)  # used now: `prune` keeps it
            return
        # Edited or damaged since it was written: never believed, made again beside it.
        print(
            f"spyre-ci: overlay {folder} does not hold the change's texts (edited or damaged): "
            "made again",
            file=sys.stderr,
        )
        aside = folder.with_name(f".{folder.name}-stale-{os.getpid()}")
        with contextlib.suppress(OSError):
            os.rename(folder, aside)
            shutil.rmtree(aside, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    prune(folder.parent, keep=folder)
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
    if mirror is not None:
        checkout, edited = mirror
        _write_mirror(
            staging / TREE_DIR, checkout.resolve(), {PurePosixPath(p): t for p, t in edited.items()}
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


UNUSED_S = 24 * 3600.0  # an overlay no run has used for this long is removed


def _intact(
    folder: Path,
    texts: Mapping[str, str | None],
    mirror: tuple[Path, Mapping[str, str | None]] | None,
) -> bool:
    """Whether a finished overlay holds exactly the change's texts (modules and the mirror's
    edited files), as `_write_overlay` names them."""
    try:
        for number, (path, text) in enumerate(sorted(texts.items())):
            if text is None:
                continue
            written = folder / f"{number}.{module_name(path)}.py"
            if written.read_text(encoding="utf-8") != text:
                return False
        for path, text in (mirror[1] if mirror is not None else {}).items():
            target = folder / TREE_DIR / path
            if text is None:
                if target.exists():
                    return False
            elif target.is_symlink() or target.read_text(encoding="utf-8") != text:
                return False
    except (OSError, UnicodeDecodeError):
        return False
    return True


def prune(base: Path, *, keep: Path | None = None, unused_s: float = UNUSED_S) -> list[Path]:
    """Remove the overlays under `base` no run has used for `unused_s` (a finished one is
    touched each time a run reuses it), and staging folders a crash left; the removed."""
    gone: list[Path] = []
    now = time.time()
    try:
        entries = list(base.iterdir())
    except OSError:
        return gone
    for entry in entries:
        if entry == keep or not entry.is_dir():
            continue
        try:
            idle = now - entry.stat().st_mtime
        except OSError:
            continue
        if idle > unused_s:
            shutil.rmtree(entry, ignore_errors=True)
            gone.append(entry)
    return gone


def _write_mirror(target: Path, origin: Path, edited: Mapping[PurePosixPath, str | None]) -> None:
    """`target` as `origin` with `edited` (paths relative to both -> text, None: absent):
    the folders that hold an edited file are made, everything else is a symlink to
    `origin`'s entry, so the checkout is never copied nor written."""
    target.mkdir()
    below: dict[str, dict[PurePosixPath, str | None]] = {}
    for path, text in edited.items():
        if len(path.parts) == 1:
            if text is not None:
                (target / path.name).write_text(text, encoding="utf-8")
            continue
        below.setdefault(path.parts[0], {})[PurePosixPath(*path.parts[1:])] = text
    try:
        names = sorted(os.listdir(origin))
    except OSError:  # a folder the change adds
        names = []
    for name in names:
        # Bytecode of the mirror's files goes into its own `__pycache__`, never the checkout's.
        if name in below or PurePosixPath(name) in edited or name == "__pycache__":
            continue
        os.symlink(origin / name, target / name)
    for name, inner in sorted(below.items()):
        _write_mirror(target / name, origin / name, inner)
