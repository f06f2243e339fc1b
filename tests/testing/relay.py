"""The relay behind real HTTP on loopback, and a Redis the tests can stop and start again."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.serving import make_server

from relay.app import Relay, create_app
from relay.config import RelayConfig
from relay.signature import sign
from tests.testing.processes import free_port

SECRET = "It's a Secret to Everybody"


class RedisProcess:
    """A private redis-server on a fixed port that tests can stop and start again."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not on the PATH; the tests need a real Redis")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        pytest.fail(f"redis-server did not listen on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


class RelayHTTP:
    """The relay app behind a real HTTP server on loopback, plus helpers to call it."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self._server = make_server("127.0.0.1", 0, create_app(relay.config, relay), threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        # Polled every 50 ms, not the default 0.5 s: `stop` waits for the loop to notice.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        self.http = requests.Session()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def webhook(
        self,
        event: str,
        payload: Any,
        delivery: str,
        secret: str = SECRET,
        headers: Mapping[str, str] | None = None,
        raw: bytes | None = None,
    ) -> requests.Response:
        body = raw if raw is not None else json.dumps(payload).encode()
        all_headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(secret, body),
            "Content-Type": "application/json",
        }
        all_headers.update(headers or {})
        return self.http.post(
            f"{self.url}/github/webhook", data=body, headers=all_headers, timeout=30
        )

    def callback(self, body: Any, token: str | None) -> requests.Response:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(f"{self.url}/github/callback", data=data, headers=headers, timeout=30)

    def get(self, path: str) -> requests.Response:
        return self.http.get(f"{self.url}{path}", timeout=30)


def base_config(redis_url: str, **overrides: Any) -> RelayConfig:
    return replace(RelayConfig(webhook_secret=SECRET, redis_url=redis_url), **overrides)
