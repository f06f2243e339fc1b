"""The backend under test as a run names it: package, version, device and a digest of its
files (a backend edited without a new version is another backend).

`workflows.run.backend_identity` finds it as a test process imports it; planned.json's
environment, History's plan facts and the forensics window carry it, and a failure that
passed earlier counts as upstream's only with the same backend (`same_as`). Its JSON form
is the object those files have always held: `package`, `version`, `device`, and `digest`
when it was found.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from contracts.codec import EMPTY, Record, from_json, wire

_SET = wire(omit=EMPTY)


@dataclass(frozen=True)
class BackendId(Record, Mapping[str, str]):
    """One backend under test; empty (no key set) when a record did not keep it.

    Also a read-only mapping of its JSON form (`dict(backend)` is `backend.to_json()`): the
    kept base outcomes and the records of prepared builds are keyed by those items. The keys
    that are set are written, in the order they have always been, then those read that this
    version does not know."""

    package: str = field(default="", metadata=_SET)
    version: str = field(default="", metadata=_SET)
    device: str = field(default="", metadata=_SET)
    # sha256 of its files, 16 hex digits; "" when its folder was not found
    digest: str = field(default="", metadata=_SET)
    extra: Mapping[str, str] = field(default_factory=dict)  # keys this version does not know

    KEYS: ClassVar[tuple[str, ...]] = ("package", "version", "device", "digest")

    def same_as(self, other: BackendId) -> bool:
        """The same package, version and device, and the same files: a digest recorded on
        one side only names files the other cannot vouch for."""
        return all(getattr(self, k) == getattr(other, k) for k in self.KEYS)

    @classmethod
    def from_json(cls, data: object) -> BackendId:
        """The backend a record holds (values read as text); empty when it holds none."""
        if not isinstance(data, Mapping):
            return cls()
        return from_json(cls, {str(k): str(v) for k, v in data.items()})

    def __getitem__(self, key: str) -> str:
        return str(self.to_json()[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())
