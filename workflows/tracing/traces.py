"""Traces for selection: which trace a plan joins, and the one reader of trace files.

A trace (`selector.ImpactMap`) says, per variant, which torch Python functions it executed
and which aten ops it dispatched. Selection joins the Scout's changed definitions and ops
with it by default:

1. `--impact-map FILE` / `$SPYRE_CI_IMPACT_MAP`: that file (the explicit choice);
2. otherwise the shipped trace of the bundled Inventory on the pinned torch
   (`workflows/data/trace-<torch version>.json.gz`), when the Inventory's torch is that
   version, overlaid by the traces earlier runs stored beside History
   (`workflows.tracing.trace_store.joined_trace`); variants whose definition changed since they
   were traced are stale;
3. otherwise none: the Scout says which paths it could not narrow and runs them blind.

Files are JSON (format 1, `spyre-ci impact-map --out x.json`) or the compact gzipped form
(format 2, `--out x.json.gz`); both go through `selector.ImpactMap.from_json`.
"""

from __future__ import annotations

import gc
import gzip
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import selector
from suites.model import Inventory
from workflows.errors import BadInput
from workflows.stores import kept
from workflows.stores.kept import Kept

DATA = Path(__file__).resolve().parents[1] / "data"


class TraceError(BadInput, ValueError):
    """A trace file that cannot be read; the message names the file."""


def shipped_trace_path(torch_version: str) -> Path:
    return DATA / f"trace-{torch_version}.json.gz"


def read_trace_data(path: Path) -> Any:
    """The JSON of a trace file (plain or gzipped); errors name the file."""
    return _decode(_read_bytes(path), path)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TraceError(
            f"{path}: no impact map there; record one with `spyre-ci impact-map --out {path}`"
        ) from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None


def _decode(raw: bytes, path: Path) -> Any:
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TraceError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg} (expected: impact map)"
        ) from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise TraceError(f"{path}: not an impact map (JSON expected): {exc}") from None


def write_trace(path: Path, data: dict[str, Any]) -> None:
    """Write recorded trace JSON (format 1, as `record_impact_map` returns it): plain JSON,
    or the compact form gzipped when `path` ends in `.gz` (the shipped form)."""
    if path.suffix != ".gz":
        path.write_text(json.dumps(data) + "\n", encoding="utf-8")
        return
    compact = selector.ImpactMap.from_json(data, str(path)).to_compact()
    compact["untraced"] = list(data.get("untraced", ()))
    raw = json.dumps(compact, separators=(",", ":")).encode()
    # mtime=0: the same trace gives the same bytes (a diff of the shipped file means a change).
    path.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))


def read_trace(path: Path) -> selector.ImpactMap:
    return _impact_map(read_trace_data(path), path)


def _impact_map(data: Any, path: Path) -> selector.ImpactMap:
    if not isinstance(data, dict):
        kind = {list: "array", str: "string", int: "number", float: "number"}.get(
            type(data), "value"
        )
        raise TraceError(
            f"{path}: not an impact map: a JSON object with 'format' and 'variants' is "
            f"expected, not a JSON {kind}"
        )
    try:
        return selector.ImpactMap.from_json(data, str(path))
    except (selector.SelectorError, AttributeError) as exc:
        raise TraceError(str(exc)) from None


@lru_cache(maxsize=2)
def _shipped(path: str, mtime_ns: int) -> selector.ImpactMap:
    # Millions of small objects, no cycles among them: the collector does not walk them
    # while they are built (a third of the read).
    enabled = gc.isenabled()
    gc.disable()
    try:
        raw = _read_bytes(Path(path))
        store = _kept_traces()
        key = hashlib.sha256(raw).digest() if store is not None else b""
        trace = store.load(key) if store is not None else None
        if not isinstance(trace, selector.ImpactMap):
            trace = _impact_map(_decode(raw, Path(path)), Path(path))
            trace.inverted()  # every plan asks for it
            if store is not None:
                store.save(key, trace)
    finally:
        if enabled:
            gc.enable()
    return trace


# The shipped trace, once read from its JSON, is kept pickled in the cache folder
# (`workflows.stores.kept`): every `spyre-ci` process that plans loads it in under half the
# time (0.24 s against 0.52 s here, benchmarks/kept_trace.py). A new trace, a change to the
# classes it holds or another Python reads the JSON again (and keeps that).
_KEPT_CODE = ("impact.py", "opnames.py")


def _kept_traces() -> Kept | None:
    code = Path(selector.__file__).parent
    return kept.store(
        "traces",
        [code / name for name in _KEPT_CODE],
        "the shipped trace",
        limit=4,
        valid=lambda value: isinstance(value, selector.ImpactMap),
        prefix="shipped-",
    )


def shipped_trace(torch_version: str) -> selector.ImpactMap | None:
    """The shipped trace for this torch, loaded once per process; None when none ships."""
    path = shipped_trace_path(torch_version)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    return _shipped(str(path), mtime)


@dataclass(frozen=True)
class ImpactNote:
    """plan.json's `impact_map`: which trace, recorded on which torch, how much it covers;
    for the default trace also its `source` and how many `stored` traces it joins."""

    path: str
    torch_version: str
    variants: int
    inventory_variants_traced: int
    stale: int
    warning: str | None = None  # recorded on another torch than the Inventory's
    source: str | None = None  # "shipped", "History" or "shipped + History"
    stored: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "torch_version": self.torch_version,
            "variants": self.variants,
            "inventory_variants_traced": self.inventory_variants_traced,
            "stale": self.stale,
        }
        for key in ("warning", "source", "stored"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImpactNote:
        return cls(
            str(data["path"]),
            str(data.get("torch_version") or ""),
            int(data.get("variants") or 0),
            int(data.get("inventory_variants_traced") or 0),
            int(data.get("stale") or 0),
            data.get("warning"),
            data.get("source"),
            data.get("stored"),
        )


def describe(trace: selector.ImpactMap, path: str, inventory: Inventory) -> ImpactNote:
    """plan.json's `impact_map` of `trace`, read from `path`, for `inventory`."""
    fingerprints = {v.id: v.fingerprint for v in inventory.variants}
    traced = set(trace.functions) | set(trace.aten_ops)
    warning = None
    if trace.torch_version and trace.torch_version != inventory.torch_version:
        warning = (
            f"recorded on torch {trace.torch_version}, the Inventory is torch "
            f"{inventory.torch_version}: record it again with `spyre-ci impact-map`"
        )
    return ImpactNote(
        path,
        trace.torch_version,
        len(traced),
        len(traced & fingerprints.keys()),
        len(trace.stale(fingerprints)),
        warning,
    )
