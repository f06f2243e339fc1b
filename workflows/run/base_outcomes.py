"""Outcomes of variants on a base torch, kept per (torch sha, variant fingerprint): the A/B
comparison of a run that applied a change runs its failures on the base torch once; the next
change that breaks the same variants on the same torch reads them here.

One JSON file per base torch under the state directory (`base-outcomes/<sha>-<key>.json`: the
torch's sha, and a digest of everything else that decides an outcome: the drift applied over
it, the backend under test with its digest, and the CPU, whose fp16 numerics differ between
models). An entry is used only while the variant's fingerprint is the same (its definition did
not change) and its own digest still matches what it holds (an entry edited by hand, or cut by
a crash, is run again, never believed). Each entry names the run that ran it, so a verdict
says of every base outcome whether it was run or read. Crashes and timeouts are not kept:
they may be the machine's, and are cheap to ask again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import platform
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dashboard_export.layout import atomic_write
from suites.model import Outcome, Status

_KEPT = (Status.PASSED, Status.FAILED, Status.ERROR, Status.XFAILED, Status.XPASSED)
_SHA = re.compile(r"[0-9a-f]{7,64}")


# CPU flags that change what a kernel computes (the ISA torch and oneDNN dispatch to).
_ISA_FLAGS = ("avx512f", "avx512_bf16", "avx512_fp16", "avx2", "fma", "f16c", "amx_bf16")


@functools.cache
def cpu_identity() -> str:
    """The CPU as it decides numerics: its model and the ISA flags kernels dispatch on."""
    model, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    return f"{platform.machine()} {model} [{' '.join(f for f in _ISA_FLAGS if f in flags)}]"


@dataclass(frozen=True)
class Read:
    """A base outcome read from the cache: the run that ran it."""

    outcome: Outcome
    run_id: str


def _digest(key: str, vid: str, fingerprint: str, outcome: object, run_id: str) -> str:
    text = json.dumps([key, vid, fingerprint, outcome, run_id], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


META = "_torch"  # the file's entry that says which torch it keeps (no variant id has no `::`)


class BaseOutcomeCache:
    def __init__(self, path: Path | None, about: Mapping[str, object] | None = None) -> None:
        self.path = path  # None: nothing is kept (the torch's sha is unknown)
        self.about = dict(about or {})  # the torch, drift, backend and CPU it keeps, for `builds`
        self.refused: list[str] = []  # ids whose entry did not match its digest, last `get`

    @classmethod
    def for_torch(
        cls,
        sha: str,
        state_dir: Path,
        *,
        base: str = "",
        backend: Mapping[str, str] | None = None,
        own: Mapping[str, str] | None = None,
    ) -> BaseOutcomeCache:
        """The cache of the base torch at `sha`; `base` names what is applied over it on the
        base side (the upstream drift of a run on a build: another drift is another torch)
        and `backend` the backend under test (its package, version and digest): each keys
        a cache of its own. `own` says, for the outcomes a scheduled run keeps as that torch's
        own, its run and torch version (`{"run_id": ..., "version": ...}`): the next scheduled
        run on a later build is judged against them (`workflows.run.on_build.earlier_torch`)."""
        if not _SHA.fullmatch(sha):
            return cls(None)
        parts = [
            base,
            *(f"{k}={v}" for k, v in sorted((backend or {}).items())),
            f"cpu={cpu_identity()}",
        ]
        name = sha + "-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
        about: dict[str, object] = {
            "sha": sha,
            "base": base,
            "backend": dict(backend or {}),
            "cpu": cpu_identity(),
        }
        if own:
            about["own"] = dict(own)
        return cls(state_dir / "base-outcomes" / f"{name}.json", about)

    def _read(self) -> dict[str, dict[str, object]]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: asked again, then rewritten
        return data if isinstance(data, dict) else {}

    def get(self, ids: Sequence[str], fingerprints: Mapping[str, str]) -> dict[str, Outcome]:
        """The kept outcomes of `ids` whose fingerprint is still the one they ran with."""
        return {vid: read.outcome for vid, read in self.read(ids, fingerprints).items()}

    def read(self, ids: Sequence[str], fingerprints: Mapping[str, str]) -> dict[str, Read]:
        """As `get`, with the run that ran each; an entry whose digest does not match what it
        holds is left out (run again) and named in `refused`."""
        stored = self._read()
        key = self.path.name if self.path is not None else ""
        found, self.refused = {}, []
        for vid in ids:
            entry = stored.get(vid)
            if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprints.get(vid):
                continue
            run_id = str(entry.get("run_id") or "")
            expected = _digest(key, vid, fingerprints[vid], entry.get("outcome"), run_id)
            if entry.get("digest") != expected:
                self.refused.append(vid)
                continue
            try:
                found[vid] = Read(Outcome.from_json(entry["outcome"]), run_id)  # type: ignore[arg-type]
            except (KeyError, TypeError, ValueError):
                self.refused.append(vid)
        return found

    def put(
        self, outcomes: Iterable[Outcome], fingerprints: Mapping[str, str], run_id: str = ""
    ) -> None:
        """Keep `outcomes` (those worth keeping), each with the run that ran it."""
        if self.path is None:
            return
        stored = self._read()
        key = self.path.name
        before = stored.get(META)
        if isinstance(before, dict) and "own" in before and "own" not in self.about:
            self.about["own"] = before["own"]  # an A/B's base side keeps what a nightly said
        stored[META] = self.about
        changed = False
        for outcome in outcomes:
            if outcome.status in _KEPT and outcome.id in fingerprints:
                fingerprint = fingerprints[outcome.id]
                data = outcome.to_json()
                stored[outcome.id] = {
                    "fingerprint": fingerprint,
                    "outcome": data,
                    "run_id": run_id,
                    "digest": _digest(key, outcome.id, fingerprint, data, run_id),
                }
                changed = True
        if changed:
            # A cache: losing it costs a rerun, never a verdict.
            with contextlib.suppress(OSError):
                atomic_write(self.path, json.dumps(stored, sort_keys=True).encode())


def kept_torches(state_dir: Path) -> list[tuple[Path, dict[str, object]]]:
    """Every kept torch under `state_dir` with what it says of itself (newest file first);
    the outcomes are not checked here (`BaseOutcomeCache(path).read` does)."""
    found = []
    folder = state_dir / "base-outcomes"
    with contextlib.suppress(OSError):
        files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for path in files:
            about = BaseOutcomeCache(path)._read().get(META)
            found.append((path, about if isinstance(about, dict) else {}))
    return found


def kept(state_dir: Path) -> list[tuple[Path, dict[str, object], dict[str, Outcome]]]:
    """Every kept torch under `state_dir` (`kept_torches`) with its outcomes whose digest
    holds."""
    found = []
    for path, about in kept_torches(state_dir):
        cache = BaseOutcomeCache(path)
        fingerprints = {
            vid: str(entry.get("fingerprint"))
            for vid, entry in cache._read().items()
            if vid != META and isinstance(entry, dict)
        }
        found.append((path, about, cache.get(list(fingerprints), fingerprints)))
    return found
