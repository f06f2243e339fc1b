"""Temporary L3 demotion: no new upstream check runs while a `crcr-demotion/<repo>` PR is open.

PyTorch's level sync opens a pull request on the upstream repository, from the branch
`crcr-demotion/<owner>/<repo>`, that moves an L3 repository to L2. While it is open the relay
treats the repository's check runs as L2 would: none are created. Everything else goes on:
events are still dispatched to it, its results still reach HUD stamped L3, and a job that
started before the demotion was first seen still gets its check run completed.

Whether the PR is open is asked of GitHub (the adapter, github3.py) at most once per
`cache_seconds` per repository in each process; when the demotion began is kept in Redis, so
every relay process agrees on it. GitHub trouble leaves the last known answer in force (none
known: not demoted), as the reference's sweeper does: a demotion never blocks a callback.

The reference compares a job's start with when its sweeper recorded the demotion
(`job_started_at >= since`: held back), a job just starting being "now". Here the demotion is
seen on demand, by the callback that asks: its first sighting is dated when that request
arrived (`seen_at`), not when GitHub answered a few milliseconds later, so the job whose own
start is the first to see the PR open compares equal and is held back, as the reference
holds back a job starting after its sweep.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from relay.crcr_state import CrcrState, StateUnavailable
from relay.events import RelayError
from relay.github import GitHubAdapter, GitHubUnavailable

log = logging.getLogger("relay.demotion")

BRANCH_PREFIX = "crcr-demotion/"
CACHE_SECONDS = 60.0


class Demotions:
    """When each L3 repository's demotion began, if it is demoted now."""

    def __init__(
        self,
        adapter: GitHubAdapter,
        state: CrcrState,
        upstream_repo: str,
        cache_seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.adapter = adapter
        self.state = state
        self.upstream_repo = upstream_repo
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._checked: dict[str, tuple[float, float | None]] = {}
        self._lock = threading.Lock()

    def since(self, repo: str, seen_at: float | None = None) -> float | None:
        """When `repo`'s demotion began, or None when it is not demoted. `seen_at`: when the
        request asking arrived (default: the clock now), the start of a demotion it is the
        first to see."""
        now = time.monotonic()
        with self._lock:
            cached = self._checked.get(repo)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        began = self._look_up(repo, seen_at)
        with self._lock:
            self._checked[repo] = (now, began)
        return began

    def suppressed(
        self,
        repo: str,
        level: str,
        job_started_at: float | None = None,
        seen_at: float | None = None,
    ) -> bool:
        """Whether a new check run for `repo` is held back. A job that started before the
        demotion keeps its check run; None means now (a job starting, a label). `seen_at`:
        when the asking request arrived (see `since`)."""
        if level != "L3":
            return False
        began = self.since(repo, seen_at)
        return began is not None and (job_started_at is None or job_started_at >= began)

    def _look_up(self, repo: str, seen_at: float | None = None) -> float | None:
        owner = self.upstream_repo.split("/")[0]
        head = f"{owner}:{BRANCH_PREFIX}{repo}"
        try:
            open_pr = self.adapter.has_open_pull(self.upstream_repo, head)
        except (GitHubUnavailable, RelayError) as exc:
            log.warning("demotion of %s: %s; keeping the last known answer", repo, exc)
            return self._known(repo)
        # Dated by the request that asked, never later than now: a job starting with that
        # request is not "before" a demotion its own callback found.
        now = self.clock()
        first_seen = now if seen_at is None else min(now, seen_at)
        try:
            return self.state.set_demotion(repo, open_pr, first_seen)
        except StateUnavailable as exc:
            log.warning("demotion of %s: %s; not demoted", repo, exc)
            return None

    def _known(self, repo: str) -> float | None:
        try:
            return self.state.demoted_since(repo)
        except StateUnavailable as exc:
            log.warning("demotion of %s: %s; not demoted", repo, exc)
            return None
