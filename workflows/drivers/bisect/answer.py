"""What a bisect found, per variant, as a person and the wire read it (pure): the culprit
commit or the smallest window, the evidence (each point's runs) and a confidence.

Confidence: `high` for a culprit that was replayed with every step decided by its first two
runs in agreement; `medium` when a step needed more runs, for a culprit named by elimination
(the window's last commit, not replayable), or for a window; `low` when a step was
undecidable. A bisect on a torch that is not the window's base is one level lower.

Commits replayed by assumption (their Python part, their build part skipped) let the search
see past them, assuming independence: a culprit at or after one is named with the
assumption and one level lower; a top that passes names the changes not replayed (those
build parts, and the commits from the first one that cannot be replayed) as the window, one
level lower when replayed commits sit between them.

A search the deadline stopped (`stopped`) is no answer in the window, only what it had
found: the window between the last point it knew good and the first it knew bad (the
whole window when it knew neither), `low` confidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workflows.drivers.bisect.search import (
    CULPRIT,
    FAILS_AT_BASE,
    FLAKY,
    NOT_REPRODUCED,
    STOPPED,
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
    assumed: list[Commit] = []  # replayed by assumption, in what the answer names
    if outcome == CULPRIT:
        assert search.bad is not None
        culprit = commits[search.bad - 1]
        if _same_torch(culprit):  # its points are the same torch: the runs contradict
            outcome = found["outcome"] = FLAKY
            confidence = "low"
            summary = (
                f"flaky: {_named(culprit)} changes only files that need a build "
                f"({culprit.assumed}): the points before and after it run the same torch, yet "
                f"one passed and one failed; the culprit is between {last_good[:12]} and "
                f"{first_bad[:12]} ({len(commits)} commit(s))"
            )
            found["window"] = _window(last_good, first_bad, commits)
        else:
            found["culprit"] = _commit(culprit, replayed=True, assumed=bool(culprit.assumed))
            summary = f"culprit {_named(culprit)} ({runs})"
            assumed = [c for c in commits[: search.bad] if c.assumed]
            if assumed:
                confidence = _LOWER[confidence]
                summary += "; " + _assuming(culprit, [c for c in assumed if c is not culprit])
    elif outcome == WINDOW or (
        outcome == NOT_REPRODUCED and any(c.assumed for c in commits[: search.top])
    ):
        outcome = found["outcome"] = WINDOW
        confidence, summary, assumed = _not_replayed(
            search.good or 0, commits, last_good, first_bad, flaky, found
        )
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
    elif outcome == STOPPED:
        good = search.good or 0
        bad = search.bad if search.bad is not None else len(commits)
        high = commits[bad - 1].sha if 0 < bad < len(commits) else first_bad
        rest = commits[good:bad]
        confidence = "low"
        summary = (
            f"stopped at the deadline after {len(search.steps)} decided step(s), before an "
            f"answer: the culprit is between {after(good)[:12]} and {high[:12]} "
            f"({len(rest)} commit(s))"
        )
        found["window"] = _window(after(good), high, rest)
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
    if assumed:
        found["assumed"] = [_skipped(c) for c in assumed]
    found.update(confidence=confidence, summary=summary, steps=steps)
    return found


def _not_replayed(
    good: int,
    commits: Sequence[Commit],
    last_good: str,
    first_bad: str,
    flaky: bool,
    found: dict[str, Any],
) -> tuple[str, str, list[Commit]]:
    """Every point up to `good` (the top) passes: the window of the changes not replayed,
    the build parts replayed by assumption and the commits from the first that cannot be
    replayed on (the culprit by elimination when that is one commit). Adds `window` (and
    `culprit`) to `found`; the confidence, the summary and the commits replayed by
    assumption."""
    suspects = [i for i in range(good) if commits[i].assumed] + list(range(good, len(commits)))
    rest = [commits[i] for i in suspects]
    assumed = [commits[i] for i in suspects if i < good]
    blocker = commits[good] if good < len(commits) else None
    low = commits[suspects[0] - 1].sha if suspects[0] > 0 else last_good
    high = first_bad if suspects[-1] == len(commits) - 1 else commits[suspects[-1]].sha
    confidence = "low" if flaky else "medium"
    if len(rest) == 1:  # the only change not replayed: the culprit, by elimination
        found["culprit"] = _commit(rest[0], replayed=False, assumed=bool(assumed))
        if assumed:
            summary = (
                f"culprit {_named(rest[0])}, by elimination: its C++ part ({rest[0].assumed}), "
                "not built, is the only change of the window not replayed; every Python "
                "change replayed passes"
            )
        else:
            summary = (
                f"culprit {_named(rest[0])}, by elimination: the window's last commit, not "
                f"replayable without a build ({rest[0].why}); every commit before it passes"
            )
    elif not assumed:
        assert blocker is not None
        summary = (
            f"between {low[:12]} (last replayable good) and {high[:12]}: "
            f"contains {_named(blocker)}, not replayable without a build ({blocker.why}); "
            f"{len(rest)} commit(s) in the window"
        )
    else:
        named = [f"the C++ part of {_named(c)} ({c.assumed})" for c in assumed]
        if blocker is not None:
            later = len(commits) - good - 1
            named.append(
                f"{_named(blocker)}, not replayable without a build ({blocker.why})"
                + (f", and the {later} commit(s) after it" if later else "")
            )
        summary = (
            f"between {low[:12]} and {high[:12]}: every Python change replayed passes; not "
            f"replayed: {'; '.join(named)}; {len(rest)} commit(s) in the window"
        )
    between = [i for i in range(suspects[0], good) if i not in suspects]
    if between:  # commits replayed among the suspects: independence assumed
        confidence = _LOWER[confidence]
        summary += (
            f"; assuming independence: none of the {len(between)} commit(s) replayed after "
            f"{rest[0].sha[:12]} fails only together with a C++ part not built"
        )
    found["window"] = _window(
        low, high, rest, blocker if blocker is not None else assumed[0], assumed
    )
    return confidence, summary, assumed


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
    if found.get("assumed"):
        entry["assumed"] = [c["sha"] for c in found["assumed"]]
    return entry


def _commit(commit: Commit, replayed: bool, assumed: bool = False) -> dict[str, Any]:
    """`assumed`: it was replayed by assumption (its build files, not built, are named)."""
    return {
        "sha": commit.sha,
        "title": commit.title,
        "author": commit.author,
        "replayed": replayed,
        **({"assumed": commit.assumed} if assumed else {}),
    }


def _window(
    good: str,
    bad: str,
    commits: Sequence[Commit],
    blocker: Commit | None = None,
    assumed: Sequence[Commit] = (),
) -> dict[str, Any]:
    window: dict[str, Any] = {
        "last_good": good,
        "first_bad": bad,
        "commits": [c.sha for c in commits],
    }
    if blocker is not None:
        window["not_replayable"] = {"sha": blocker.sha, "title": blocker.title, "why": blocker.why}
    if assumed:
        window["assumed"] = [_skipped(c) for c in assumed]
    return window


def _skipped(commit: Commit) -> dict[str, str]:
    """A commit replayed by assumption: which of its files were not built."""
    return {"sha": commit.sha, "title": commit.title, "skipped": commit.assumed}


def _same_torch(commit: Commit) -> bool:
    """Replayed by assumption with no Python part: the points around it are the same."""
    return bool(commit.assumed) and not commit.has_python


def _assuming(culprit: Commit, before: Sequence[Commit]) -> str:
    """What naming `culprit` assumed of the build parts not built (its own, those before)."""
    parts = [f"its C++ part ({culprit.assumed})"] if culprit.assumed else []
    if before:
        listed = ", ".join(f'{c.sha[:12]} "{c.title}" ({c.assumed})' for c in before)
        parts.append(f"the C++ part(s) of {listed} before it")
    lead = "its Python part makes it fail, assuming" if culprit.assumed else "assuming"
    return f"{lead} {' and '.join(parts)}, not built, did not change the outcome"


def _named(commit: Commit) -> str:
    return f'{commit.sha[:12]} "{commit.title}" by {commit.author}'
