"""Old-side sources of a change: the text of each patched file at the base version, for the
Scout's line-level facts (`selector.definitions`).

Where a file is read from, first match wins:

1. the installed torch of the Inventory's version (`torch/...` paths: the wheel carries the
   Python sources in the repository's layout), when its version is the Inventory's; when
   GitHub is at hand too, only if the patch applies to it (the installed torch is a release,
   the base a commit of main); upstream's test files (`test/...`) from the checkout the file
   suites import them from (`${TORCH_ROOT}`, `tests_root`), on the same terms;
2. GitHub's contents API at the change's base sha (`GET /repos/{repo}/contents/{path}?ref=`,
   raw media type), for every other file the Scout can read (C++ kernels,
   `native_functions.yaml`, Python files the wheel lacks or has at another version), when a
   GitHub configuration exists: the relay's `SPYRE_CI_GITHUB_URL` / `SPYRE_CI_GITHUB_TOKEN`,
   or an adapter handed in. Answers are cached on disk under the state directory
   (`github-sources/`, keyed by repo, sha and path: a file at a sha never changes), at most
   `MAX_SOURCE_BYTES` a file, `MAX_GITHUB_FILES` files a change, `MAX_CACHE_BYTES` in all.
   A failure is never fatal: the file is placed by its hunks, and one line is logged;
3. nothing: the Scout falls back to the diff text alone (hunk headers and changed lines),
   and the plan says which files were placed by source and which by hunks.

A file that does not match the patch (the installed version differs from the base) is
detected by the Scout itself: the patch does not apply, and hunks are used.

    change = with_old_sources(change, torch_version="2.13.0")
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path, PurePosixPath
from typing import Protocol

import selector
from selector.definitions import can_locate
from selector.patches import patched
from workflows.settings import Settings, absolute, child_environment

log = logging.getLogger(__name__)

# Files larger than this are not read (the largest torch source, the OpInfo database, is
# about 1 MB).
MAX_SOURCE_BYTES = 8 * 1024 * 1024
MAX_GITHUB_FILES = 64  # per change: a wide change is placed by hunks past this
MAX_CACHE_BYTES = 512 * 1024 * 1024
_MISSING = "\0missing\0"  # cached answer: the file is not at that sha (404)


class FileReader(Protocol):
    """What the GitHub source needs of `relay.github.GitHubAdapter`."""

    def file_at(self, repo: str, path: str, ref: str, max_bytes: int = ...) -> str | None: ...


@dataclass
class GitHubSources:
    """Files at a sha through the contents API, cached in `cache_dir`."""

    reader: FileReader
    cache_dir: Path
    max_files: int = MAX_GITHUB_FILES
    max_cache_bytes: int = MAX_CACHE_BYTES

    def texts(self, repo: str, sha: str, paths: Mapping[str, str]) -> dict[str, str]:
        """{path: text} of `paths` (path in the change -> path at `sha`) found at `sha`;
        one log line for whatever could not be fetched."""
        found: dict[str, str] = {}
        failed: list[str] = []
        asked = 0
        for path, old_path in paths.items():
            cached = self._cached(repo, sha, old_path)
            if cached is None:
                if asked >= self.max_files or failed:
                    # Past the bound, or GitHub failing: the rest are placed by hunks.
                    failed.append(old_path)
                    continue
                asked += 1
                try:
                    text = self.reader.file_at(repo, old_path, sha, MAX_SOURCE_BYTES)
                except Exception as exc:  # noqa: BLE001 - a source is an aid, never a must
                    failed.append(f"{old_path} ({exc})")
                    continue
                cached = _MISSING if text is None else text
                self._store(repo, sha, old_path, cached)
            if cached != _MISSING:
                found[path] = cached
        if failed:
            log.warning(
                "old sources at %s@%s: %d file(s) not fetched (%s%s); placed by hunks",
                repo,
                sha[:12],
                len(failed),
                failed[0],
                ", ..." if len(failed) > 1 else "",
            )
        if asked:
            self._prune()
        return found

    def _file(self, repo: str, sha: str, path: str) -> Path:
        key = hashlib.sha256(f"{repo}\0{sha}\0{path}".encode()).hexdigest()
        return self.cache_dir / key[:2] / key

    def _cached(self, repo: str, sha: str, path: str) -> str | None:
        try:
            return self._file(repo, sha, path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def _store(self, repo: str, sha: str, path: str, text: str) -> None:
        target = self._file(repo, sha, path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, target)
        except OSError as exc:
            log.warning("old sources: cannot cache %s@%s:%s: %s", repo, sha[:12], path, exc)

    def _prune(self) -> None:
        """Keep the cache under `max_cache_bytes`: the least recently written go first."""
        try:
            files = [(f.stat(), f) for f in self.cache_dir.glob("*/*") if f.is_file()]
        except OSError:
            return
        total = sum(st.st_size for st, _ in files)
        for st, file in sorted(files, key=lambda item: item[0].st_mtime):
            if total <= self.max_cache_bytes:
                break
            try:
                file.unlink()
            except OSError:
                continue
            total -= st.st_size


@lru_cache(maxsize=1)
def installed_torch() -> tuple[Path | None, str]:
    """(the directory holding the installed `torch` package, its version), without importing
    torch; (None, "") when torch is not installed."""
    spec = find_spec("torch")
    if spec is None or spec.origin is None:
        return None, ""
    try:
        version = metadata.version("torch").split("+", 1)[0]
    except metadata.PackageNotFoundError:
        version = ""
    return Path(spec.origin).resolve().parent.parent, version


def installed_source(path: str, root: Path, top: str = "torch") -> str | None:
    """The text of repository path `path` under `root` (the installed torch; with `top`
    "test", the suites' upstream checkout), or None."""
    parts = PurePosixPath(path).parts
    if not parts or parts[0] != top or ".." in parts or PurePosixPath(path).is_absolute():
        return None
    file = root.joinpath(*parts)
    try:
        if not file.is_file() or file.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def tests_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """The upstream checkout file suites import their tests from: `${TORCH_ROOT}` as a test
    process sees it (`environ`, default the environment it inherits), made absolute; None
    when unset or not a folder."""
    environ = child_environment() if environ is None else environ
    raw = environ.get("TORCH_ROOT", "")
    if not raw:
        return None
    root = absolute(raw)
    return root if root.is_dir() else None


def reused_tests(
    specs: Sequence[str], root: Path, environ: Mapping[str, str] | None = None
) -> frozenset[str]:
    """The repository paths (`test/test_x.py`) of the files under `root` (the suites'
    checkout) that a file suite of `specs` (files or folders; default: the bundled specs)
    imports, with `${NAME}` expanded as in `environ` (default: what a test process
    inherits). A spec that does not load names none: planning and the plugin say why."""
    from suites.loader import SpecError, load_spec, spec_paths, suite_test_files

    env = dict(child_environment() if environ is None else environ)
    env["TORCH_ROOT"] = str(root)
    top = root.resolve()
    found: set[str] = set()
    for spec_path in spec_paths(list(specs) or None):
        try:
            spec = load_spec(spec_path)
        except SpecError:
            continue
        for path in suite_test_files(spec, env):
            try:
                found.add(path.resolve().relative_to(top).as_posix())
            except ValueError:  # a file outside the checkout: not upstream's
                continue
    return frozenset(found)


def github_sources(settings: Settings) -> GitHubSources | None:
    """The GitHub source the settings configure (the relay's `SPYRE_CI_GITHUB_*` variables,
    a token for the contents API), cached under the state directory; None when there is
    none."""
    if not settings.github_token:
        return None
    return _github_sources(settings.github_url or "", settings.github_token, settings.state_dir)


@lru_cache(maxsize=4)
def _github_sources(base_url: str, token: str, state_dir: Path) -> GitHubSources:
    from relay.github import GitHubAdapter

    adapter = GitHubAdapter(base_url=base_url or None, token=token)
    return GitHubSources(adapter, state_dir / "github-sources")


def with_old_sources(
    change: selector.ChangeSet,
    *,
    torch_version: str = "",
    root: Path | None = None,
    github: GitHubSources | None = None,
    tests: Path | None = None,
) -> selector.ChangeSet:
    """`change` with the old-side texts this machine has, or GitHub gives, for its patched
    files.

    `torch_version`: the Inventory's torch; the installed sources are used only when the
    installed torch is that version (empty: whatever is installed). `root` overrides where
    torch is found (tests). `github`: the GitHub source (the one the settings configure,
    `github_sources`, handed in with the run's context); None: no GitHub. `tests`: the
    checkout upstream's test files are read from (`tests_root`); None: none."""
    if not change.patches:
        return change
    remote = github
    if not (change.base_sha and change.repo):
        remote = None  # a bare diff: no sha to ask for
    wanted = {
        path: patch
        for path, patch in change.patches.items()
        if path not in change.sources and patch.status != "added" and patch.hunks
    }
    installed, version = installed_torch()
    root = root or installed
    if root is None or (torch_version and root == installed and version != torch_version):
        root = None
    sources: dict[str, str] = {}
    for path, patch in wanted.items():
        old = patch.previous_path or path
        text = installed_source(old, root) if root is not None else None
        if text is None and tests is not None:
            text = installed_source(old, tests, top="test")
        if text is not None and (remote is None or patched(text, patch) is not None):
            sources[path] = text
    if remote is not None and change.base_sha:
        missing = {
            path: patch.previous_path or path
            for path, patch in wanted.items()
            if path not in sources and can_locate(path)
        }
        if missing:
            sources.update(remote.texts(change.repo, change.base_sha, missing))
    return change.with_sources(sources) if sources else change


def work_tree(files: Sequence[Path]) -> Path:
    """The git work tree that holds `files` (their common folder when none does; the current
    folder for no files): where a patch over them applies."""
    if not files:
        return Path.cwd()
    start = Path(*_common([f.resolve().parent.parts for f in files]))
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def _common(parts: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    first = parts[0]
    n = 0
    while n < len(first) and all(len(p) > n and p[n] == first[n] for p in parts):
        n += 1
    return first[:n]
