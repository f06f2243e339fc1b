"""The A/B base of a run's failures: what they do on the torch without the change.

For a run that applied a change, the base torch (`on_build.base_identity`); for a scheduled
run on a build, the nearest earlier build's kept outcomes first, then the reference torch
(the installed one, as it is). Every outcome run here is kept per torch sha and variant
fingerprint (`BaseOutcomeCache`) and read back instead of run again; a scheduled run's own
outcomes are kept as its torch's (`keep_own_outcomes`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from contracts.tested import Tested
from suites.model import Inventory, Outcome, Status
from workflows.run import on_build
from workflows.run.base_outcomes import BaseOutcomeCache
from workflows.run.context import RunContext
from workflows.run.layout import BASE_SHARD
from workflows.run.pipeline import load_inventory
from workflows.run.run_model import FinishedRun, PlannedRun


def base_outcomes(
    planned: PlannedRun,
    inventory: Inventory,
    ids: Sequence[str],
    run_more: Callable[[str, Sequence[str]], list[Outcome]],
    ctx: RunContext,
    read: dict[str, str],
) -> dict[str, Outcome]:
    """`ids` on the base torch (the run's change not applied): from the cache of this torch's
    base outcomes by variant fingerprint, the rest run now (`BASE_SHARD`) and cached."""

    environment = planned.environment
    sha = environment.torch.git_sha if environment else ""
    cache = BaseOutcomeCache.for_torch(
        sha,
        ctx.settings.state_dir,
        base=on_build.base_identity(planned.request, ctx.settings),
        backend=dict(environment.backend) if environment else None,
    )
    return cached_or_run(cache, inventory, ids, lambda m: run_more(BASE_SHARD, m), planned, read)


def cached_or_run(
    cache: BaseOutcomeCache,
    inventory: Inventory,
    ids: Sequence[str],
    run: Callable[[Sequence[str]], list[Outcome]],
    planned: PlannedRun,
    read: dict[str, str],
) -> dict[str, Outcome]:
    """`ids` from `cache` (each one read is named in `read`, with the run that ran it), the
    rest run now by `run` and kept. An entry that fails its digest is said and run again."""
    fingerprints = {v.id: v.fingerprint for v in inventory.variants}
    kept = cache.read(ids, fingerprints)
    if cache.refused:
        print(
            f"spyre-ci: {len(cache.refused)} kept base outcome(s) in {cache.path} do not match "
            f"their digest (edited or cut): run again ({', '.join(cache.refused[:3])})",
            file=sys.stderr,
        )
    found = {vid: entry.outcome for vid, entry in kept.items()}
    read.update({vid: entry.run_id or "an earlier run" for vid, entry in kept.items()})
    missing = [vid for vid in ids if vid not in found]
    if missing:
        ran = {o.id: o for o in run(missing) if o.status is not Status.REMOVED}
        cache.put(ran.values(), fingerprints, planned.request.run_id)
        found.update(ran)
    return found


def reference_outcomes(
    planned: PlannedRun,
    inventory: Inventory,
    ids: Sequence[str],
    run: Callable[[Sequence[str]], list[Outcome]],
    ctx: RunContext,
    read: dict[str, str],
) -> dict[str, Outcome]:
    """`ids` on the reference torch of a scheduled run on a build (the installed torch, as it
    is): from its cache, the rest run now (`REFERENCE_SHARD`) and cached. A variant the
    reference does not have (new on the build) is left out: there is nothing to compare."""

    environment = planned.environment
    cache = BaseOutcomeCache.for_torch(
        on_build.torch_git_sha(),
        ctx.settings.state_dir,
        base="reference",
        backend=dict(environment.backend) if environment else None,
    )
    return cached_or_run(cache, inventory, ids, run, planned, read)


def earlier_torch(planned: PlannedRun, ctx: RunContext) -> on_build.EarlierTorch | None:
    """The nearest earlier build with a scheduled run's own outcomes kept, said on stderr."""
    environment = planned.environment
    if environment is None:
        return None
    found = on_build.earlier_torch(
        planned.request,
        ctx.settings,
        environment.torch.git_sha,
        dict(environment.backend),
        log=lambda text: print(f"spyre-ci: {text}", file=sys.stderr),
    )
    if found is not None:
        print(f"spyre-ci: judged first against {found.describe()}", file=sys.stderr)
    return found


def earlier_outcomes(
    earlier: on_build.EarlierTorch,
    inventory: Inventory,
    ids: Sequence[str],
    read: dict[str, str],
) -> dict[str, Outcome]:
    """What `ids` did on the nearest earlier build, as its scheduled run kept them (each
    named in `read` with that run): never run again here."""
    cache = BaseOutcomeCache(earlier.path)
    fingerprints = {v.id: v.fingerprint for v in inventory.variants}
    kept = cache.read(ids, fingerprints)
    read.update({vid: entry.run_id or earlier.run_id for vid, entry in kept.items()})
    return {vid: entry.outcome for vid, entry in kept.items()}


def keep_own_outcomes(planned: PlannedRun, finished: FinishedRun, ctx: RunContext) -> None:
    """A completed run that applied nothing at its torch's own sha (a nightly or periodic
    run) has outcomes that are that torch's own: they are kept as its base outcomes, what
    fails on that torch itself. A later change's A/B on the same torch reads them instead of
    running them again."""

    environment = planned.environment
    request = planned.request
    if (
        environment is None
        or environment.change.applied
        or request.event.kind not in on_build.SCHEDULED
        or environment.tested is not Tested.TESTED
    ):
        return
    cache = BaseOutcomeCache.for_torch(
        environment.torch.git_sha,
        ctx.settings.state_dir,
        base=on_build.base_identity(request, ctx.settings),
        backend=dict(environment.backend),
        own={"run_id": request.run_id, "version": environment.torch.version},
    )
    inventory = load_inventory(request.inventory)
    cache.put(
        finished.outcomes.values(),
        {v.id: v.fingerprint for v in inventory.variants},
        request.run_id,
    )
