"""Where a bisect's answer is kept and shown: a record under the state directory, and for a
run's bisect, that run's forensics (History's summary: `runs show`, the run browser) and
its outputs (run.json, forensics.json, report, callback.json with the triage verdict).

    <state>/bisect/<run id>.json                   a run's bisect (`bisect --run`)
    <state>/bisect/<last good 12>-<first bad 12>.json   a window bisected on its own

Each holds the window's commits and the answer of each variant bisected; bisecting other
variants of the same run adds theirs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from contracts.forensics import BisectAnswer, FailureForensics, TriageVerdict
from dashboard_export.layout import atomic_write
from workflows.drivers.bisect.answer import culprit_of, forensics_entry

FOLDER = "bisect"


def record_path(state_dir: Path, key: str) -> Path:
    return state_dir / FOLDER / f"{key}.json"


def window_key(last_good: str, first_bad: str) -> str:
    return f"{last_good[:12]}-{first_bad[:12]}"


def load(state_dir: Path, key: str) -> dict[str, Any] | None:
    """The record of `key`, None when there is none or it cannot be read."""
    try:
        data = json.loads(record_path(state_dir, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def save(state_dir: Path, key: str, found: Mapping[str, Any]) -> Path:
    """Write the bisect `found` under `key`, keeping the variants an earlier bisect of the
    same key answered (by window: several windows of one run are kept apart)."""
    path = record_path(state_dir, key)
    kept = load(state_dir, key) or {}
    windows = [
        w
        for w in kept.get("windows") or []
        if (w.get("last_good"), w.get("first_bad")) != (found["last_good"], found["first_bad"])
    ]
    previous: Mapping[str, Any] = next(
        (
            w
            for w in kept.get("windows") or []
            if (w.get("last_good"), w.get("first_bad")) == (found["last_good"], found["first_bad"])
        ),
        {},
    )
    merged = {**found, "variants": {**previous.get("variants", {}), **found["variants"]}}
    windows.append(merged)
    atomic_write(path, (json.dumps({"windows": windows}, indent=1) + "\n").encode())
    return path


def answers(record: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Every variant's answer in a record, by id."""
    found: dict[str, dict[str, Any]] = {}
    for window in (record or {}).get("windows") or []:
        found.update(window.get("variants") or {})
    return found


def with_bisect(
    forensics: Mapping[str, FailureForensics], found: Mapping[str, Mapping[str, Any]]
) -> dict[str, FailureForensics]:
    """Forensics entries (`{id: entry}`) with each bisected failure's `bisect`."""
    return {
        vid: replace(entry, bisect=BisectAnswer.from_json(forensics_entry(found[vid])))
        if vid in found
        else entry
        for vid, entry in forensics.items()
    }


def verdict_with_bisect(
    verdict: TriageVerdict | None, found: Mapping[str, Mapping[str, Any]]
) -> TriageVerdict | None:
    """The run's triage verdict with the culprit most of its bisected failures share."""
    from dashboard_export.triage import with_culprit

    chosen = culprit_of(found)
    if verdict is None or chosen is None:
        return verdict
    commit = chosen["culprit"]
    reason = f'{commit["sha"][:12]} "{commit["title"]}" by {commit["author"]}'
    return with_culprit(verdict, commit["sha"], reason, str(chosen["confidence"]))
