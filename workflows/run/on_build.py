"""The torch a run is on when it is not the installed one: a build of the configured source
at or before the change's base, with the upstream drift applied (`OnBuild`, resolved by
`workflows.run.base_build`), or a prepared environment of the change's head (`build_for`);
what each side of the A/B imports there, and the Inventory that belongs to it.

Split from `workflows.run.under_test`, which decides what the verdict is about; this module
decides which torch, and never imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.github_errors import GitHubRefused, GitHubUnavailable
from workflows.run import base_build
from workflows.run.run_model import PipelineError, RunRequest
from workflows.runner import torch_builds
from workflows.runner.change_overlay import NO_CHANGE, NO_LAYER, FileEffect, Layer, prepare_layer
from workflows.settings import Settings
from workflows.stores.sources import installed_torch

if TYPE_CHECKING:
    pass


@cache
def torch_git_sha(root: Path | None = None) -> str:
    """The installed torch's git sha (`torch/version.py`), read without importing torch; ""
    when unknown."""
    root = root or installed_torch()[0]
    return torch_builds.read_version(root / "torch" / "version.py")[1] if root else ""


def same_sha(a: str, b: str) -> bool:
    """Two shas name the same commit (one may be abbreviated, 7 characters at least)."""
    a, b = a.strip().lower(), b.strip().lower()
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n]


class OnBuild:
    """A run on a build of the source (`workflows.run.base_build`): the build, its
    site-packages, the drift prepared over it (its overlay: the base side's torch) and the
    layer the change is applied over."""

    def __init__(self, found: base_build.BaseBuild, target: str = "") -> None:
        self.found = found
        self.target = target  # the sha the build and drift make: the change's base, a nightly's
        site = sorted(found.build.path.glob("lib/python3*/site-packages"))
        if not site:
            raise PipelineError(f"{found.build.path}: a torch environment without site-packages")
        self.site_packages = site[0]
        layer = NO_LAYER
        drift = NO_CHANGE
        applied: list[FileEffect] = []
        not_applied: list[FileEffect] = []
        for label, text in found.drift.diffs:
            drift, layer = prepare_layer(
                text,
                self.site_packages,
                source=label,
                strict=False,
                torch_sha=found.build.git_sha,
                under=layer,
            )
            applied += drift.applied
            not_applied += drift.not_applied
        self.layer: Layer = layer
        self.drift = replace(drift, applied=tuple(applied), not_applied=tuple(not_applied))

    def note(self) -> str:
        """`torch V (sha) + upstream drift of N commits (Python, applied ...)`."""
        found, drift = self.found, self.drift
        head = f"torch {found.build.version} ({found.build.git_sha[:12]}, build {found.wheel})"
        to = f"{self.target[:12]}" if self.target else "the change's base"
        if found.relation == "identical":
            return f"{head} is {to}: no upstream drift"
        paths = {f.path for f in drift.applied}
        said = (
            f"{head} + upstream drift of {found.drift.commits} commit(s) to {to} "
            f"(Python, applied: {len(paths)} file(s)"
        )
        if drift.not_applied:
            said += f"; not applied: {listed(drift.not_applied)}"
        if found.drift.paged:
            said += "; read commit by commit, GitHub's compare cut its file list"
        return said + ")"


def build_under_test(request: RunRequest, settings: Settings) -> OnBuild | None:
    """The build of the configured source the request runs on (`SPYRE_CI_BUILD_INDEX`): the
    newest at or before the change's base (a nightly's or periodic run's own sha), the drift
    applied; None when no source is configured, the event has no base, or the installed
    torch is the base already."""
    trigger = request.event
    base = trigger.base_sha or (trigger.head_sha if trigger.kind in SCHEDULED else "")
    if not settings.build_index or not base or not request.apply_change:
        return None
    installed = torch_git_sha()
    if installed and same_sha(installed, base):
        return None
    key = (base, request.event.repo, settings.build_index, settings.env_cache_dir)
    found = _ON_BUILD.get(key)
    if found is None:
        resolved = base_build.resolve(base, request.event.repo, settings, log=_say)
        if resolved is None:
            return None
        found = _ON_BUILD[key] = OnBuild(resolved, base)
    return found


_ON_BUILD: dict[tuple[object, ...], OnBuild] = {}
SCHEDULED = ("nightly", "periodic")  # events at one upstream sha, with no change of their own


def _say(text: str) -> None:
    print(f"spyre-ci: {text}", file=sys.stderr, flush=True)


def inventory_for(
    request: RunRequest, settings: Settings, specs: Sequence[str] = ()
) -> Path | None:
    """The Inventory of the torch the run is on when it is not the installed one: the build
    of the source (`SPYRE_CI_BUILD_INDEX`) or a prepared environment of the change's head,
    built once per build in its environment (without the drift: one Inventory per build, not
    per base; variants a drift adds come with the next build). None for the installed torch,
    or a build of the same torch version (the installed one's cached Inventory is its)."""
    from workflows.stores.inventory_cache import build_env_inventory

    on_build = build_under_test(request, settings)
    build = on_build.found.build if on_build is not None else build_for(request, settings)
    if build is None or build.version == metadata.version("torch"):
        return None
    return build_env_inventory(
        settings.state_dir, build.python, build.version, build.git_sha[:12], specs
    )


def base_identity(request: RunRequest, settings: Settings) -> str:
    """What the A/B's base side applies over the torch under test ("" for nothing): the
    upstream drift's layer on a build of the source. Two runs on one build with different
    drifts test different torches; their base outcomes are kept apart by it."""
    on_build = build_under_test(request, settings)
    if on_build is None:
        return ""
    return f"drift {on_build.layer.id or 'none'}"


def reference_for(request: RunRequest, settings: Settings) -> str:
    """The reference torch of a scheduled run (a nightly, a periodic run) on another torch
    than the installed one (a build of the source, a prepared environment at its sha), as
    the run names it: the installed torch, whose expectations the specs hold and whose
    outcomes History's baseline knows. Its failures run there again: one that fails there
    too is no regression of the build. "" for any other run."""
    if request.event.kind not in SCHEDULED:
        return ""
    if build_under_test(request, settings) is None and build_for(request, settings) is None:
        return ""
    sha = torch_git_sha()
    return f"torch {metadata.version('torch')} ({sha[:12] or 'sha unknown'}, installed)"


@dataclass(frozen=True)
class EarlierTorch:
    """The nearest earlier torch a scheduled run's outcomes are kept for: the build before
    the one under test in upstream's history (GitHub's compare says it is an ancestor)."""

    sha: str
    version: str
    run_id: str
    behind_by: int
    path: Path  # its kept outcomes (`workflows.run.base_outcomes`)

    def describe(self) -> str:
        return (
            f"torch {self.version} ({self.sha[:12]}, its {self.behind_by} commit(s) earlier "
            f"nightly or periodic run {self.run_id})"
        )


MAX_EARLIER = 8  # kept torches asked about, newest first: one compare each


def earlier_torch(
    request: RunRequest,
    settings: Settings,
    sha: str,
    backend: Mapping[str, str],
    *,
    log: Callable[[str], None] = lambda _text: None,
) -> EarlierTorch | None:
    """The nearest earlier build whose own outcomes a scheduled run kept, for a scheduled run
    on the build at `sha` (asked only where `reference_for` names a reference): a torch of
    the state directory's kept ones, with the same backend and CPU, that GitHub's compare
    shows an ancestor of `sha` (`behind`), the fewest commits behind. Its outcomes judge
    this build first: a variant that failed there too is not this build's regression, and
    one that passed there names the window between the two builds. None when no GitHub is
    configured (ancestry is GitHub's to say), or none is kept."""
    from workflows.run.base_outcomes import cpu_identity, kept_torches

    if not sha or (not settings.github_url and not settings.github_token):
        return None
    candidates = []
    for path, about in kept_torches(settings.state_dir):
        own = about.get("own")
        other = str(about.get("sha") or "")
        if not isinstance(own, dict) or not other or same_sha(other, sha):
            continue
        if about.get("backend") != dict(backend) or about.get("cpu") != cpu_identity():
            continue
        candidates.append((path, other, own))
    if not candidates:
        return None
    from relay.github import GitHubAdapter

    github = GitHubAdapter(base_url=settings.github_url, token=settings.github_token)
    repo = request.event.repo or base_build.DEFAULT_REPO
    best: EarlierTorch | None = None
    for path, other, own in candidates[:MAX_EARLIER]:
        try:
            compared = github.comparison(repo, sha, other)
        except (GitHubRefused, GitHubUnavailable) as exc:
            log(f"kept torch {other[:12]} not compared with {sha[:12]}: {exc}")
            continue
        if compared.status != "behind":
            continue
        found = EarlierTorch(
            other,
            str(own.get("version") or "?"),
            str(own.get("run_id") or "?"),
            compared.behind_by,
            path,
        )
        if best is None or found.behind_by < best.behind_by:
            best = found
    return best


def base_side_env(request: RunRequest, settings: Settings) -> dict[str, str]:
    """What makes a test process of the A/B's base side import the base's torch: the drift
    over the build (empty when the run is not on a build of the source)."""
    on_build = build_under_test(request, settings)
    return on_build.drift.env() if on_build is not None else {}


def build_for(request: RunRequest, settings: Settings) -> torch_builds.TorchBuild | None:
    """The prepared torch environment of the change's head sha, when the settings name one
    (`workflows.runner.torch_builds`): the run's tests then run in it, with nothing to apply."""
    head = request.event.head_sha
    if not head or not request.apply_change:
        return None
    return torch_builds.find(head, torch_builds.roots(settings))


def listed(files: Any, limit: int = 8) -> str:
    paths = [f.path for f in files]
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more
