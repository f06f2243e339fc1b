"""`spyre-ci pending`: changes deferred to a build, and their judgement once one exists.

    spyre-ci pending list            what waits, on which build it was first run
    spyre-ci pending check           for each: the first build of SPYRE_CI_BUILD_INDEX that
                                     contains it; when there is one, its variants run there
                                     against the last build without it (an A/B of two builds)

A change that needs a build (C++, CUDA, codegen) cannot be tested on the build of its base;
its run records it (`workflows.stores.pending`) and concludes neutral. `check` (after a
nightly, from cron, or a worker's periodic check) judges it on the first build that holds
it: a new failure there is attributed to the window between the two builds, which
`spyre-ci bisect --run RUN_ID` narrows over its Python commits.

`check`'s exit code, over every change it looked at (`check_code`): 1 when a deferred change
newly fails on the first build that holds it, else 130 when a deferred run was interrupted,
3 when a build or a deferred run's tests could not run, 2 for input a deferred run refused,
4 when a deferred run came back without a verdict on its change, else 0. A change no build
holds yet waits, as it should: it leaves the code at 0 (the output counts them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import check_out_dir, state_dir
from workflows.cli.options import absolute_path
from workflows.errors import CommandError
from workflows.settings import Settings, child_environment


def register(subparsers: Any) -> None:
    """Add the `pending` command."""
    parser = subparsers.add_parser(
        "pending",
        help="changes that need a build, deferred to the first build that holds them",
        description="A change that needs a build of torch (C++, CUDA, codegen) cannot be "
        "tested on the build of its base (SPYRE_CI_BUILD_INDEX): its run records it here and "
        "concludes neutral. `check` finds the first build that holds each one, provisions it "
        "and runs the change's selected variants there against the last build without it; "
        "exit 1 when that run finds new failures, 3 when a build or the tests could not run, "
        "4 when a deferred run gives no verdict; changes still waiting for a build leave it 0.",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="the deferred changes and their state")
    check = sub.add_parser(
        "check",
        help="judge each deferred change on the first build of SPYRE_CI_BUILD_INDEX that holds it",
    )
    check.add_argument(
        "--out-root",
        type=absolute_path,
        default=None,
        help="where the deferred runs' out folders go (default: STATE_DIR/pending/runs)",
    )
    parser.set_defaults(func=cmd_pending)


def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.stores import pending

    if args.action == "list":
        found = pending.entries(state_dir(settings))
        if not found:
            print("no deferred changes")
        for entry in found:
            build = str(entry.ran.get("build", ""))[:12]
            said = (
                f"judged by run {entry.ran.get('run_id', '?')} on {build}"
                f" (exit {entry.ran.get('exit_code')})"
                if entry.state == "ran"
                else f"waiting for a build that holds it (first run on {entry.base_build[:12]})"
            )
            print(f"{entry.head[:12]}  {', '.join(entry.files[:3])}  {said}")
        return ExitCode.OK
    from workflows.runner.build_source import locked

    # One check at a time per state directory: two (a nightly's and a periodic run's, a
    # finish delivered twice) would judge the same deferred change twice.
    with locked(pending.folder(state_dir(settings)) / ".check.lock"):
        return _check(args, settings)


def _check(args: argparse.Namespace, settings: Settings) -> int:
    from relay.github import GitHubAdapter
    from workflows.run import base_build
    from workflows.runner.build_source import BuildSource
    from workflows.stores import pending

    if not settings.build_index:
        raise CommandError(
            "SPYRE_CI_BUILD_INDEX is not set: there is no source of builds to look in"
        )
    assert settings.env_cache_dir is not None
    state = state_dir(settings)
    out_root = args.out_root or pending.folder(state) / "runs"
    check_out_dir(out_root, "--out-root")  # refused before any build is looked for
    github = GitHubAdapter(base_url=settings.github_url, token=settings.github_token)
    source = BuildSource(settings.build_index, settings.env_cache_dir / "downloads")
    codes: list[ExitCode] = []
    waiting = 0
    for entry in pending.open_entries(state):
        chosen = base_build.first_containing(entry.head, entry.repo, source, github)
        if chosen is None:
            waiting += 1
            print(f"{entry.head[:12]}: no build of {source} holds it yet; still pending")
            continue
        build = base_build.provision_chosen(chosen, settings, _say)
        event = _deferred_event(entry, build.git_sha, out_root)
        out = out_root / f"{entry.head[:12]}-{build.git_sha[:12]}"
        print(
            f"{entry.head[:12]}: first in {chosen.candidate.name} ({build.git_sha[:12]}); "
            f"its {len(entry.selected)} selected variant(s) against {entry.base_build[:12]}",
            flush=True,
        )
        done = subprocess.run(
            [sys.executable, "-m", "workflows", "run", "--event", str(event), "--out", str(out)],
            env=child_environment(),
            check=False,
        )
        code = deferred_code(done.returncode)
        codes.append(code)
        if code not in VERDICTS:
            print(f"{entry.head[:12]}: the deferred run exited {done.returncode}; still pending")
            continue
        run_id = _run_id(out)
        _report_for_original(out, entry)
        pending.mark(
            state,
            entry,
            {
                "run_id": run_id,
                "exit_code": done.returncode,
                "build": build.git_sha,
                "build_version": build.version,
                "window": [entry.base_build, build.git_sha],
                "out": str(out),
            },
        )
    print(f"{waiting} change(s) still waiting for a build")
    return check_code(codes)


# A deferred run's exit codes that judge its change: the change is marked as ran with it.
# Any other leaves it pending, for the next check to try again.
VERDICTS = frozenset({ExitCode.OK, ExitCode.NEW_FAILURES, ExitCode.NOT_TESTED})
# `check`'s code over several changes: the first of these that one of them gave. A new
# failure is the finding to act on, whatever else happened to the other changes.
PRECEDENCE = (
    ExitCode.NEW_FAILURES,
    ExitCode.INTERRUPTED,
    ExitCode.INFRASTRUCTURE,
    ExitCode.BAD_INPUT,
    ExitCode.NOT_TESTED,
    ExitCode.OK,
)


def deferred_code(returncode: int) -> ExitCode:
    """A deferred `spyre-ci run`'s exit status as a code of the scheme; a process that ended
    outside it (killed by a signal, a code no run gives) could not run: 3."""
    try:
        code = ExitCode(returncode)
    except ValueError:
        return ExitCode.INFRASTRUCTURE
    return code if code in PRECEDENCE else ExitCode.INFRASTRUCTURE


def check_code(codes: list[ExitCode]) -> ExitCode:
    """`pending check`'s exit code from its deferred runs' codes (0 when it ran none)."""
    return min(codes, key=PRECEDENCE.index, default=ExitCode.OK)


def _deferred_event(entry: Any, build_sha: str, folder: Path) -> Path:
    """A push of `last build without it...first build with it` carrying the change's own diff
    (what the Scout selects by; nothing of it is applied: the build holds it)."""
    folder.mkdir(parents=True, exist_ok=True)
    commit = {
        "id": build_sha,
        "message": f"deferred: {entry.head[:12]} {entry.message}".strip(),
        "added": [],
        "removed": [],
        "modified": list(entry.files),
    }
    payload = {
        "ref": "refs/heads/main",
        "before": entry.base_build,
        "after": build_sha,
        "repository": {"full_name": entry.repo},
        "commits": [commit],
        "head_commit": commit,
        "spyre_ci_deferred": {"head": entry.head, "base": entry.base, "run_id": entry.run_id},
    }
    path = folder / f"{entry.head[:12]}-{build_sha[:12]}.json"
    path.write_text(
        json.dumps(
            {"event": "push", "delivery_id": f"{entry.delivery_id}:deferred", "payload": payload}
        )
        + "\n",
        encoding="utf-8",
    )
    if entry.diff_text:
        path.with_suffix(".patch").write_text(entry.diff_text, encoding="utf-8")
    return path


def _report_for_original(out: Path, entry: Any) -> None:
    """The deferred run's callback and HUD row as the relay and HUD take a later result of
    the original delivery: its `delivery_id`, event and payload, its run id with the next
    `run_attempt` (a new state-machine key for the relay, a new row for HUD: their keys hold
    the attempt and the check run id), the deferred run named in `spyre_run_id`. The run's
    own identity stays in `callback.run.json`."""
    callback_path = out / "callback.json"
    try:
        callback = json.loads(callback_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    callback_path.with_name("callback.run.json").write_text(
        json.dumps(callback, indent=1) + "\n", encoding="utf-8"
    )
    attempt = 2
    workflow = dict(callback.get("workflow") or {})
    deferred_run = workflow.get("run_id", "")
    workflow.update(
        run_id=entry.run_id,
        run_attempt=str(attempt),
        check_run_id=f"{entry.run_id}-{attempt}",
        spyre_run_id=deferred_run,
    )
    body = {
        "event_type": entry.event_type,
        "delivery_id": entry.delivery_id,
        "payload": dict(entry.payload) or callback.get("payload", {}),
        "workflow": workflow,
    }
    callback_path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    envelope_path = out / "hud" / "envelope.json"
    row_path = out / "hud" / "crcr_workflow_job.json"
    try:
        envelope = json.loads(envelope_path.read_text(encoding="utf-8"))
        row = json.loads(row_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    envelope.setdefault("untrusted", {})["callback_payload"] = body
    envelope_path.write_text(json.dumps(envelope) + "\n", encoding="utf-8")
    from dashboard_export.hud_row import hud_record

    row.update(hud_record(envelope))  # the row HUD makes of the envelope it is sent
    row_path.write_text(json.dumps(row) + "\n", encoding="utf-8")


def _run_id(out: Path) -> str:
    try:
        return str(json.loads((out / "run.json").read_text(encoding="utf-8"))["run_id"])
    except (OSError, ValueError, KeyError):
        return ""


def _say(text: str) -> None:
    print(f"spyre-ci: {text}", file=sys.stderr, flush=True)
