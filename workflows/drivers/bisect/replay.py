"""Running a bisect: the window's commits from GitHub, each point of the window applied to
the installed torch through the change overlay, the variants run there as a shard is, and
the answers.

GitHub is reached through the product's client (`relay.github.GitHubAdapter`: the compare's
commits, then each commit's files and patches). A point's test processes import the torch of
that point (`SPYRE_CI_CHANGE`, the overlay of the cumulative diff) and are forked from a warm
zygote when one may serve them; the zygotes of a point stop when it is decided.

A bisect has a `Deadline` for all of it: GitHub's answers and every point's runs. Past it
while the window is being listed (a slow GitHub), nothing could be decided: `BisectInfra`
(exit 3). Past it during the search, no further run starts and the variants still open are
answered `stopped`, with the window they had narrowed to.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.errors import BadInput, Unavailable
from relay.github_errors import GitHubRefused, GitHubUnavailable
from suites.model import Status
from workflows.drivers.bisect.answer import answer
from workflows.drivers.bisect.search import STOPPED, Step, bisect
from workflows.drivers.bisect.window import Commit, classify, replayable_prefix, state_diff
from workflows.run.on_build import same_sha, torch_git_sha
from workflows.runner import zygote
from workflows.runner.change_overlay import ChangeError, prepare
from workflows.runner.shard_runner import Limits
from workflows.stores.sources import installed_torch

if TYPE_CHECKING:
    from relay.github import GitHubAdapter


class BisectError(BadInput):
    """The bisect cannot start as asked (an unknown sha, an empty window, no such variant):
    bad input, exit code 2. The message names what and where."""


class BisectInfra(Unavailable):
    """A point could not be run (the test processes, the device, GitHub): exit code 3. The
    bisect stops; what it found so far is no verdict."""


@dataclass(frozen=True)
class Target:
    """What to bisect: the window `last_good...first_bad` of `repo` for `variants`."""

    repo: str
    last_good: str
    first_bad: str
    variants: tuple[str, ...]
    specs: tuple[str, ...] = ()
    limits: Limits = Limits()


@dataclass(frozen=True)
class Deadline:
    """When a bisect must stop: `seconds` from its start (`time.monotonic`)."""

    seconds: float
    ends: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def left(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def passed(self) -> bool:
        return self.left() <= 0.0

    def __str__(self) -> str:
        return f"{self.seconds:g} s (--deadline-s)"


NO_DEADLINE = Deadline(float("inf"), float("inf"))


def window(
    adapter: GitHubAdapter, target: Target, deadline: Deadline = NO_DEADLINE
) -> list[Commit]:
    """The window's commits, oldest first, each classified. The deadline is checked before
    each of GitHub's answers is asked for: past it, `BisectInfra` (nothing decided)."""
    where = f"{target.repo} {target.last_good[:12]}...{target.first_bad[:12]}"

    def in_time(done: str | None) -> None:
        if not deadline.passed():
            return
        if done is None:  # an earlier window took the time
            raise BisectInfra(
                f"the bisect's deadline of {deadline} passed before the window {where} was "
                "listed; nothing of it was decided"
            )
        raise BisectInfra(
            f"GitHub was too slow: the bisect's deadline of {deadline} passed while the "
            f"window {where} was being listed ({done}); nothing was decided (give more time "
            "with --deadline-s, or try again when GitHub answers faster)"
        )

    try:
        in_time(None)
        listed = adapter.window_commits(target.repo, target.last_good, target.first_bad)
        commits = []
        for n, c in enumerate(listed):
            in_time(f"the files of {n} of its {len(listed)} commit(s) read")
            commits.append(
                classify(c.sha, c.message, c.author, adapter.commit_entries(target.repo, c.sha))
            )
        in_time(f"the files of all its {len(listed)} commit(s) read, no time left to run them")
    except GitHubRefused as exc:
        raise BisectError(
            f"GitHub refused the window {where}: {exc} (are both shas commits of {target.repo}, "
            "the last good one first?)"
        ) from None
    except GitHubUnavailable as exc:
        raise BisectInfra(f"GitHub did not answer for the window {where}: {exc}") from None
    if not commits:
        raise BisectError(
            f"the window {where} holds no commit: nothing to bisect (is --last-good an "
            "ancestor of --first-bad, and are they different commits?)"
        )
    return commits


def run(
    target: Target,
    adapter: GitHubAdapter,
    work: Path,
    *,
    warm: bool = True,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    deadline: Deadline = NO_DEADLINE,
) -> dict[str, Any]:
    """The bisect of `target` (JSON): the window's commits, the torch it ran on, and per
    variant its answer. BisectError on bad input, BisectInfra when a point cannot run or
    GitHub did not list the window before the `deadline`; variants the deadline stopped
    later are answered `stopped`. `warm`: the points' test processes may fork from the warm
    zygote (`Settings.zygote`)."""
    from workflows.run.pipeline import execute_ids

    root, version = installed_torch()
    if root is None:
        raise BisectInfra("torch is not installed here: no torch to replay the window on")
    sha = torch_git_sha(root)
    on_base = bool(sha) and same_sha(sha, target.last_good)
    if not on_base:
        say(
            f"spyre-ci: the installed torch is {sha[:12] or version}, not the window's base "
            f"{target.last_good[:12]}: the commits are replayed on it (lower confidence)"
        )
    commits = window(adapter, target, deadline)
    top, why = replayable_prefix(commits, root)
    replayable = sum(c.replayable for c in commits)
    assumed = sum(bool(c.assumed) for c in commits[:top])
    say(
        f"bisect: {len(commits)} commit(s) in {target.last_good[:12]}...{target.first_bad[:12]}, "
        f"{replayable} replayable"
        + (
            f", {assumed} by assumption (their Python part; their C++ part not built, assumed "
            "not to change the outcome)"
            if assumed
            else ""
        )
        + f"; points 0..{top} can run"
        + (f" (commit {commits[top].sha[:12]}: {why})" if top < len(commits) else "")
    )
    cache = work / "overlays"

    def run_point(point: int, ids: Sequence[str]) -> Mapping[str, str]:
        diff = state_diff(commits, point, root)
        try:
            change = prepare(
                diff,
                root,
                source=f"window point {point}",
                torch_sha=sha,
                cache_dir=cache,
            )
        except ChangeError as exc:  # the replayable prefix applied: this is the tool's
            raise BisectInfra(f"point {point} could not be prepared: {exc}") from None
        done = execute_ids(
            f"point-{point}",
            ids,
            work / f"point-{point}",
            limits=target.limits,
            specs=target.specs,
            env=change.env(),
            warm=warm,
        )
        if done.fault is not None:
            raise BisectInfra(
                f"point {point} (after {_after(commits, point, target)}): {done.fault.summary}"
            )
        found = {o.id: o.status for o in done.outcomes}
        removed = [v for v in ids if found.get(v) == Status.REMOVED]
        if removed:
            raise BisectError(
                f"no such variant in the specs: {', '.join(removed)} "
                "(`spyre-ci suites expand` lists the ids)"
            )
        missing = [v for v in ids if v not in found]
        if missing:
            raise BisectInfra(f"point {point}: no outcome for {', '.join(missing)}")
        return {v: str(found[v]) for v in ids}

    def heard(point: int, steps: Mapping[str, Step]) -> None:
        zygote.stop_all()  # the next point imports another torch
        for vid, step in sorted(steps.items()):
            say(
                f"  after {_after(commits, point, target)}: {vid}: {step.decision} "
                f"({', '.join(step.statuses)})"
            )

    try:
        searches = bisect(
            target.variants,
            top,
            top == len(commits),
            run_point,
            lambda status: Status(status).is_failure,
            heard,
            deadline.passed,
        )
    finally:
        zygote.stop_all()
    stopped = sorted(vid for vid, s in searches.items() if s.answer == STOPPED)
    if stopped:
        say(
            f"bisect: the deadline of {deadline} passed before {', '.join(stopped)} had an "
            "answer: each is given the window it had narrowed to (stopped)"
        )
    return {
        "repo": target.repo,
        "last_good": target.last_good,
        "first_bad": target.first_bad,
        "torch": {"version": version, "git_sha": sha or "unknown", "on_base": on_base},
        "commits": [c.to_json() for c in commits],
        "replayable_points": top,
        "variants": {
            vid: answer(s, commits, target.last_good, target.first_bad, on_base)
            for vid, s in searches.items()
        },
    }


def _after(commits: Sequence[Commit], point: int, target: Target) -> str:
    if point == 0:
        return f"base {target.last_good[:12]}"
    return f"{commits[point - 1].sha[:12]} ({point}/{len(commits)})"
