"""`spyre-ci builds`: what fails on each torch the state directory knows, by that torch itself.

    spyre-ci builds list                  every kept torch: sha, drift, backend, CPU, outcomes
    spyre-ci builds expectations SHA --out FILE
                                          the failures of that torch as an expectations file

A nightly or periodic run at a torch's own sha keeps its outcomes as that torch's own, and
every A/B keeps the outcomes it ran on the base torch (`workflows.run.base_outcomes`). They
are what fails on that build before any change is judged; `expectations` writes them in the
format of the specs' `*.expectations.yaml` (one xfail or skip rule per variant, the first
line of its failure as the reason), to review beside the bundled expectations when the
project moves to that torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import state_dir
from workflows.cli.options import absolute_path
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    """Add the `builds` command."""
    parser = subparsers.add_parser(
        "builds",
        help="what fails on each torch build itself, as kept in the state directory",
        description="A nightly or periodic run at a build's own sha, and every A/B's base "
        "side, keep their outcomes as that torch's own. `list` shows every kept torch; "
        "`expectations SHA --out FILE` writes the failures of one as an expectations file.",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="every kept torch: sha, drift, backend, CPU, outcomes")
    write = sub.add_parser(
        "expectations", help="the failures of one kept torch as an expectations file"
    )
    write.add_argument("sha", help="the torch's git sha (7 characters or more)")
    write.add_argument(
        "--out", type=absolute_path, required=True, help="the expectations file to write"
    )
    parser.set_defaults(func=cmd_builds)


def _sha(path: Path, about: dict[str, object]) -> str:
    """The kept torch's sha: as the file says, else its name's (`<sha>-<key>.json`)."""
    return str(about.get("sha") or path.stem.split("-")[0])


def _describe(about: dict[str, object]) -> str:
    found = about.get("backend")
    backend = found if isinstance(found, dict) else {}
    drift = str(about.get("base") or "nothing applied")
    return (
        f"{drift}; backend {backend.get('package', '?')} {backend.get('version', '?')} "
        f"({str(backend.get('digest', ''))[:12] or 'no digest'}); {about.get('cpu', 'CPU unknown')}"
    )


def cmd_builds(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.run.base_outcomes import kept

    found = kept(state_dir(settings))
    if args.action == "list":
        if not found:
            print("no torch kept yet: a nightly run, or a change's A/B, keeps one")
        for path, about, outcomes in found:
            failing = sum(1 for o in outcomes.values() if o.status.is_failure)
            sha = _sha(path, about)
            print(
                f"{sha[:12]}  {len(outcomes)} outcome(s), {failing} failing  ({_describe(about)})"
            )
        return ExitCode.OK
    sha = args.sha.strip().lower()
    if len(sha) < 7:
        raise CommandError(f"builds expectations: {args.sha!r} is too short to name a commit")
    if Path(args.out).is_dir():
        raise CommandError(f"builds expectations: --out {args.out} is a folder; name a file")
    chosen = [f for f in found if _sha(f[0], f[1]).startswith(sha)]
    if not chosen:
        raise CommandError(
            f"builds expectations: no kept outcomes of a torch at {sha[:12]} "
            "(`spyre-ci builds list` shows what is kept)"
        )
    return _write(chosen, Path(args.out))


def _write(chosen: list[tuple[Path, dict[str, object], dict[str, Any]]], out: Path) -> int:
    from suites.record import expectation_entries, write_expectations

    if len(chosen) > 1:
        print(f"{len(chosen)} kept sets of that torch; the newest is written:")
        for path, about, _ in chosen:
            print(f"  {path.name}: {_describe(about)}")
    path, about, outcomes = chosen[0]
    results = {vid: o.to_json() for vid, o in outcomes.items()}
    entries = expectation_entries(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_expectations(entries, out)
    print(
        f"{out}: {len(entries)} rule(s) from {len(outcomes)} outcome(s) of torch "
        f"{_sha(path, about)[:12]} ({_describe(about)})"
    )
    return ExitCode.OK
