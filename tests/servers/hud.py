"""A local HTTP server implementing HUD's `POST /crcr/results` contract, for tests.

Contract (pytorch/test-infra torchci, see shared reference crcr-and-hud.md):
- header `x-hud-internal-bot` must equal the bot key, else 401;
- a body over 2 MB is refused with 413 before it is read;
- the body is the relay envelope; missing `trusted.verified_repo`, `delivery_id`,
  `workflow.status`, `workflow.run_id`, `workflow.name`, `workflow.job_name` or
  `workflow.check_run_id` gives 400 naming the field;
- one row per job is stored in a table keyed like HUD's ReplacingMergeTree
  `(downstream_repo, delivery_id, dynamoKey)`: a later insert with the same key replaces
  the earlier one, so re-sending never duplicates.
The row is derived here independently of dashboard_export, so tests cross-check the two.
`failed_tests_json` and `environment` are filled from the callback's `workflow.failed_tests`
and `workflow.environment`, as the proposed HUD change would (HUD leaves them empty today).

Use as a context manager (`with HudServer("key") as hud: hud.url`) or via the `hud_server`
fixture in tests/dashboard_export/conftest.py. `fail_next(n, status)` makes the next n
requests answer `status` (a 5xx) to exercise the publisher's retries.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BODY_LIMIT = 2 * 1024 * 1024
AUTH_HEADER = "x-hud-internal-bot"
PATH = "/crcr/results"
_REQUIRED = (
    ("trusted", "verified_repo"),
    ("untrusted", "callback_payload", "delivery_id"),
    ("untrusted", "callback_payload", "workflow", "status"),
    ("untrusted", "callback_payload", "workflow", "run_id"),
    ("untrusted", "callback_payload", "workflow", "name"),
    ("untrusted", "callback_payload", "workflow", "job_name"),
    ("untrusted", "callback_payload", "workflow", "check_run_id"),
)


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    path: str
    status: int
    auth: str | None
    length: int


class HudServer:
    """The HUD results endpoint on a free loopback port, in a background thread."""

    def __init__(self, bot_key: str = "hud-test-key") -> None:
        self.bot_key = bot_key
        self.table: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.inserts = 0  # rows inserted, replaced ones included
        self.received: list[Received] = []
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.table.values())

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def start(self) -> HudServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> HudServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling -------------------------------------------------------------

    def _answer(self, auth: str | None, length: int, read: Any) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self._failures:
                return self._failures.pop(0), {"error": "injected failure"}
        if auth != self.bot_key:
            return 401, {"error": f"missing or wrong {AUTH_HEADER} header"}
        if length > BODY_LIMIT:
            return 413, {"error": f"body of {length} bytes exceeds {BODY_LIMIT}"}
        try:
            body = json.loads(read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            return 400, {"error": f"body is not JSON: {exc}"}
        for path in _REQUIRED:
            value: Any = body
            for key in path:
                value = value.get(key) if isinstance(value, Mapping) else None
            if value in (None, ""):
                return 400, {"error": f"missing required field {'.'.join(path)}"}
        row = _row(body)
        table_key = (row["downstream_repo"], row["delivery_id"], row["dynamoKey"])
        with self._lock:
            self.table[table_key] = row
            self.inserts += 1
        return 200, {"ok": True, "dynamoKey": row["dynamoKey"]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                auth = self.headers.get(AUTH_HEADER)
                if self.path != PATH:
                    status, reply = 404, {"error": f"no route {self.path}"}
                else:
                    consumed = 0

                    def read(n: int) -> bytes:
                        nonlocal consumed
                        consumed += n
                        return bytes(self.rfile.read(n))

                    status, reply = server._answer(auth, length, read)
                    # Drain what was not read, so the client gets the answer rather than a
                    # connection reset in the middle of its upload.
                    remaining = length - consumed
                    while remaining > 0:
                        chunk = self.rfile.read(min(remaining, 1 << 16))
                        if not chunk:
                            break
                        remaining -= len(chunk)
                with server._lock:
                    server.received.append(Received(self.path, status, auth, length))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def _row(body: Mapping[str, Any]) -> dict[str, Any]:
    trusted = body["trusted"]
    callback = body["untrusted"]["callback_payload"]
    workflow = callback["workflow"]
    payload = callback.get("payload") or {}
    pr = payload.get("pull_request") or {}
    tests = workflow.get("test_results") or {}
    metrics = trusted.get("ci_metrics") or {}
    repo = trusted["verified_repo"]
    delivery = str(callback["delivery_id"])
    key = "/".join(
        [repo, delivery, workflow["name"], workflow["job_name"], str(workflow["check_run_id"])]
    )
    head = pr.get("head", {}).get("sha") if pr else None
    return {
        "dynamoKey": key,
        "status": workflow["status"],
        "downstream_repo": repo,
        "upstream_repo": (payload.get("repository") or {}).get("full_name") or "pytorch/pytorch",
        "pr_number": int(pr.get("number") or 0),
        "pytorch_head_sha": head or payload.get("head_sha") or delivery,
        "delivery_id": delivery,
        "workflow_run_url": workflow.get("url") or "",
        "workflow_name": workflow["name"],
        "job_name": workflow["job_name"],
        "check_run_id": str(workflow["check_run_id"]),
        "run_id": str(workflow["run_id"]),
        "run_attempt": int(workflow.get("run_attempt") or 1),
        "conclusion": workflow.get("conclusion") or "",
        "queue_time": metrics.get("queue_time"),
        "execution_time": metrics.get("execution_time"),
        "started_at": _datetime64(workflow.get("started_at")),
        "completed_at": _datetime64(workflow.get("completed_at")),
        "total_tests": int(tests.get("total", 0)),
        "passed_tests": int(tests.get("passed", 0)),
        "failed_tests": int(tests.get("failed", 0)),
        "skipped_tests": int(tests.get("skipped", 0)),
        "failed_tests_json": json.dumps(workflow.get("failed_tests") or []),
        "artifact_url": workflow.get("artifact_url") or "",
        "environment": json.dumps(workflow.get("environment") or {}),
        "downstream_repo_level": trusted.get("downstream_repo_level", ""),
        "event_type": callback.get("event_type") or "pull_request",
    }


def _datetime64(value: str | None) -> str:
    if not value:
        return "1970-01-01 00:00:00.000000000"
    moment = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f") + "000"
