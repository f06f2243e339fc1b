"""A local HTTP endpoint that answers from a script, then as the real server behind it does.

For the publishers' retry policy: a HUD or relay answering 429 with `Retry-After`, or 503,
a few times before it takes the body; one that refuses with 400; one that keeps answering
429 past any cap. Each answer in the script is (status, headers); once the script is spent
the request goes to `upstream` (a `tests/servers/hud.py` HUD, say) and its answer comes back
as it was, or, without an upstream, is answered 200 `{"ok": true}`. `keep_answering(status,
headers)` makes every request get that answer until `recover()`. Every request is recorded with the
monotonic time it arrived, so a test reads the waits between attempts from the server side.

    with ScriptedEndpoint([(429, {"Retry-After": "1"})], upstream=hud.url) as endpoint:
        publish_hud(envelope, endpoint.url, key, require_https=False)
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

Answer = tuple[int, dict[str, str]]


@dataclass(frozen=True)
class Arrival:
    """One request as the endpoint saw it, and what it answered."""

    at: float  # time.monotonic() when it arrived
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class ScriptedEndpoint:
    """The endpoint on a free loopback port, served from a background thread."""

    script: list[Answer] = field(default_factory=list)
    upstream: str | None = None
    arrivals: list[Arrival] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._always: Answer | None = None
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def keep_answering(self, status: int, headers: dict[str, str] | None = None) -> None:
        """Answer every request from now on with `status` and `headers`."""
        with self._lock:
            self._always = (status, dict(headers or {}))

    def recover(self) -> None:
        """Stop `keep_answering`: what is left of the script, then the upstream, answer."""
        with self._lock:
            self._always = None

    def waits(self) -> list[float]:
        """Seconds between consecutive requests, as the endpoint saw them arrive."""
        times = [a.at for a in self.arrivals]
        return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]

    def __enter__(self) -> ScriptedEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            scripted = self._always or (self.script.pop(0) if self.script else None)
        if scripted is not None:
            status, extra = scripted
            reply = json.dumps({"error": f"scripted answer {status}"}).encode()
            return status, {"Content-Type": "application/json", **extra}, reply
        if self.upstream is None:
            return 200, {"Content-Type": "application/json"}, b'{"ok": true}'
        sent = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
        answer = requests.request(method, self.upstream + path, data=body, headers=sent, timeout=10)
        kind = answer.headers.get("Content-Type", "application/json")
        return answer.status_code, {"Content-Type": kind}, answer.content

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                arrived = time.monotonic()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = dict(self.headers.items())
                status, extra, reply = endpoint._answer(self.command, self.path, headers, body)
                with endpoint._lock:
                    endpoint.arrivals.append(
                        Arrival(arrived, self.command, self.path, headers, body, status)
                    )
                self.send_response(status)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST = do_PATCH = _serve

            def log_message(self, *args: object) -> None:
                pass

        return Handler
