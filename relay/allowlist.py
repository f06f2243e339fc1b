"""The CRCR allowlist in the upstream format (`.github/allowlist.yml` of pytorch/pytorch).

L1, L2 and L4 are lists of `owner/repo` or `owner/repo: <metadata>`; L3 maps a device to
`{owner/repo: <metadata>}`. Metadata is the oncalls (`oncall1, oncall2` or a list) or a mapping
`{events: [...], oncalls: ...}`: `events` names what the repository takes part in
(`pull_request`: dispatched upstream pushes and pull requests and their callbacks; `nightly`:
nightly and periodic callbacks), both when absent. A repository appears once across all levels.
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
PULL_REQUEST, NIGHTLY = "pull_request", "nightly"
EVENTS = frozenset({PULL_REQUEST, NIGHTLY})
METADATA_FIELDS = ("events", "oncalls")


def logical_event(event_type: str) -> str:
    """The allowlist event a dispatch or callback `event_type` belongs to: nightly and
    periodic runs are `nightly`; everything the webhook dispatches is `pull_request`."""
    return NIGHTLY if event_type in ("nightly", "periodic") else PULL_REQUEST


@dataclass(frozen=True)
class AllowlistEntry:
    repo: str
    level: str  # L1 | L2 | L3 | L4
    oncalls: tuple[str, ...] = ()
    device: str | None = None  # L3 only: the `ciflow/crcr/<device>` label that asks for checks
    events: frozenset[str] = EVENTS

    def takes_part(self, event_type: str) -> bool:
        """Whether the repository takes part in events of this `event_type`."""
        return logical_event(event_type) in self.events

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
                ((repo, metadata),) = item.items()
                name = str(repo).strip()
                oncalls, events = _metadata(metadata, f"{where}: {level}: {name}")
                add(AllowlistEntry(name, level, oncalls, events=events))
            else:
                raise RelayError(f"{where}: {level}: entry {item!r} is not owner/repo[: oncalls]")
    devices = data.get("L3") or {}
    if not isinstance(devices, Mapping):
        raise RelayError(f"{where}: L3 maps a device to {{owner/repo: [oncalls]}}")
    for device, repos in devices.items():
        if not isinstance(repos, Mapping):
            raise RelayError(f"{where}: L3: device {device!r} must map owner/repo to oncalls")
        for repo, metadata in repos.items():
            name = str(repo).strip()
            oncalls, events = _metadata(metadata, f"{where}: L3: {device}: {name}")
            add(AllowlistEntry(name, "L3", oncalls, str(device), events))
    return Allowlist(entries)


def _metadata(value: Any, where: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """(oncalls, events) of one entry: its oncalls alone, or `{events, oncalls}`."""
    if not isinstance(value, Mapping):
        return _oncalls(value, where), EVENTS
    unknown = sorted(str(k) for k in value if k not in METADATA_FIELDS)
    if unknown:
        raise RelayError(
            f"{where}: unknown metadata field(s) {', '.join(unknown)}; use "
            f"{' and '.join(METADATA_FIELDS)}"
        )
    return _oncalls(value.get("oncalls"), where), _events(value.get("events"), where)


def _oncalls(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value if v.strip())
    raise RelayError(f"{where}: oncalls must be a string or a list of names")


def _events(value: Any, where: str) -> frozenset[str]:
    if value is None:
        return EVENTS
    if not isinstance(value, list) or not value:
        raise RelayError(f"{where}: events must be a non-empty list of {', '.join(sorted(EVENTS))}")
    seen: set[str] = set()
    for item in value:
        name = item.strip() if isinstance(item, str) else item
        if name not in EVENTS:
            raise RelayError(
                f"{where}: events: {item!r} is not an event the relay knows; use "
                f"{' or '.join(sorted(EVENTS))}"
            )
        if name in seen:
            raise RelayError(f"{where}: events: {name!r} is listed twice")
        seen.add(name)
    return frozenset(seen)
