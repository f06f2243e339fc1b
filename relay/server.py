"""Run the relay under gunicorn, configured in code (no gunicorn.conf.py to keep in step).

gthread workers: each process keeps its own Redis pool and serves several requests at once
while another waits on Redis; processes use both cores. Every worker also runs the fan-out
sender and the 6 h sweeper in a background thread (both are safe to run concurrently).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from gunicorn.app.base import BaseApplication

from relay.app import create_app
from relay.config import RelayConfig


class RelayApplication(BaseApplication):  # type: ignore[misc]
    """gunicorn application serving `create_app(config)` in every worker."""

    def __init__(self, config: RelayConfig, options: dict[str, Any]) -> None:
        self.relay_config = config
        self.options = options
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
    threads: int = 4,
    log_level: str = "info",
) -> None:
    """Serve until interrupted."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    RelayApplication(
        config,
        {
            "bind": f"{host}:{port}",
            "workers": workers,
            "worker_class": "gthread" if threads > 1 else "sync",
            "threads": threads,
            "timeout": 60,
            "graceful_timeout": 10,
            "keepalive": 5,
            "loglevel": log_level,
            "accesslog": None,
            "errorlog": "-",
            "proc_name": "spyre-ci-relay",
            # gunicorn's control socket has one path per user: a second relay on the host
            # would take it over and delete it on exit. Nothing here uses it.
            "control_socket_disable": True,
        },
    ).run()


def serve_dev(config: RelayConfig, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Flask's development server, one process: for debugging only."""
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s %(message)s")
    app = create_app(config)
    app.extensions["relay"].start_background(f"{socket.gethostname()}-{os.getpid()}-dev")
    app.run(host=host, port=port, threaded=True, use_reloader=False)
