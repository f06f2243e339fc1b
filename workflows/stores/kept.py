"""Loaded forms kept in the cache folder (`Settings.cache_dir`): what a `spyre-ci` process
would otherwise read or parse again from its source in every run, pickled once.

Four uses, each in a folder of its own: the shipped trace (`traces/`, by
`workflows.tracing.traces`: 0.24 s to load against 0.52 s from its JSON), the cached
Inventory (`inventories/`, by `workflows.stores.inventory_cache`: 0.03 s against 0.12 s
from its JSON) and the definitions of the Python and C++ files a change touches
(`definitions/`, for `selector.definitions`: `torch/nn/functional.py` parses in about
0.06 s, its kept form loads in under a millisecond), and whether a changed file compiles
(`compiles/`, by `workflows.runner.change_overlay.prepare`: 30 ms for that file).
`keep_in` names the cache folder, once per process (`spyre-ci`, a Celery worker); a process
that never calls it keeps nothing and reads everything from its source.

A kept file's name is a digest of its key (the source it was made from), of the code that
made it and of the Python that pickled it: another source, a change to that code or another
Python makes a new one. A damaged file is removed and made again; a folder that cannot be
written is said once on stderr, and everything is then made from its source as before. The
folder keeps at most `limit` files of each use (the oldest used go first). It is the
project's only use of pickle, and it reads only what this user's own runs wrote there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from selector import definitions


class Kept:
    """Pickled values in `folder`, one file per key (`load`, `save`)."""

    def __init__(
        self,
        folder: Path,
        code: Sequence[Path],
        what: str,
        limit: int,
        valid: Callable[[object], bool],
        prefix: str = "",
    ) -> None:
        """`code`: the source files of what is kept (their bytes are in every name); `what`:
        what it is, for the one line said when the folder cannot be written; `valid`: whether
        a loaded value is one (anything else is a damaged file); `prefix`: of the names."""
        self.folder = folder
        self.what = what
        self.limit = limit
        self.valid = valid
        self.prefix = prefix
        digest = hashlib.sha256(f"{sys.version} {pickle.HIGHEST_PROTOCOL}\0".encode())
        for path in code:
            digest.update(path.read_bytes())
        self._made_by = digest.digest()
        self._failed = False

    def path(self, key: bytes) -> Path:
        name = hashlib.sha256(self._made_by + key).hexdigest()[:40]
        return self.folder / f"{self.prefix}{name}.pickle"

    def load(self, key: bytes) -> object | None:
        """The value kept for `key`; None when there is none (or it was damaged: removed)."""
        path = self.path(key)
        value: object = _taken(path)
        if value is None:
            try:
                data = path.read_bytes()
            except OSError:
                return None
            try:
                value = pickle.loads(data)
            except Exception:  # noqa: BLE001 - a damaged file is made again from its source
                value = None
        if value is None or not self.valid(value):
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to go when the folder is full
        return value

    def save(self, key: bytes, value: object) -> None:
        """Keep `value` for `key` (atomically: a concurrent reader never sees half a file),
        then make room: at most `limit` files of this use stay."""
        path = self.path(key)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            partial.replace(path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                partial.unlink()
            if not self._failed:
                self._failed = True
                print(
                    f"spyre-ci: cannot keep {self.what} in {path.parent} ({exc}); it is made "
                    "again in every run (SPYRE_CI_CACHE_DIR moves the cache)",
                    file=sys.stderr,
                )
            return
        self._make_room()

    def _make_room(self) -> None:
        """The oldest used files beyond `limit` go, and the partial files of processes that
        died while writing (an hour old: no writer takes that long)."""
        kept: list[tuple[float, Path]] = []
        stale = time.time() - 3600
        with contextlib.suppress(OSError):
            for path in self.folder.glob(f"{self.prefix}*.pickle*"):
                with contextlib.suppress(OSError):
                    used = path.stat().st_mtime
                    if path.suffix == ".pickle":
                        kept.append((used, path))
                    elif path.suffix == ".tmp" and used < stale:
                        path.unlink()
        kept.sort()
        for _, path in kept[: max(0, len(kept) - self.limit)]:
            with contextlib.suppress(OSError):
                path.unlink()


_FOLDER: list[Path] = []
_STORES: dict[str, Kept] = {}


def keep_in(cache_dir: Path | None) -> None:
    """Keep loaded forms in `cache_dir` (`Settings.cache_dir`; None: keep nothing), the
    Scout's definitions of changed files included."""
    _FOLDER[:] = [cache_dir] if cache_dir is not None else []
    _STORES.clear()
    code = Path(definitions.__file__)
    definitions.keep_with(
        store("definitions", [code], "the definitions of changed files", 256, _is_list)
    )


def _is_list(value: object) -> bool:
    return isinstance(value, list)


def store(
    use: str,
    code: Sequence[Path],
    what: str,
    limit: int,
    valid: Callable[[object], bool],
    prefix: str = "",
) -> Kept | None:
    """The store of one use (its folder is `use` in the cache folder), made once per process;
    None when this process keeps nothing (`keep_in`)."""
    if not _FOLDER:
        return None
    kept = _STORES.get(use)
    if kept is None:
        kept = _STORES[use] = Kept(_FOLDER[0] / use, code, what, limit, valid, prefix)
    return kept


# Files loaded ahead by the warm `spyre-ci` process (`workflows.cli.warm_process`), which a
# run forked from it takes instead of reading and unpickling them again: path -> (the
# file's identity when it was read, its value).
_AHEAD: dict[Path, tuple[tuple[int, int, int], object]] = {}
AHEAD_USES = ("traces", "inventories")  # the large ones; definitions load in a millisecond


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What names a kept file's content: its name is a digest of what made it, and a file
    is only ever replaced whole (a new inode), never written in place."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size)


def _taken(path: Path) -> object:
    """The value loaded ahead for `path` (None: none, or the file changed since), given out
    once: a second load in the same process unpickles its own copy, as without it."""
    ahead = _AHEAD.pop(path, None)
    if ahead is None or ahead[0] != _identity(path):
        return None
    return ahead[1]


def load_ahead(cache_dir: Path | None) -> list[Path]:
    """Load the most recently used kept file of each large use in `cache_dir` (the shipped
    trace, the Inventory) unless it is loaded already; the files loaded now. A process that
    forks runs calls it before each fork, so every run finds them in memory."""
    if cache_dir is None:
        return []
    loaded = []
    for use in AHEAD_USES:
        newest: tuple[float, Path] | None = None
        with contextlib.suppress(OSError):
            for path in (cache_dir / use).glob("*.pickle"):
                with contextlib.suppress(OSError):
                    used = path.stat().st_mtime
                    if newest is None or used > newest[0]:
                        newest = (used, path)
        if newest is None:
            continue
        path = newest[1]
        identity = _identity(path)
        ahead = _AHEAD.get(path)
        if identity is None or (ahead is not None and ahead[0] == identity):
            continue
        for other in [p for p in _AHEAD if p.parent == path.parent]:
            del _AHEAD[other]  # one per use: the older one is no longer the one used
        try:
            value = pickle.loads(path.read_bytes())
        except Exception:  # noqa: BLE001 - a damaged file: the run that reads it says so
            continue
        _AHEAD[path] = (identity, value)
        loaded.append(path)
    return loaded


def ahead() -> list[object]:
    """The values loaded ahead and not yet taken (what the warm process may index ahead)."""
    return [value for _, value in _AHEAD.values()]
