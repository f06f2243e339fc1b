"""`spyre-ci serve`: the relay (webhook + CRCR callback service) under gunicorn."""

from __future__ import annotations

import argparse
from typing import Any

from workflows.change_input import absolute_path, checked
from workflows.cli import CommandError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the relay: GitHub webhook, CRCR callback, /healthz, /metrics",
        description=(
            "Serve POST /github/webhook, POST /github/callback, GET /healthz and GET /metrics. "
            "Configured by --config FILE (YAML) and SPYRE_CI_* environment variables "
            "(SPYRE_CI_WEBHOOK_SECRET, SPYRE_CI_REDIS_URL, ...); see docs/relay.md."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    parser.add_argument("--config", type=absolute_path, metavar="FILE", help="relay config YAML")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker (gthread)")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="Flask's single-process development server instead of gunicorn",
    )
    parser.set_defaults(func=checked(run))


def run(args: argparse.Namespace) -> int:
    from relay.app import check_config
    from relay.config import load_config
    from relay.events import RelayError

    try:
        config = load_config(args.config)
        check_config(config)
    except RelayError as exc:
        raise CommandError(str(exc)) from None
    if not config.webhook_secret:
        raise CommandError(
            "no webhook secret: set SPYRE_CI_WEBHOOK_SECRET or webhook_secret in --config "
            "(the secret configured on the GitHub webhook)"
        )
    if args.workers < 1 or args.threads < 1:
        raise CommandError("--workers and --threads must be at least 1")
    from relay import server

    try:
        if args.dev:
            server.serve_dev(config, args.host, args.port)
        else:
            server.serve(config, args.host, args.port, args.workers, args.threads, args.log_level)
    except RelayError as exc:
        raise CommandError(str(exc)) from None
    return 0
