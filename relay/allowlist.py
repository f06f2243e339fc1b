"""The CRCR allowlist in the upstream format (`.github/allowlist.yml` of pytorch/pytorch).

L1, L2 and L4 are lists of `owner/repo` or `owner/repo: oncall1, oncall2`; L3 maps a device
to `{owner/repo: [oncalls]}`. A repository appears once across all levels.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from relay.events import RelayError

log = logging.getLogger("relay.allowlist")

LEVELS = ("L1", "L2", "L3", "L4")


@dataclass(frozen=True)
class AllowlistEntry:
    repo: str
    level: str  # L1 | L2 | L3 | L4
    oncalls: tuple[str, ...] = ()
    device: str | None = None  # L3 only: the `ciflow/crcr/<device>` label that asks for checks

    @property
    def hud(self) -> bool:
        """Results go to the HUD from L2 up."""
        return self.level in ("L2", "L3", "L4")

    def wants_check_run(self, labels: tuple[str, ...] = ()) -> bool:
        """L4 always; L3 only on pull requests labelled `ciflow/crcr/<device>`."""
        if self.level == "L4":
            return True
        return self.level == "L3" and f"ciflow/crcr/{self.device}" in labels


@dataclass(frozen=True)
class Allowlist:
    entries: Mapping[str, AllowlistEntry]

    def get(self, repo: str) -> AllowlistEntry | None:
        return self.entries.get(repo)

    def __iter__(self) -> Iterator[AllowlistEntry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)


class AllowlistFile:
    """An allowlist file, re-read when it changes (checked at most every `check_every` s), so
    an edited allowlist takes effect without a restart. A change that does not parse is
    logged and the last good allowlist stays in force."""

    def __init__(self, path: str | Path, check_every: float = 5.0) -> None:
        self.path = Path(path)
        self.check_every = check_every
        self._allowlist = load_allowlist(self.path)
        self._stamp = self._stat()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def current(self) -> Allowlist:
        now = time.monotonic()
        if now - self._checked < self.check_every:
            return self._allowlist
        with self._lock:
            self._checked = now
            stamp = self._stat()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._allowlist = load_allowlist(self.path)
                    log.info("%s reloaded: %d repositories", self.path, len(self._allowlist))
                except RelayError as exc:
                    log.error(
                        "%s changed but is invalid, keeping the previous one: %s", self.path, exc
                    )
        return self._allowlist

    def get(self, repo: str) -> AllowlistEntry | None:
        return self.current().get(repo)

    def __iter__(self) -> Iterator[AllowlistEntry]:
        return iter(self.current())

    def __len__(self) -> int:
        return len(self.current())

    def _stat(self) -> tuple[int, int]:
        try:
            info = self.path.stat()
        except OSError:
            return (0, 0)
        return (info.st_mtime_ns, info.st_size)


def load_allowlist(path: str | Path) -> Allowlist:
    """Read and check an allowlist file; errors name the file, level and entry."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RelayError(f"{path}: no such allowlist file") from None
    except yaml.YAMLError as exc:
        raise RelayError(f"{path}: invalid YAML: {exc}") from None
    return parse_allowlist(data or {}, str(path))


def parse_allowlist(data: Any, where: str = "allowlist") -> Allowlist:
    if not isinstance(data, Mapping):
        raise RelayError(f"{where}: an allowlist maps levels {', '.join(LEVELS)} to repositories")
    unknown = sorted(str(k) for k in data if k not in LEVELS)
    if unknown:
        raise RelayError(f"{where}: unknown level(s) {', '.join(unknown)}; use {', '.join(LEVELS)}")
    entries: dict[str, AllowlistEntry] = {}

    def add(entry: AllowlistEntry) -> None:
        if "/" not in entry.repo or entry.repo.count("/") != 1:
            raise RelayError(f"{where}: {entry.level}: {entry.repo!r} is not owner/repo")
        if entry.repo in entries:
            raise RelayError(
                f"{where}: {entry.repo} is listed in {entries[entry.repo].level} and "
                f"{entry.level}; a repository appears once"
            )
        entries[entry.repo] = entry

    for level in ("L1", "L2", "L4"):
        items = data.get(level) or []
        if not isinstance(items, list):
            raise RelayError(f"{where}: {level} must be a list of owner/repo entries")
        for item in items:
            if isinstance(item, str):
                add(AllowlistEntry(item.strip(), level))
            elif isinstance(item, Mapping) and len(item) == 1:
                ((repo, oncalls),) = item.items()
                add(AllowlistEntry(str(repo).strip(), level, _oncalls(oncalls, where, level)))
            else:
                raise RelayError(f"{where}: {level}: entry {item!r} is not owner/repo[: oncalls]")
    devices = data.get("L3") or {}
    if not isinstance(devices, Mapping):
        raise RelayError(f"{where}: L3 maps a device to {{owner/repo: [oncalls]}}")
    for device, repos in devices.items():
        if not isinstance(repos, Mapping):
            raise RelayError(f"{where}: L3: device {device!r} must map owner/repo to oncalls")
        for repo, oncalls in repos.items():
            add(
                AllowlistEntry(str(repo).strip(), "L3", _oncalls(oncalls, where, "L3"), str(device))
            )
    return Allowlist(entries)


def _oncalls(value: Any, where: str, level: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise RelayError(f"{where}: {level}: oncalls must be a string or a list of names")
