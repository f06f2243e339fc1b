"""The environment under test of a run: which torch, the change applied on top of it, the
backend, and what that makes of the verdict.

A verdict is only worth what it tested. `resolve` is called once, when a run is planned; its
answer goes into `planned.json` and from there into `run.json`, the terminal summary, the
report, the callback and the HUD row:

    tested      the torch under test is the change's (its sha is the change's head, or its
                base with every file that changes torch applied), or a bare diff applied whole
    partial     some of the change could not be applied without a build, or it was applied
                on a torch that is not its base
    not_tested  nothing of what the change does to torch could be applied, or the torch under
                test is not the one the event names (a nightly on another build)

A change to upstream's test files that a file suite reuses (`${TORCH_ROOT}/test/...`) is
applied to them, on the changed side only (`change_overlay.UpstreamTests`); its edits are
tested only by the variants of those files: a plan that runs none of them (`reached`, at plan
time) or a run where none of them ran (`reached(..., ran=True)`, at finish) is not `tested`.
A test file no suite reuses has no effect, and the notes say so.

A run that is not `tested` and has no new failure concludes `neutral`, never `success`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import overload

from contracts.change import ChangeState
from contracts.tested import Tested
from suites.model import Outcome, Status
from workflows.run.backend_identity import backend
from workflows.run.on_build import (
    SCHEDULED,
    OnBuild,
    build_for,
    build_under_test,
    listed,
    same_sha,
    torch_git_sha,
)
from workflows.run.run_model import (
    ChangeUnderTest,
    EnvironmentUnderTest,
    PipelineError,
    RunRequest,
    TorchUnderTest,
)
from workflows.runner import torch_builds
from workflows.runner.change_overlay import (
    NO_CHANGE,
    NO_LAYER,
    AppliedChange,
    ChangeError,
    FileEffect,
    UpstreamTests,
    beside_reused,
    file_kind,
    prepare,
    upstream_test_file,
)
from workflows.runner.change_overlay.prepare import WHY_NO_TREE, WHY_UNUSED_TEST
from workflows.runner.change_overlay.prepare import WHY_OUTSIDE as _WHY_OUTSIDE
from workflows.settings import Settings
from workflows.stores.sources import installed_torch, reused_tests, tests_root


class ChangeNotApplicable(PipelineError):
    """The change given cannot be applied (a hunk, a file): bad input, exit code 2."""


def applied_change(
    request: RunRequest, settings: Settings, *, cache_dir: Path | None = None
) -> AppliedChange:
    """The request's change over this machine's torch (prepared once per machine: the
    overlay folder is keyed by the change and the torch; once per process: every shard,
    rerun and base run of a run asks for it); nothing to apply when a prepared environment
    the settings name has the change's head (`build_for`). ChangeNotApplicable when a diff
    the user gave does not apply."""
    trigger = request.event
    builds = torch_builds.roots(settings)
    tests = upstream_tests(request)
    # Overlays live in the state directory (kept while used, pruned when not: `prepare`).
    cache_dir = cache_dir or settings.state_dir / "changes"
    key = (
        tests,
        request.diff_text,
        request.diff_source,
        request.change_strict,
        request.apply_change,
        trigger.head_sha,
        trigger.files,
        builds,
        cache_dir,
        settings.build_index,
    )
    found = _PREPARED.get(key)
    if found is None:
        found = _PREPARED[key] = _applied_change(request, settings, builds, cache_dir, tests)
    return found


_PREPARED: dict[tuple[object, ...], AppliedChange] = {}


def upstream_tests(request: RunRequest) -> UpstreamTests:
    """The checkout of upstream's tests the request's file suites import (`${TORCH_ROOT}`
    as its test processes see it) and the files of it they reuse."""
    root = tests_root()
    return UpstreamTests(
        root, reused_tests(request.specs, root) if root is not None else frozenset()
    )


def _applied_change(
    request: RunRequest,
    settings: Settings,
    builds: tuple[Path, ...],
    cache_dir: Path | None,
    tests: UpstreamTests,
) -> AppliedChange:
    if not request.apply_change:
        return not_applied(request, tests)
    root, _version = installed_torch()
    if root is None:
        raise PipelineError("torch is not installed here: no torch to apply the change to")
    sha = torch_git_sha(root)
    head = request.event.head_sha
    if head and sha and same_sha(sha, head):
        return NO_CHANGE  # the installed torch is the change's head: it holds the change
    if head and torch_builds.find(head, builds) is not None:
        return NO_CHANGE  # a prepared environment has the change's head: it holds the change
    layer = NO_LAYER
    on_build = build_under_test(request, settings)
    if on_build is not None:
        root, sha = on_build.site_packages, on_build.found.build.git_sha
        layer = on_build.layer
    if not request.diff_text:
        return with_unpatched_files(_drift_only(on_build), request, tests)
    try:
        change = prepare(
            request.diff_text,
            root,
            source=request.diff_source or "the change's diff",
            strict=request.change_strict,
            torch_sha=sha,
            cache_dir=cache_dir,
            under=layer,
            tests=tests,
        )
    except ChangeError as exc:
        raise ChangeNotApplicable(str(exc)) from None
    return with_unpatched_files(change, request, tests)


def _drift_only(on_build: OnBuild | None) -> AppliedChange:
    """Nothing of the change, but the drift's overlay when there is one (both sides run on
    the base)."""
    if on_build is None or not on_build.drift.folder:
        return NO_CHANGE
    return AppliedChange(on_build.drift.id, folder=on_build.drift.folder)


def needs_build(change: AppliedChange) -> tuple[FileEffect, ...]:
    """The change's files that only a build of torch brings (C++, CUDA, codegen inputs)."""
    return tuple(f for f in change.not_applied if file_kind(f.path) == "build")


def deferred(request: RunRequest, change: AppliedChange, settings: Settings) -> bool:
    """Whether what of the change needs a build waits for the first build that contains it
    (`workflows.stores.pending`): a run on a build of the source whose change has such files
    and a head to find in a later build."""
    return bool(
        request.event.head_sha
        and needs_build(change)
        and build_under_test(request, settings) is not None
    )


def not_applied(request: RunRequest, tests: UpstreamTests | None = None) -> AppliedChange:
    """The change as a run that was asked not to apply it (`--no-apply`) has it: every file
    that changes torch, or a test a suite reuses (`tests`, default the request's), named as
    not applied, so the verdict says the change was not tested."""
    from selector import SelectorError
    from selector.diff import parse_unified_diff

    why = "not applied: the run was asked to test the torch as installed (--no-apply)"
    files: list[FileEffect] = []
    if request.diff_text:
        try:
            parsed = parse_unified_diff(request.diff_text, request.diff_source or "<diff>")
        except SelectorError:
            parsed = None
        for patch in parsed.files if parsed else ():
            files.append(
                FileEffect(patch.path, patch.status, why, previous_path=patch.previous_path)
            )
    tests = upstream_tests(request) if tests is None else tests
    applies: list[FileEffect] = []
    outside: list[FileEffect] = []
    for f in files:
        why_none = _no_effect(f.path, f.previous_path, tests)
        if why_none is None:
            applies.append(f)
        else:
            outside.append(replace(f, why=why_none))
    return with_unpatched_files(
        replace(NO_CHANGE, not_applied=tuple(applies), no_effect=tuple(outside)), request, tests
    )


def _no_effect(path: str, previous: str | None, tests: UpstreamTests) -> str | None:
    """Why a changed file has no effect on what runs here, or None when it has one (it
    changes torch, or is an upstream test file a suite reuses)."""
    paths = [path, *([previous] if previous else [])]
    if all(upstream_test_file(p) for p in paths):
        if tests.root is None:
            return WHY_NO_TREE
        if tests.reused.intersection(paths):
            return None
        # A helper beside a reused test file has an effect (not applied: not tested).
        beside = any(beside_reused(p, tests.root, tests.reused) for p in paths)
        return None if beside else WHY_UNUSED_TEST
    return _WHY_OUTSIDE if all(file_kind(p) == "outside" for p in paths) else None


def with_unpatched_files(
    change: AppliedChange, request: RunRequest, tests: UpstreamTests | None = None
) -> AppliedChange:
    """`change` with the event's changed files that its diff does not hold (GitHub sent no
    patch: binary, very large, a cut compare; or no diff at all): each is named as not
    applied when it changes torch or is a test a suite reuses (`tests`, default the
    request's), else as having no effect."""
    seen = {f.path for f in (*change.applied, *change.not_applied, *change.no_effect)}
    missing = [f for f in request.event.files if f.path not in seen]
    if not missing:
        return change
    tests = upstream_tests(request) if tests is None else tests
    not_applied, no_effect = list(change.not_applied), list(change.no_effect)
    for changed in missing:
        kind = file_kind(changed.path)
        why_none = _no_effect(changed.path, changed.previous_path, tests)
        if why_none is not None:
            no_effect.append(FileEffect(changed.path, changed.status, why_none))
        else:
            why = "no diff of this file was available to apply" + (
                " (and it needs a build)" if kind == "build" else ""
            )
            not_applied.append(FileEffect(changed.path, changed.status, why))
    return replace(change, not_applied=tuple(not_applied), no_effect=tuple(no_effect))


def interpreter(request: RunRequest, changed: bool, settings: Settings) -> str | None:
    """The interpreter of a shard's test processes: on the changed side a prepared
    environment that has the change's head; on both sides the build of the source the run
    is on (`build_under_test`); else this one (None)."""
    if changed:
        head_build = build_for(request, settings)
        if head_build is not None:
            return head_build.python
    on_build = build_under_test(request, settings)
    return on_build.found.build.python if on_build is not None else None


def resolve(request: RunRequest, change: AppliedChange, settings: Settings) -> EnvironmentUnderTest:
    """The environment under test of `request` with `change` prepared (planned.json's, then
    run.json's): torch, change, backend, and `tested` with the notes that decided it. The
    prepared environments looked up are those of `settings`."""
    root, version = installed_torch()
    sha = torch_git_sha(root) if root is not None else ""
    source = f"installed ({root})" if root is not None else "not installed"
    trigger = request.event
    head, base = trigger.head_sha, trigger.base_sha or ""
    notes: list[str] = []
    tested = Tested.TESTED
    build = None if head and sha and same_sha(sha, head) else build_for(request, settings)
    on_build = None if build is not None else build_under_test(request, settings)
    if build is not None:
        version, sha = build.version, build.git_sha
        source = f"prepared environment ({build.path})"
    elif on_build is not None:
        version, sha = on_build.found.build.version, on_build.found.build.git_sha
        source = f"build {on_build.found.wheel} ({on_build.found.build.path})"
        notes.append(on_build.note())
        notes.extend(f"build skipped: {n}" for n in on_build.found.notes[:5])
    if head and sha and same_sha(sha, head):
        where = "a prepared environment" if build is not None else "the installed torch"
        notes.append(f"{where} is the change's head ({head[:12]}): nothing to apply")
    else:
        state = change.state
        affects = [f.path for f in (*change.applied, *change.not_applied)]
        tests = any(upstream_test_file(f.path) for f in change.not_applied)
        what = "that change torch" + (" or the upstream tests it runs" if tests else "")
        if state == ChangeState.NOT_APPLIED and not request.apply_change:
            tested = Tested.NOT_TESTED
            notes.append(
                f"the run was asked not to apply the change (--no-apply): its "
                f"{len(change.not_applied)} file(s) {what} were not tested"
            )
        elif state == ChangeState.NOT_APPLIED:
            tested = Tested.NOT_TESTED
            notes.append(
                f"none of the {len(change.not_applied)} file(s) {what} could be "
                f"applied{'' if tests else ' without a build'}: {listed(change.not_applied)}"
            )
        elif state == ChangeState.PARTIAL:
            tested = Tested.PARTIAL
            notes.append(
                f"{len(change.not_applied)} of {len(affects)} file(s) {what} not "
                f"applied: {listed(change.not_applied)}"
            )
        if head and not base and on_build is None and not (sha and same_sha(sha, head)):
            tested = Tested.NOT_TESTED
            notes.append(
                f"the tests ran on torch {sha[:12] or version}, not on {head[:12]}, the "
                "commit this event names (no base to apply a change to)"
            )
        elif on_build is not None and on_build.drift.not_applied:
            tested = Tested.PARTIAL if tested is Tested.TESTED else tested
            notes.append(
                f"the upstream drift from {sha[:12]} to the change's base needs a build for "
                f"{len(on_build.drift.not_applied)} file(s): {listed(on_build.drift.not_applied)}"
            )
        elif on_build is None and base and not (sha and same_sha(sha, base)):
            tested = Tested.PARTIAL if tested is Tested.TESTED else tested
            notes.append(
                f"the tests ran on torch {sha[:12] or version} ({version}), not on the "
                f"change's base {base[:12]}"
            )
    # A nightly or periodic run has no change of its own: the torch under test is its sha
    # (a build and the drift to it, or an environment at that sha) or it is not.
    at_one_sha = trigger.kind in SCHEDULED and (
        on_build is not None or bool(head and sha and same_sha(sha, head))
    )
    if head and not request.diff_text and not trigger.files_complete and not at_one_sha:
        tested = Tested.NOT_TESTED
        notes.append("neither a diff nor the list of the change's files is known")
    elif trigger.truncated and tested is Tested.TESTED:
        tested = Tested.PARTIAL
        notes.append("GitHub's list of the change's files is cut (300 files at most)")
    unused = _unused_tests(change.no_effect)
    if unused:
        notes.append(
            f"no effect here: {listed(unused)}: upstream test file(s) no file suite reuses"
            + (" (TORCH_ROOT is unset)" if unused[0].why == WHY_NO_TREE else "")
        )
    if change.broken:
        notes.append("the changed code does not import: " + "; ".join(change.broken[:5]))
    if on_build is not None and head and needs_build(change):
        notes.append(
            f"deferred: {len(needs_build(change))} file(s) that need a build "
            f"({listed(needs_build(change), 3)}) are tested on the first build that contains "
            f"{head[:12]} (`spyre-ci pending check`)"
            + ("; nothing runs now" if change.state == ChangeState.NOT_APPLIED else "")
        )
    return EnvironmentUnderTest(
        TorchUnderTest(version or "unknown", sha or "unknown", source),
        ChangeUnderTest.of(
            change,
            request.diff_source or ("the event's diff" if request.diff_text else ""),
            base,
            head,
        ),
        backend(),
        tested,
        tested.headline,
        tuple(notes),
    )


# The test infrastructure of the installed torch: every variant imports it, so any variant
# that runs tests an edit to it.
TEST_INFRASTRUCTURE = "torch/testing/_internal/"
_NOT_RUN = "edited tests not run"  # the notes `reached` adds start so


@overload
def reached(
    environment: EnvironmentUnderTest, ids: Iterable[str], *, ran: bool = False
) -> EnvironmentUnderTest: ...


@overload
def reached(environment: None, ids: Iterable[str], *, ran: bool = False) -> None: ...


def reached(
    environment: EnvironmentUnderTest | None, ids: Iterable[str], *, ran: bool = False
) -> EnvironmentUnderTest | None:
    """`environment` as the variants `ids` leave it: the plan's (what its shards run) or,
    `ran`, those that ran (`ran_ids`). An edited upstream test file a suite reuses is tested
    only by its own variants (`<suite>::<file stem>::...`), an edited module of
    `torch/testing/_internal/` by any variant: a change whose every applied file is left
    untested is `not_tested`, one with other files `partial`, each with a note naming them.
    None (a run planned before its environment was recorded) stays None."""
    if environment is None or environment.tested is Tested.NOT_TESTED:
        return environment
    change = environment.change
    ids = list(ids)
    said = " ".join(n for n in environment.notes if n.startswith(_NOT_RUN))
    unused = _unused_tests(change.no_effect)
    if unused and not change.applied and not ids and not said:
        # Nothing of the change runs here: no verdict on it, whatever else it holds.
        note = f"{_NOT_RUN}: nothing of the change reaches a test that runs here"
        return replace(
            environment,
            tested=Tested.NOT_TESTED,
            headline=Tested.NOT_TESTED.headline,
            notes=(*environment.notes, note),
        )
    stems = {vid.split("::")[1] for vid in ids if vid.count("::") >= 2}
    missing = [
        f
        for f in change.applied
        if f.path not in said
        and (
            (f.tree and not stems & {PurePosixPath(p).stem for p in (f.path, f.previous_path) if p})
            or (f.path.startswith(TEST_INFRASTRUCTURE) and not ids)
        )
    ]
    if not missing:
        return environment
    how = (
        "none of the variants that test them ran (skipped or removed)"
        if ran
        else "the plan runs none of the variants that test them"
    )
    note = f"{_NOT_RUN}: {listed(missing)}: {how}"
    others = [f for f in change.applied if f not in missing]
    tested = environment.tested if others else Tested.NOT_TESTED
    tested = Tested.PARTIAL if tested is Tested.TESTED else tested
    headline = tested.headline if tested is not None else environment.headline
    return replace(environment, tested=tested, headline=headline, notes=(*environment.notes, note))


def _unused_tests(files: Iterable[FileEffect]) -> list[FileEffect]:
    """The upstream test files among `files` that no file suite reuses."""
    return [f for f in files if f.why in (WHY_UNUSED_TEST, WHY_NO_TREE)]


def ran_ids(outcomes: Iterable[Outcome]) -> list[str]:
    """The ids of `outcomes` whose test ran: neither skipped nor removed."""
    return [o.id for o in outcomes if o.status not in (Status.SKIPPED, Status.REMOVED)]
