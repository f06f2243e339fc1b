"""The records every package shares: variant tests, the Inventory, and per-variant outcomes.

Plain data with JSON round trips and no torch, so the selector and the exporters read them in
the control plane. See DESIGN.md, "Contracts everybody relies on".
"""

from __future__ import annotations

import gc
import gzip
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

INVENTORY_FORMAT = 1


class Expectation(StrEnum):
    PASS = "pass"
    XFAIL = "xfail"
    XFAIL_STRICT = "xfail_strict"
    SKIP = "skip"


# An Inventory's expectations by their JSON value: an Enum call per variant is a sixth of
# reading one.
_EXPECTATION_OF = {e.value: e for e in Expectation}


def _expectation(value: Any) -> Expectation:
    try:
        return _EXPECTATION_OF[value]
    except (KeyError, TypeError):
        return Expectation(value)  # ValueError, naming the value


class Status(StrEnum):
    """Outcome of one variant in one run."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    XPASSED = "xpassed"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    # Not a test result: the id was planned but the loaded specs no longer have it (upstream
    # dropped it). The pipeline takes these out before Verify, History and export see them.
    REMOVED = "removed"

    @property
    def is_failure(self) -> bool:
        """True for the outcomes that make a run red."""
        return self in _FAILING


_FAILING = frozenset({Status.FAILED, Status.ERROR, Status.TIMEOUT, Status.CRASHED})


def variant_id(suite: str, template: str, subject: str, dtype: str) -> str:
    """The stable id `<suite>::<template>::<subject>::<dtype>`."""
    return f"{suite}::{template}::{subject}::{dtype}"


def split_variant_id(vid: str) -> tuple[str, str, str, str]:
    """Inverse of `variant_id`; the subject may itself contain `::` (upstream `Class::method`)."""
    parts = vid.split("::")
    if len(parts) < 4:
        raise ValueError(f"not a variant id (want suite::template::subject::dtype): {vid!r}")
    return parts[0], parts[1], "::".join(parts[2:-1]), parts[-1]


@dataclass(frozen=True)
class Variant:
    """One runnable test: a template applied to one subject and one dtype."""

    id: str
    suite: str
    template: str
    subject: str
    dtype: str
    expectation: Expectation = Expectation.PASS
    reason: str = ""
    rule: str = ""  # the YAML `file:line` that decided the expectation
    fingerprint: str = ""  # hash of everything in the definition that can change a result
    family: str = ""  # op family (base op name) used to relate aliases, refs and variants
    owners: tuple[str, ...] = ()
    watch: tuple[str, ...] = ()
    timeout_s: float | None = None
    # File suites: `path:qualname` of the upstream test and of the file's definitions it uses
    # (PyTorch repository paths), joined with a change's changed definitions.
    sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["expectation"] = str(self.expectation)
        data["owners"] = list(self.owners)
        data["watch"] = list(self.watch)
        if self.sources:
            data["sources"] = list(self.sources)
        else:
            del data["sources"]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Variant:
        return cls(
            id=data["id"],
            suite=data["suite"],
            template=data["template"],
            subject=data["subject"],
            dtype=data["dtype"],
            expectation=_expectation(data.get("expectation", "pass")),
            reason=data.get("reason", ""),
            rule=data.get("rule", ""),
            fingerprint=data.get("fingerprint", ""),
            family=data.get("family", ""),
            owners=tuple(data.get("owners", ())),
            watch=tuple(data.get("watch", ())),
            timeout_s=data.get("timeout_s"),
            sources=tuple(data.get("sources", ())),
        )


# The `kernels` key of a structured op's meta function (`TORCH_META_FUNC(x)`), not a dispatch
# key: written by suites.inventory, read by selector.kernels.
META_KEY = "TORCH_META_FUNC"


@dataclass(frozen=True)
class Inventory:
    """Every variant of every loaded suite for one environment."""

    torch_version: str
    torch_git_version: str
    variants: tuple[Variant, ...]
    created_at: str = ""
    # Environment facts the upgrade diff compares beyond variants (e.g. aten overloads).
    api_surface: Mapping[str, str] = field(default_factory=dict)
    unavailable_suites: Mapping[str, str] = field(default_factory=dict)  # suite -> why
    # Spec files that did not lint (or expand) and so are not in the Inventory: file -> why.
    refused_specs: Mapping[str, str] = field(default_factory=dict)
    # The kernel map of this torch's native_functions.yaml: C++ function -> (its dispatch
    # keys, the ops it implements). Empty in an Inventory built before it carried one.
    kernels: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.variants)

    def __iter__(self) -> Iterator[Variant]:
        return iter(self.variants)

    def by_id(self) -> dict[str, Variant]:
        return {v.id: v for v in self.variants}

    def to_json(self) -> dict[str, Any]:
        data = {
            "format": INVENTORY_FORMAT,
            "torch_version": self.torch_version,
            "torch_git_version": self.torch_git_version,
            "created_at": self.created_at,
            "api_surface": dict(self.api_surface),
            "unavailable_suites": dict(self.unavailable_suites),
            "refused_specs": dict(self.refused_specs),
            "variants": [v.to_json() for v in self.variants],
        }
        if self.kernels:  # an Inventory built without a map saves as it did before
            data["kernels"] = {
                name: [keys, list(ops)] for name, (keys, ops) in self.kernels.items()
            }
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Inventory:
        if data.get("format") != INVENTORY_FORMAT:
            raise ValueError(
                f"inventory format {data.get('format')!r} is not {INVENTORY_FORMAT}; "
                "rebuild it with `spyre-ci inventory`"
            )
        return cls(
            torch_version=data["torch_version"],
            torch_git_version=data["torch_git_version"],
            created_at=data.get("created_at", ""),
            api_surface=dict(data.get("api_surface", {})),
            unavailable_suites=dict(data.get("unavailable_suites", {})),
            refused_specs=dict(data.get("refused_specs", {})),
            kernels={
                str(name): (str(keys), tuple(ops))
                for name, (keys, ops) in data.get("kernels", {}).items()
            },
            variants=tuple(Variant.from_json(v) for v in data["variants"]),
        )

    def save(self, path: str | Path) -> None:
        """Write as JSON, gzip-compressed when the name ends in `.gz`."""
        text = json.dumps(self.to_json(), separators=(",", ":"))
        path = Path(path)
        if path.suffix == ".gz":
            with gzip.open(path, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            path.write_text(text, encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Inventory:
        path = Path(path)
        return cls.from_bytes(path.read_bytes(), compressed=path.suffix == ".gz")

    @classmethod
    def from_bytes(cls, raw: bytes, *, compressed: bool) -> Inventory:
        """The Inventory in a file's bytes (gzip-compressed JSON when `compressed`)."""
        data = json.loads(gzip.decompress(raw) if compressed else raw)
        # Tens of thousands of small objects and no cycles among them: the collector does
        # not walk them while they are built (a fifth of the read).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return cls.from_json(data)
        finally:
            if enabled:
                gc.enable()


@dataclass(frozen=True)
class Outcome:
    """What happened to one variant in one run."""

    id: str
    status: Status
    duration_s: float = 0.0
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": str(self.status),
            "duration_s": self.duration_s,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(
            id=data["id"],
            status=Status(data["status"]),
            duration_s=float(data.get("duration_s", 0.0)),
            message=data.get("message", ""),
        )


def count_statuses(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Counts per status, every status present (zero when absent)."""
    counts = {str(s): 0 for s in Status}
    for outcome in outcomes:
        counts[str(outcome.status)] += 1
    return counts
