"""`spyre-ci worker`: a Celery worker on Redis that runs plans, shards and finishes."""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from typing import Any

from workflows.change_input import absolute_path, checked
from workflows.cli import CommandError
from workflows.options import add_options


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run pipeline tasks from Redis (Celery); start one per machine, or more",
        description="A Celery worker for the distributed executor. Needs SPYRE_CI_REDIS_URL. "
        "With --intake it also moves deliveries the relay accepted into the pipeline.",
    )
    parser.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="task processes (default: CPU count)",
    )
    parser.add_argument(
        "--intake", action="store_true", help="also consume the relay's intake queue and start runs"
    )
    parser.add_argument(
        "--out-root",
        type=absolute_path,
        default="runs",
        metavar="DIR",
        help="with --intake: each run writes under OUT_ROOT/RUN_ID",
    )
    add_options(
        parser,
        "inventory",
        "impact_map",
        "specs",
        "config",
        help={
            "inventory": "with --intake: the Inventory to use",
            "impact_map": "with --intake: an impact map the selector also reads (default "
            "$SPYRE_CI_IMPACT_MAP)",
            "specs": "with --intake: spec file or folder (default: the bundled specs)",
            "config": "with --intake: the relay's config file; its `github` section lets the "
            "worker fetch the changed files of pull requests from GitHub",
        },
    )
    parser.add_argument("--loglevel", default="INFO")
    parser.set_defaults(func=checked(worker))


def worker(args: argparse.Namespace) -> int:
    from workflows.settings import Settings

    settings = Settings.from_env()
    if not settings.redis_url:
        raise CommandError("set SPYRE_CI_REDIS_URL (e.g. redis://127.0.0.1:6379/0) to run a worker")
    from workflows import distributed

    stop = threading.Event()
    if args.intake:
        from workflows.commands.run import impact_map_path
        from workflows.intake_bridge import request_for_event

        inventory = args.inventory
        if inventory is None:
            from suites.loader import SpecError
            from workflows.inventory_cache import default_inventory

            try:
                inventory = default_inventory(settings.state_dir, args.specs)
            except SpecError as exc:
                raise CommandError(
                    f"no spec loads, so there is no Inventory to run: {exc}"
                ) from exc
        specs = tuple(str(Path(p).resolve()) for p in args.specs)
        impact_map = impact_map_path(args.impact_map)
        adapter = _github_adapter(args.config)

        def make_request(event: Any) -> Any:
            if adapter is not None:
                from relay.changes import complete_files

                event = complete_files(event, adapter)
            return request_for_event(
                event,
                args.out_root.resolve(),
                inventory,
                specs=specs,
                shards=args.concurrency,
                impact_map=impact_map,
            )

        threading.Thread(
            target=distributed.consume_intake, args=(make_request, stop), daemon=True, name="intake"
        ).start()
    try:
        distributed.app.worker_main(
            [
                "worker",
                f"--concurrency={args.concurrency}",
                f"--loglevel={args.loglevel}",
                "--pool=prefork",
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        stop.set()
    return 0


def _github_adapter(config_path: Path | None) -> Any:
    """The GitHub adapter of the relay's config, or None when GitHub is not configured."""
    from relay.config import load_config
    from relay.events import RelayError
    from relay.github import GitHubAdapter

    try:
        config = load_config(config_path)
    except RelayError as exc:
        raise CommandError(str(exc)) from exc
    return GitHubAdapter.from_config(config.github) if config.github else None
