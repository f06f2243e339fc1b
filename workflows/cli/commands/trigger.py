"""`spyre-ci trigger nightly|periodic --sha SHA`: enqueue a scheduled run like a delivery."""

from __future__ import annotations

import argparse
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import checked
from workflows.cli.options import add_options
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "trigger",
        help="enqueue a nightly or periodic run at an upstream sha",
        description=(
            "Put a nightly/periodic TriggerEvent on the relay's intake queue, deduplicated like "
            "a webhook delivery (one run per kind and sha). Redis comes from --config or "
            "SPYRE_CI_REDIS_URL."
        ),
    )
    parser.add_argument("kind", choices=["nightly", "periodic"])
    parser.add_argument("--sha", required=True, help="upstream commit to test (40 hex digits)")
    add_options(parser, "config")
    parser.set_defaults(func=checked(run))


def run(args: argparse.Namespace, _settings: Settings) -> int:
    import re

    from relay.config import load_config
    from relay.events import RelayError, scheduled
    from relay.intake import RedisIntake

    if not re.fullmatch(r"[0-9a-f]{40}", args.sha):
        raise CommandError(f"--sha must be a full 40-hex-digit commit sha, not {args.sha!r}")
    config = load_config(args.config)
    event = scheduled(args.kind, args.sha, config.upstream_repo)
    try:
        fresh = RedisIntake.from_url(config.redis_url).accept(f"{args.kind}:{args.sha}", event)
    except RelayError as exc:
        where = config.redis_url.rsplit("@", 1)[-1]  # never print a password
        raise CommandError(f"{exc}; is Redis at {where} running?") from None
    if fresh:
        print(f"enqueued {args.kind} run of {config.upstream_repo}@{args.sha}")
    else:
        print(f"{args.kind} run of {config.upstream_repo}@{args.sha} was already enqueued")
    return ExitCode.OK
