"""The torch a commit was made against, without a build: the newest build of the configured
source (`Settings.build_index`) whose git sha is the change's base or an ancestor of it, and
the upstream drift from that build to the base.

    found = resolve(base_sha, repo, settings)      # None: no source configured
    found.build                                    # the provisioned environment (its python)
    found.drift                                    # Python diff build..base, every page

The candidates are ordered by version, newest first; a nightly whose day is after the base's
commit day is skipped unread (a nightly of day D holds commits up to D). For the others the
build's git sha is read from the wheel's `torch/version.py` and GitHub's compare of
`base...build` decides: `identical` or `behind` (the build is an ancestor of the base) takes
it; `ahead`, `diverged` or unknown to GitHub does not. The drift is GitHub's compare of
`build...base`; when GitHub cuts its file list (300 files), the drift is read commit by commit
instead, and applied layer over layer: never silently cut.

A process resolves a base once (`workflows.run.on_build` keeps the answer for every shard,
rerun and A/B base of the run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.github_errors import GitHubRefused, GitHubUnavailable
from selector.diff import compare_patch_text
from workflows.errors import InfrastructureError
from workflows.runner import build_envs
from workflows.runner.build_source import (
    BuildSource,
    BuildSourceError,
    BuildsUnavailable,
    Candidate,
    wheel_label,
)
from workflows.runner.torch_builds import TorchBuild
from workflows.settings import Settings

if TYPE_CHECKING:
    from relay.github import GitHubAdapter

MAX_READ = 8  # candidate wheels read (downloaded) for one base before giving up
DEFAULT_REPO = "pytorch/pytorch"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Drift:
    """What upstream changed from the build to the base: its commits and the diffs to
    apply (one, or one per commit when the compare's file list was cut)."""

    commits: int = 0
    diffs: tuple[tuple[str, str], ...] = ()  # (label, unified diff) applied in order
    paged: bool = False  # read commit by commit: GitHub's compare cut its file list


@dataclass(frozen=True)
class BaseBuild:
    """The build a change is tested on: its environment, where it came from, how it relates
    to the base, and the drift to apply on it."""

    build: TorchBuild
    wheel: str
    relation: str  # identical | behind
    drift: Drift = field(default_factory=Drift)
    notes: tuple[str, ...] = ()


class NoBuild(InfrastructureError):
    """No build of the source is at or before the base: exit 3, the event waits for one."""


def resolve(
    base: str,
    repo: str,
    settings: Settings,
    *,
    log: Log = lambda _text: None,
    adapter: GitHubAdapter | None = None,
) -> BaseBuild | None:
    """The build for `base` (provisioned), or None when the settings name no source."""
    if not settings.build_index or not base:
        return None
    return _resolve(base, repo or DEFAULT_REPO, settings, log, adapter)


def _resolve(
    base: str, repo: str, settings: Settings, log: Log, adapter: GitHubAdapter | None
) -> BaseBuild:
    if not settings.github_url and not settings.github_token:
        raise BuildSourceError(
            "SPYRE_CI_BUILD_INDEX is set but no GitHub is (SPYRE_CI_GITHUB_URL and/or "
            "SPYRE_CI_GITHUB_TOKEN): a build's place in upstream's history is asked of GitHub"
        )
    assert settings.env_cache_dir is not None
    from relay.github import GitHubAdapter

    github = adapter or GitHubAdapter(base_url=settings.github_url, token=settings.github_token)
    source = BuildSource(settings.build_index or "", settings.env_cache_dir / "downloads")
    chosen = choose(base, repo, source, github)
    log(
        f"torch build for base {base[:12]}: {chosen.candidate.name} "
        f"({chosen.sha[:12]}, {chosen.relation})"
    )
    build = provision_chosen(chosen, settings, log)
    drift = Drift() if chosen.relation == "identical" else _drift(github, repo, chosen.sha, base)
    return BaseBuild(build, chosen.candidate.name, chosen.relation, drift, chosen.skipped)


@dataclass(frozen=True)
class Chosen:
    """The build `choose` found: its candidate, wheel on disk, git sha, how it relates to
    the base, and why each newer candidate was passed over."""

    candidate: Candidate
    wheel: Path
    sha: str
    relation: str
    skipped: tuple[str, ...] = ()


def choose(base: str, repo: str, source: BuildSource, github: GitHubAdapter) -> Chosen:
    """The newest build of `source` that is `base` or an ancestor of it. NoBuild when none
    is; BuildsUnavailable when the source or GitHub cannot be read."""
    day = _day_after(_github(lambda: github.commit_date(repo, base)))
    skipped: list[str] = []
    newest = [c for c in source.candidates() if not (day and c.day and c.day > day)]
    for candidate, wheel, sha in _labelled(source, newest, skipped):
        relation = _relation(github, repo, base, sha, candidate, skipped)
        if relation is not None:
            return Chosen(candidate, wheel, sha, relation, tuple(skipped))
    said = "; ".join(skipped[:5]) or "none of its builds is dated at or before the base"
    raise NoBuild(
        f"no torch build of {source} is the base {base[:12]} or an ancestor of it ({said})"
    )


def first_containing(
    head: str, repo: str, source: BuildSource, github: GitHubAdapter
) -> Chosen | None:
    """The oldest build of `source` that contains `head` (GitHub's compare of
    `head...build`: `identical` or `ahead`), or None while there is none: where a change that
    needs a build is first there to test. Nightlies dated before the day before `head`'s
    commit are passed over unread."""
    day = _day_after(_github(lambda: github.commit_date(repo, head)), days=-1)
    skipped: list[str] = []
    oldest = [c for c in reversed(source.candidates()) if not (day and c.day and c.day < day)]
    for candidate, wheel, sha in _labelled(source, oldest, skipped):
        if sha[:40].lower() == head[:40].lower():
            return Chosen(candidate, wheel, sha, "identical", tuple(skipped))
        try:
            status = _github(partial(github.comparison, repo, head, sha)).status
        except GitHubRefused:
            continue
        if status in ("identical", "ahead"):
            return Chosen(candidate, wheel, sha, str(status), tuple(skipped))
    return None


def _labelled(
    source: BuildSource, candidates: Sequence[Candidate], skipped: list[str]
) -> Iterator[tuple[Candidate, Path, str]]:
    """(candidate, its wheel on disk, its git sha) for the first `MAX_READ` candidates, in
    order; a wheel that cannot be read or names no sha is passed over, said in `skipped`."""
    for read, candidate in enumerate(candidates):
        if read >= MAX_READ:
            skipped.append(f"stopped after reading {MAX_READ} builds")
            return
        wheel = source.fetch(candidate)
        try:
            _version, sha = wheel_label(wheel)
        except BuildsUnavailable as exc:
            skipped.append(f"{candidate.name}: {exc}")
            continue
        if not sha:
            skipped.append(f"{candidate.name}: its torch/version.py names no git sha")
            continue
        yield candidate, wheel, sha


def provision_chosen(chosen: Chosen, settings: Settings, log: Log) -> TorchBuild:
    """The environment of a chosen build, in the settings' environment cache."""
    assert settings.env_cache_dir is not None
    return build_envs.provision(
        chosen.wheel,
        chosen.sha,
        settings.env_cache_dir,
        max_bytes=settings.env_cache_max_bytes,
        log=log,
    )


def _relation(
    github: GitHubAdapter,
    repo: str,
    base: str,
    sha: str,
    candidate: Candidate,
    skipped: list[str],
) -> str | None:
    """identical / behind when the build at `sha` is `base` or an ancestor of it, else None
    (with the reason in `skipped`)."""
    if sha[:40].lower() == base[:40].lower():
        return "identical"
    try:
        status = _github(lambda: github.comparison(repo, base, sha)).status
    except GitHubRefused as exc:
        skipped.append(f"{candidate.name} ({sha[:12]}): GitHub does not know it ({exc})")
        return None
    if status in ("identical", "behind"):
        return str(status)
    skipped.append(f"{candidate.name} ({sha[:12]}): {status or 'no status'} against the base")
    return None


def _drift(github: GitHubAdapter, repo: str, build: str, base: str) -> Drift:
    whole = _github(lambda: github.comparison(repo, build, base))
    commits = whole.ahead_by or len(whole.commit_shas)
    if not whole.truncated:
        text = compare_patch_text([dict(e) for e in whole.entries])
        return Drift(commits, (("drift", text),) if text else ())
    # GitHub cut the compare's files at 300: every commit's own files, in order.
    diffs: list[tuple[str, str]] = []
    for sha in whole.commit_shas:
        entries: Sequence[Mapping[str, Any]] = _github(partial(github.commit_entries, repo, sha))
        text = compare_patch_text([dict(e) for e in entries])
        if text:
            diffs.append((f"drift commit {sha[:12]}", text))
    return Drift(commits, tuple(diffs), paged=True)


def _github(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except GitHubUnavailable as exc:
        raise BuildsUnavailable(f"resolving the torch build: {exc}") from None


def _day_after(date: str, days: int = 1) -> str:
    """`YYYYMMDD` of the day after an ISO 8601 date (`days` after it; "" when there is no
    date): the newest nightly day that can hold a commit of that date."""
    try:
        when = datetime.fromisoformat(date.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return (when + timedelta(days=days)).strftime("%Y%m%d")
