"""`spyre-ci serve`: the relay (webhook + CRCR callback service) under gunicorn."""

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
    add_options(parser, "config", "workers", "threads")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds a client has to send the request line and headers (default 10); then 408",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds a client has to send the whole body, or to read the answer (default 30)",
    )
    parser.add_argument(
        "--keepalive",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds an idle keep-alive connection stays open (default 5)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        metavar="N",
        help="open connections per worker (default 1000); past it, 503 without reading",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        help="Flask's single-process development server instead of gunicorn",
    )
    parser.set_defaults(func=checked(run))


def run(args: argparse.Namespace, _settings: Settings) -> int:
    from relay.app import check_config
    from relay.config import load_config

    config = load_config(args.config)
    check_config(config)
    if not config.webhook_secret:
        raise CommandError(
            "no webhook secret: set SPYRE_CI_WEBHOOK_SECRET or webhook_secret in --config "
            "(the secret configured on the GitHub webhook)"
        )
    if args.workers < 1 or args.threads < 1 or args.max_connections < 1:
        raise CommandError("--workers, --threads and --max-connections must be at least 1")
    if min(args.header_timeout, args.body_timeout, args.keepalive) <= 0:
        raise CommandError("--header-timeout, --body-timeout and --keepalive must be positive")
    from relay import server
    from relay.front import FrontSettings

    front = FrontSettings(
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        keepalive=args.keepalive,
        max_connections=args.max_connections,
        max_body_bytes=config.max_body_bytes,
        threads=args.threads,
    )

    if args.dev:
        server.serve_dev(config, args.host, args.port)
    else:
        server.serve(config, args.host, args.port, args.workers, args.log_level, front)
    return ExitCode.OK
