"""What a bisect found, per variant, as a person and the wire read it (pure): the culprit
commit or the smallest window, the evidence (each point's runs) and a confidence.

Confidence: `high` for a culprit that was replayed with every step decided by its first two
runs in agreement; `medium` when a step needed more runs, for a culprit named by elimination
(the window's last commit, not replayable), or for a window; `low` when a step was
undecidable. A bisect on a torch that is not the window's base is one level lower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workflows.drivers.bisect.search import (
    CULPRIT,
    FAILS_AT_BASE,
    FLAKY,
    NOT_REPRODUCED,
    UNDECIDABLE,
    WINDOW,
    Search,
)
from workflows.drivers.bisect.window import Commit

FOUND = frozenset({CULPRIT, WINDOW, FLAKY})  # an answer in the window (exit code 0)
_LOWER = {"high": "medium", "medium": "low", "low": "low"}


def answer(
    search: Search,
    commits: Sequence[Commit],
    last_good: str,
    first_bad: str,
    on_base: bool,
) -> dict[str, Any]:
    """One variant's answer (JSON): `outcome`, `culprit` or `window`, `confidence`,
    `summary`, `steps`."""
    outcome = search.answer or FLAKY

    def after(point: int) -> str:
        return commits[point - 1].sha if point > 0 else last_good

    steps = [{**s.to_json(), "after": after(s.point), "applied": s.point} for s in search.steps]
    clean = all(s.clean for s in search.steps)
    flaky = any(s.decision == UNDECIDABLE for s in search.steps)
    confidence = "low" if flaky else "high" if clean else "medium"
    found: dict[str, Any] = {"variant": search.variant, "outcome": outcome}
    runs = f"{len(search.steps)} step(s), " + (
        "each decided by 2 agreeing runs" if clean else "some needed more runs"
    )
    if outcome == CULPRIT:
        assert search.bad is not None
        culprit = commits[search.bad - 1]
        found["culprit"] = _commit(culprit, replayed=True)
        summary = f"culprit {_named(culprit)} ({runs})"
    elif outcome == WINDOW:
        good = search.good or 0
        blocker = commits[search.top]
        rest = commits[good:]
        if len(rest) == 1:  # the window's last commit: the culprit, by elimination
            confidence = "low" if flaky else "medium"
            found["culprit"] = _commit(blocker, replayed=False)
            summary = (
                f"culprit {_named(blocker)}, by elimination: the window's last commit, not "
                f"replayable without a build ({blocker.why}); every commit before it passes"
            )
        else:
            confidence = "low" if flaky else "medium"
            summary = (
                f"between {after(good)[:12]} (last replayable good) and {first_bad[:12]}: "
                f"contains {_named(blocker)}, not replayable without a build ({blocker.why}); "
                f"{len(rest)} commit(s) in the window"
            )
        found["window"] = _window(after(good), first_bad, rest, blocker)
    elif outcome == FLAKY:
        good = search.good or 0
        bad = search.bad if search.bad is not None else len(commits)
        last = search.steps[-1]
        rest = commits[good:bad]
        confidence = "low"
        summary = (
            f"flaky: undecidable at {after(last.point)[:12]} "
            f"({', '.join(last.statuses)}); the culprit is between {after(good)[:12]} and "
            f"{(commits[bad - 1].sha if bad > 0 else first_bad)[:12]} ({len(rest)} commit(s))"
        )
        found["window"] = _window(after(good), commits[bad - 1].sha if bad else first_bad, rest)
    elif outcome == FAILS_AT_BASE:
        summary = f"fails on the window's base {last_good[:12]} too: not a regression of it"
    else:
        assert outcome == NOT_REPRODUCED
        summary = (
            "passes with every commit of the window replayed: the failure does not reproduce "
            "without a build (or it was this machine's)"
        )
    if not on_base:
        confidence = _LOWER[confidence]
        summary += "; replayed on a torch that is not the window's base"
    found.update(confidence=confidence, summary=summary, steps=steps)
    return found


def culprit_of(answers: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The answer whose culprit the most variants share (higher confidence first); None
    when no variant has a culprit."""
    named = [a for a in answers.values() if a.get("culprit")]
    if not named:
        return None
    shared: dict[str, int] = {}
    for a in named:
        shared[a["culprit"]["sha"]] = shared.get(a["culprit"]["sha"], 0) + 1
    rank = {"high": 0, "medium": 1, "low": 2}
    return min(
        named,
        key=lambda a: (-shared[a["culprit"]["sha"]], rank.get(str(a.get("confidence")), 3)),
    )


def forensics_entry(found: Mapping[str, Any]) -> dict[str, Any]:
    """What a failure's forensics entry keeps of its bisect."""
    entry: dict[str, Any] = {
        "outcome": found["outcome"],
        "confidence": found["confidence"],
        "summary": found["summary"],
    }
    if found.get("culprit"):
        entry["culprit"] = dict(found["culprit"])
    if found.get("window"):
        entry["window"] = {
            k: v for k, v in found["window"].items() if k in ("last_good", "first_bad")
        }
    return entry


def _commit(commit: Commit, replayed: bool) -> dict[str, Any]:
    return {
        "sha": commit.sha,
        "title": commit.title,
        "author": commit.author,
        "replayed": replayed,
    }


def _window(
    good: str, bad: str, commits: Sequence[Commit], blocker: Commit | None = None
) -> dict[str, Any]:
    window: dict[str, Any] = {
        "last_good": good,
        "first_bad": bad,
        "commits": [c.sha for c in commits],
    }
    if blocker is not None:
        window["not_replayable"] = {"sha": blocker.sha, "title": blocker.title, "why": blocker.why}
    return window


def _named(commit: Commit) -> str:
    return f'{commit.sha[:12]} "{commit.title}" by {commit.author}'
