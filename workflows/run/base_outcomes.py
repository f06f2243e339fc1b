"""Outcomes of variants on a base torch, kept per (torch sha, variant fingerprint): the A/B
comparison of a run that applied a change runs its failures on the base torch once; the next
change that breaks the same variants on the same torch reads them here.

One JSON file per base torch under the state directory (`base-outcomes/<sha>-<key>.json`: the
torch's sha, and a digest of the drift applied over it and of the backend under test). An entry
is used only while the variant's fingerprint is the same (its definition did not change).
Crashes and timeouts are not kept: they may be the machine's, and are cheap to ask again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from dashboard_export.layout import atomic_write
from suites.model import Outcome, Status

_KEPT = (Status.PASSED, Status.FAILED, Status.ERROR, Status.XFAILED, Status.XPASSED)
_SHA = re.compile(r"[0-9a-f]{7,64}")


class BaseOutcomeCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: nothing is kept (the torch's sha is unknown)

    @classmethod
    def for_torch(
        cls, sha: str, state_dir: Path, *, base: str = "", backend: Mapping[str, str] | None = None
    ) -> BaseOutcomeCache:
        """The cache of the base torch at `sha`; `base` names what is applied over it on the
        base side (the upstream drift of a run on a build: another drift is another torch)
        and `backend` the backend under test (its package, version and digest): each keys
        a cache of its own."""
        if not _SHA.fullmatch(sha):
            return cls(None)
        parts = [base, *(f"{k}={v}" for k, v in sorted((backend or {}).items()))]
        name = sha
        if any(parts):
            name += "-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
        return cls(state_dir / "base-outcomes" / f"{name}.json")

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
        stored = self._read()
        found = {}
        for vid in ids:
            entry = stored.get(vid)
            if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprints.get(vid):
                continue
            try:
                found[vid] = Outcome.from_json(entry["outcome"])  # type: ignore[arg-type]
            except (KeyError, TypeError, ValueError):
                continue
        return found

    def put(self, outcomes: Iterable[Outcome], fingerprints: Mapping[str, str]) -> None:
        if self.path is None:
            return
        stored = self._read()
        changed = False
        for outcome in outcomes:
            if outcome.status in _KEPT and outcome.id in fingerprints:
                stored[outcome.id] = {
                    "fingerprint": fingerprints[outcome.id],
                    "outcome": outcome.to_json(),
                }
                changed = True
        if changed:
            # A cache: losing it costs a rerun, never a verdict.
            with contextlib.suppress(OSError):
                atomic_write(self.path, json.dumps(stored, sort_keys=True).encode())
