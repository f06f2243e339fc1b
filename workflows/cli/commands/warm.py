"""`spyre-ci warm`: the shared warm runner of this state directory.

    spyre-ci warm list      every zygote alive: ready or warming, its pid, memory, idle time,
                            what it serves (the installed torch or a build, a run's change)
    spyre-ci warm stop      stop them all (a later run starts what it needs again)

Zygotes outlive the `spyre-ci` process that started them and end on their own after
`$SPYRE_CI_WARM_IDLE_S` idle seconds (`workflows/runner/warm_share.py`): this is how to see
them, and how to give their memory back at once.
"""

from __future__ import annotations

import argparse
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.runner import warm_share
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    """Add the `warm` command."""
    parser = subparsers.add_parser(
        "warm",
        help="the shared warm processes of this state directory: list or stop them",
        description="Zygotes (processes with torch and the test databases loaded, that fork "
        "each test process) and the warm command line (a spyre-ci process that forks each "
        "`spyre-ci run`) are shared by every spyre-ci process of a state directory and end "
        "after $SPYRE_CI_WARM_IDLE_S idle seconds. `list` shows them; `stop` ends them now.",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="every one alive: pid, memory, idle time, what it serves")
    sub.add_parser("stop", help="stop every one of this state directory now")
    parser.set_defaults(func=cmd_warm)


def cmd_warm(args: argparse.Namespace, settings: Settings) -> int:
    try:
        place = warm_share.place(settings)
    except warm_share.NotShared as exc:
        print(f"no shared zygotes: {exc}")
        return ExitCode.OK
    if place is None:
        print("no shared zygotes: SPYRE_CI_WARM_IDLE_S=0 (each process keeps its own)")
        return ExitCode.OK
    if args.action == "stop":
        count = warm_share.stop_every(place.root)
        print(f"stopped {count} warm process(es) (zygotes, the warm command line) in {place.root}")
        return ExitCode.OK
    alive = warm_share.alive_zygotes(place.root)
    if not alive:
        print(f"no warm process alive in {place.root} (a run starts what it needs)")
    for zygote in alive:
        state = f"pid {zygote.pid}" if zygote.ready else "warming up"
        memory = f"{zygote.rss_mb} MB" if zygote.rss_mb is not None else "? MB"
        change = str(zygote.about.get("change") or "")
        serves = f"a change ({change})" if change else "no change"
        if zygote.about.get("kind") == "cli":
            serves = "spyre-ci run (the warm command line)"
        python = zygote.about.get("python", "?")
        print(
            f"{zygote.folder.name}  {state}, {memory}, idle {zygote.idle_s:.0f} s of "
            f"{place.idle_s:g}: {serves}, {python}"
        )
    return ExitCode.OK
