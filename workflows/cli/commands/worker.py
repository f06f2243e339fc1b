"""`spyre-ci worker`: a Celery worker on Redis that runs plans, shards and finishes;
`spyre-ci worker status`: what the workers, the intake and the queue are doing."""

from __future__ import annotations

import argparse
import os
import socket
import threading
from pathlib import Path
from typing import Any

from contracts.exit_codes import ExitCode
from workflows.cli.change_input import checked, state_dir
from workflows.cli.options import absolute_path, add_options
from workflows.errors import CommandError
from workflows.settings import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run pipeline tasks from Redis (Celery); start one per machine, or more",
        description="A Celery worker for the distributed executor. Needs SPYRE_CI_REDIS_URL. "
        "With --intake it also moves deliveries the relay accepted into the pipeline.",
    )
    add_options(parser, "concurrency")
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
    parser.add_argument(
        "--no-github",
        action="store_true",
        help="with --intake: never ask GitHub for a delivery's changed files; a pull request "
        "whose payload lists none is planned blind (a full run, the plan says why)",
    )
    parser.add_argument(
        "--name",
        metavar="NODE",
        help="the worker's node name, unique among the workers (default spyre-ci-PID@HOST); "
        "leases and `worker status` name their owners by it; with --intake it is also the "
        "intake's consumer name, so a restart under the same name resumes its claimed deliveries",
    )
    parser.add_argument("--loglevel", default="INFO")
    parser.set_defaults(func=checked(worker))
    sub = parser.add_subparsers(dest="worker_command", metavar="ACTION")
    status = sub.add_parser(
        "status",
        help="intake, live workers, leased shards and their owners, queue length",
        description="Exit 0 when Redis answers, an intake loop and a worker are alive; "
        "3 when one of them is down.",
    )
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=checked(worker_status))


def worker(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.redis_url:
        raise CommandError("set SPYRE_CI_REDIS_URL (e.g. redis://127.0.0.1:6379/0) to run a worker")
    from workflows.drivers import distributed

    stop = threading.Event()
    if args.intake:
        from workflows.cli.change_input import impact_map_path
        from workflows.drivers.intake_bridge import request_for_event

        adapter = None if args.no_github else _github_adapter(args.config)  # before any work
        inventory = args.inventory
        if inventory is None:
            from suites.loader import SpecError
            from workflows.stores.inventory_cache import default_inventory

            try:
                inventory = default_inventory(state_dir(settings), args.specs)
            except SpecError as exc:
                raise CommandError(
                    f"no spec loads, so there is no Inventory to run: {exc}"
                ) from exc
        specs = tuple(str(Path(p).resolve()) for p in args.specs)
        impact_map = impact_map_path(args.impact_map, settings)

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
                settings=settings,
            )

        threading.Thread(
            target=distributed.consume_intake,
            args=(make_request, stop),
            kwargs={"consumer": args.name},  # a fixed name resumes its own pending entries
            daemon=True,
            name="intake",
        ).start()
    distributed.describe_worker(concurrency=args.concurrency, intake=bool(args.intake))
    name = args.name or f"spyre-ci-{os.getpid()}@{socket.gethostname()}"
    try:
        distributed.app.worker_main(
            [
                "worker",
                f"--hostname={name}",
                f"--concurrency={args.concurrency}",
                f"--loglevel={args.loglevel}",
                "--pool=prefork",
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        stop.set()
    return ExitCode.OK


def _github_adapter(config_path: Path | None) -> Any:
    """The GitHub adapter of the relay's config; a start-up error when it has no credentials.

    Without a token or an App, every pull request (whose payload lists no files) would ask
    api.github.com anonymously, fail, and be retried forever: refused here instead.
    """
    from relay.config import load_config
    from relay.github import GitHubAdapter

    config = load_config(config_path)
    github = config.github
    if not (github.token or (github.app_id and github.installation_id and github.private_key_path)):
        where = f"the `github` section of {config_path}" if config_path else "no --config"
        raise CommandError(
            "worker --intake fetches the changed files of pull requests from GitHub, but "
            f"no GitHub credentials are set ({where}, no SPYRE_CI_GITHUB_* variables): set "
            "SPYRE_CI_GITHUB_TOKEN (or github.token), or a GitHub App with "
            "SPYRE_CI_GITHUB_APP_ID, SPYRE_CI_GITHUB_INSTALLATION_ID and "
            "SPYRE_CI_GITHUB_PRIVATE_KEY (github.app_id, github.installation_id, "
            "github.private_key_path); SPYRE_CI_GITHUB_URL for GitHub Enterprise. Or pass "
            "--no-github to plan such deliveries blind (full runs)"
        )
    return GitHubAdapter.from_config(github)


def worker_status(args: argparse.Namespace, settings: Settings) -> int:
    """Health of the distributed executor: 0 ok, 3 when Redis, intake or workers are down."""
    import json

    import redis

    from workflows.drivers import distributed
    from workflows.stores.history import masked

    url = settings.redis_url
    if not url:
        raise CommandError("set SPYRE_CI_REDIS_URL (e.g. redis://127.0.0.1:6379/0) to see workers")
    try:
        state = distributed.status(url, settings.lease_ttl_s)
    except redis.RedisError as exc:
        print(f"redis   {masked(url)}: DOWN ({exc})")
        return ExitCode.INFRASTRUCTURE
    problems = [
        what
        for what, down in (
            ("no intake loop", not state["intake"]),
            ("no worker", not state["workers"]),
        )
        if down
    ]
    if args.json:
        print(json.dumps({"redis": masked(url), "healthy": not problems, **state}, indent=2))
        return ExitCode.INFRASTRUCTURE if problems else ExitCode.OK
    print(
        f"redis   {masked(url)}: up; queue {state['queue']} task(s), "
        f"{state['queued_plans']} of them plans"
    )
    print(f"intake  {', '.join(state['intake']) or 'DOWN: no intake loop in the last 30 s'}")
    print(f"workers {len(state['workers'])} alive (heartbeat within {state['lease_ttl_s']:g} s)")
    for w in state["workers"]:
        intake = ", intake" if w.get("intake") else ""
        print(f"  {w['node']}  pid {w['pid']}  concurrency {w.get('concurrency', '?')}{intake}")
    print(f"shards  {len(state['shards'])} started without a result")
    for s in state["shards"]:
        left = f", lease {s['lease_left_s']:g} s left" if s["lease_left_s"] is not None else ""
        owner = f" by {s['owner']}" if s["owner"] else ""
        print(f"  run {s['run']} shard {s['shard']}: {s['state']}{owner}{left}")
    if problems:
        print(f"unhealthy: {'; '.join(problems)}")
        return ExitCode.INFRASTRUCTURE  # a service is down: an outage, not a check's "no"
    return ExitCode.OK
