"""Where torch builds come from: a PEP 503 index (in production PyTorch's nightly CPU index,
`https://download.pytorch.org/whl/nightly/cpu`) or a folder of wheels, `Settings.build_index`
(`$SPYRE_CI_BUILD_INDEX`).

    builds = BuildSource(settings.build_index, downloads)
    for candidate in builds.candidates():           # newest first, wheels this Python installs
        wheel = builds.fetch(candidate)             # pip download, once per file (locked)
        version, sha = wheel_label(wheel)           # torch/version.py inside the wheel

A build's git sha is read from the `torch/version.py` it carries, never from its name: a
nightly's name says its day, which only orders the candidates. Downloads go through pip (the
client production uses for indexes) into the environment cache's `downloads/` folder, under
a lock per file, so two runs that want the same build download it once. A wheel pip cannot
fetch, or whose zip is cut or corrupt, is the source's fault: `BuildsUnavailable`, exit 3,
nothing learned.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.error import URLError
from urllib.parse import urljoin, urlsplit
from urllib.request import Request, urlopen

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from workflows.errors import BadInput, InfrastructureError
from workflows.runner.torch_builds import parse_version_text
from workflows.settings import child_environment

PROJECT = "torch"
VERSION_FILE = "torch/version.py"
TIMEOUT_S = 30.0  # one index page or one pip step's network wait
NIGHTLY_DAY = re.compile(r"\.dev(\d{8})")


class BuildSourceError(BadInput):
    """The configured source of builds cannot be used as given (exit 2)."""


class BuildsUnavailable(InfrastructureError):
    """The source of builds could not be read, or served a broken wheel (exit 3: the event is
    retried later, nothing is learned)."""


@dataclass(frozen=True)
class Candidate:
    """One torch wheel the source offers: its file name, version, where it is, and the day
    a nightly's version names (`YYYYMMDD`, "" for a release)."""

    name: str
    version: str
    location: str  # a URL (index) or a path (folder)

    @property
    def day(self) -> str:
        found = NIGHTLY_DAY.search(self.version)
        return found.group(1) if found else ""

    def sort_key(self) -> tuple[Version, str]:
        try:
            return Version(self.version), self.name
        except InvalidVersion:
            return Version("0"), self.name


class BuildSource:
    """The builds of one index or folder; `downloads` is where fetched wheels are kept."""

    def __init__(self, where: str, downloads: Path, *, timeout: float = TIMEOUT_S) -> None:
        self.where = where.strip()
        self.downloads = downloads
        self.timeout = timeout
        parts = urlsplit(self.where)
        self.is_index = parts.scheme in ("http", "https")
        if not self.is_index:
            if parts.scheme and parts.scheme != "file":
                raise BuildSourceError(
                    f"SPYRE_CI_BUILD_INDEX={where!r}: want an http(s) URL of a PEP 503 index "
                    "or a folder of wheels"
                )
            folder = Path(parts.path if parts.scheme == "file" else self.where)
            if not folder.is_dir():
                raise BuildSourceError(f"SPYRE_CI_BUILD_INDEX={where!r}: no such folder")
            self.folder = folder
        self.index = self.where.rstrip("/") + "/" if self.is_index else ""

    def __str__(self) -> str:
        return self.where

    def candidates(self) -> list[Candidate]:
        """The torch wheels this interpreter can install, newest version first."""
        found = self._listed()
        wanted = set(sys_tags())
        usable = []
        for candidate in found:
            try:
                name, _version, _build, tags = parse_wheel_filename(candidate.name)
            except InvalidWheelFilename:
                continue
            if name == PROJECT and tags & wanted:
                usable.append(candidate)
        return sorted(usable, key=Candidate.sort_key, reverse=True)

    def _listed(self) -> list[Candidate]:
        if not self.is_index:
            return [
                Candidate(p.name, _wheel_version(p.name), str(p))
                for p in sorted(self.folder.glob("*.whl"))
            ]
        page_url = urljoin(self.index, f"{PROJECT}/")
        try:
            request = Request(page_url, headers={"Accept": "text/html"})
            with urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - http(s) only
                body = response.read(64 * 1024 * 1024).decode("utf-8", "replace")
        except (URLError, OSError, ValueError) as exc:
            raise BuildsUnavailable(
                f"build index {page_url}: cannot be read ({getattr(exc, 'reason', exc)})"
            ) from None
        links = _Links()
        links.feed(body)
        return [
            Candidate(name, _wheel_version(name), urljoin(page_url, href))
            for name, href in links.found
            if name.endswith(".whl")
        ]

    def fetch(self, candidate: Candidate) -> Path:
        """The wheel file of `candidate` on this disk: a folder's own file, or downloaded by
        pip from the index once (a lock per file: a second run waits for the first's)."""
        if not self.is_index:
            return Path(candidate.location)
        self.downloads.mkdir(parents=True, exist_ok=True)
        target = self.downloads / candidate.name
        with locked(self.downloads / f".{candidate.name}.lock"):
            if target.is_file() and _readable_wheel(target):
                return target
            target.unlink(missing_ok=True)
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                "--timeout",
                str(int(self.timeout)),
                "--retries",
                "1",
                "--index-url",
                self.index,
                "--dest",
                str(self.downloads),
                f"{PROJECT}=={candidate.version}",
            ]
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, env=_pip_env()
            )
            if done.returncode != 0 or not target.is_file():
                tail = (done.stderr or done.stdout).strip()[-800:]
                raise BuildsUnavailable(
                    f"build index {self.index}: pip could not download {candidate.name} "
                    f"(exit {done.returncode}): {tail}"
                )
        return target


def wheel_label(wheel: Path) -> tuple[str, str]:
    """(`__version__`, git sha) of the torch in `wheel`, read from its `torch/version.py`
    without installing it; the sha is "" when the build does not say. A cut or corrupt zip
    is BuildsUnavailable."""
    cache = wheel.with_name(f".{wheel.name}.label.json")
    stat = wheel.stat()
    stamp = [stat.st_size, int(stat.st_mtime)]
    with contextlib.suppress(OSError, ValueError, KeyError):
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved["stamp"] == stamp:
            return str(saved["version"]), str(saved["sha"])
    try:
        with zipfile.ZipFile(wheel) as archive:
            text = archive.read(VERSION_FILE).decode("utf-8")
    except KeyError:
        raise BuildsUnavailable(f"{wheel}: the wheel has no {VERSION_FILE}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, UnicodeDecodeError) as exc:
        raise BuildsUnavailable(f"{wheel}: not a readable wheel ({exc})") from None
    version, sha = parse_version_text(text)
    with contextlib.suppress(OSError):
        cache.write_text(json.dumps({"stamp": stamp, "version": version, "sha": sha}))
    return version, sha


def _readable_wheel(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None if path.stat().st_size < 1 << 20 else True
    except (zipfile.BadZipFile, OSError):
        return False


def _wheel_version(name: str) -> str:
    try:
        return str(parse_wheel_filename(name)[1])
    except InvalidWheelFilename:
        return ""


def _pip_env() -> dict[str, str]:
    """pip asks the configured source and nothing else: no configuration file (its extra
    indexes, find-links or a version cap would add or refuse builds the source does not
    name), no prompts; its certificates stay."""
    skipped = ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_CONSTRAINT")
    env = child_environment({"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"})
    return {k: v for k, v in env.items() if k not in skipped}


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (made when missing) while the block runs: one process at
    a time downloads a wheel or makes an environment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Links(HTMLParser):
    """The anchors of a PEP 503 page: (text, href without its #hash)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            href = self._href.split("#", 1)[0]
            name = "".join(self._text).strip() or href.rsplit("/", 1)[-1]
            self.found.append((name, href))
            self._href = None
