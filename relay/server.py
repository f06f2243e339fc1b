"""Run the relay under gunicorn, configured in code (no gunicorn.conf.py to keep in step).

gunicorn manages the processes; each runs `relay.front.FrontWorker`, which reads requests on
an event loop under deadlines and size limits, and hands whole requests to a small thread pool
(each process keeps its own Redis pool; processes use both cores). Every worker also runs the
fan-out sender and the 6 h sweeper in a background thread (both safe to run concurrently).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import replace
from typing import Any

from gunicorn.app.base import BaseApplication

from relay.app import create_app
from relay.config import RelayConfig
from relay.front import FrontSettings


class RelayApplication(BaseApplication):  # type: ignore[misc]
    """gunicorn application serving `create_app(config)` in every worker."""

    def __init__(
        self, config: RelayConfig, options: dict[str, Any], front: FrontSettings | None = None
    ) -> None:
        self.relay_config = config
        self.options = options
        # Read by FrontWorker in each worker process (gunicorn's cfg takes only its own keys).
        self.front_settings = front or FrontSettings(max_body_bytes=config.max_body_bytes)
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)
        self.cfg.set("post_worker_init", _start_background)
        self.cfg.set("worker_exit", _flush_metrics)

    def load(self) -> Any:
        return create_app(self.relay_config)


def _start_background(worker: Any) -> None:
    relay = worker.wsgi.extensions["relay"]
    relay.start_background(f"{socket.gethostname()}-{os.getpid()}")


def _flush_metrics(_server: Any, worker: Any) -> None:
    relay = getattr(worker, "wsgi", None)
    if relay is not None:
        relay.extensions["relay"].metrics.flush()


def serve(
    config: RelayConfig,
    host: str = "127.0.0.1",
    port: int = 8080,
    workers: int = 2,
    log_level: str = "info",
    front: FrontSettings | None = None,
) -> None:
    """Serve until interrupted; `front` bounds each worker (threads, timeouts, connections)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    front = replace(front or FrontSettings(), max_body_bytes=config.max_body_bytes)
    RelayApplication(
        config,
        {
            "bind": f"{host}:{port}",
            "workers": workers,
            "worker_class": "relay.front.FrontWorker",
            # The worker's heartbeat runs on its event loop, independent of requests.
            "timeout": 60,
            "graceful_timeout": 10,
            "loglevel": log_level,
            "accesslog": None,
            "errorlog": "-",
            "proc_name": "spyre-ci-relay",
            # gunicorn's control socket has one path per user: a second relay on the host
            # would take it over and delete it on exit. Nothing here uses it.
            "control_socket_disable": True,
        },
        front,
    ).run()


def serve_dev(config: RelayConfig, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Flask's development server, one process: for debugging only."""
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s %(message)s")
    app = create_app(config)
    app.extensions["relay"].start_background(f"{socket.gethostname()}-{os.getpid()}-dev")
    app.run(host=host, port=port, threaded=True, use_reloader=False)
