"""The relay's HTTP service (Flask, served by gunicorn): webhook, CRCR callback, health, metrics.

Flask because the webhook signature must be checked over the exact raw bytes GitHub signed
(`request.get_data()`), and every step of a delivery is a short blocking Redis call: sync WSGI
code in a few threads is the simplest model that fits. Requests reach it whole, read under
deadlines by the front (relay/front.py); gunicorn scales the processes over cores.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import redis
from flask import Flask, Response, abort, g, request

from contracts.event import TriggerEvent
from relay import signature
from relay.allowlist import load_allowlist
from relay.callback import CallbackService, HudPublisher
from relay.callback_auth import BearerAuth
from relay.config import RelayConfig
from relay.events import Ignored, RelayError, normalize
from relay.fanout import FANOUT_GROUP, FANOUT_STREAM, Fanout, forward_event
from relay.github import GitHubAdapter
from relay.intake import Queue, QueueUnavailable, RedisIntake, connect
from relay.metrics import Metrics

log = logging.getLogger("relay")


class Relay:
    """The services one relay process uses, built from its config (tests hand in their own)."""

    def __init__(
        self,
        config: RelayConfig,
        client: redis.Redis | None = None,
        adapter: GitHubAdapter | None = None,
        hud: HudPublisher | None = None,
        intake: Queue | None = None,
    ) -> None:
        self.config = config
        self.client = client if client is not None else connect(config.redis_url)
        if adapter is None and (config.github.token or config.github.app_id):
            adapter = GitHubAdapter.from_config(config.github)
        self.adapter = adapter
        # Any Queue can take the triggers; Redis still holds CRCR state, fan-out and metrics.
        self.intake: Queue = intake if intake is not None else RedisIntake(self.client)
        self.outbox = RedisIntake(self.client, stream=FANOUT_STREAM, group=FANOUT_GROUP)
        self.metrics = Metrics(self.client)
        self.callbacks = CallbackService(config, self.client, adapter, hud)
        self.fanout: Fanout | None = None
        allowlist = self.callbacks.allowlist
        if config.fanout and allowlist is not None and adapter is not None:
            self.fanout = Fanout(
                self.outbox, adapter, allowlist, self.callbacks.state, callbacks=self.callbacks
            )
        elif config.fanout and allowlist is not None:
            log.warning("allowlist set but no GitHub token: CRCR fan-out is off")

    @property
    def fanout_enabled(self) -> bool:
        return self.fanout is not None

    def start_background(self, consumer: str, sweep_every: float = 60.0) -> threading.Thread:
        """A daemon thread that sends fan-out dispatches and runs the 6 h sweeper."""
        thread = threading.Thread(
            target=self._background,
            args=(consumer, sweep_every),
            name="relay-background",
            daemon=True,
        )
        thread.start()
        return thread

    def _background(self, consumer: str, sweep_every: float) -> None:
        next_sweep = 0.0
        while True:
            try:
                if time.monotonic() >= next_sweep:
                    self.callbacks.sweep()
                    next_sweep = time.monotonic() + sweep_every
                if self.fanout is not None:
                    self.fanout.run_once(consumer, block_ms=1000)
                else:
                    time.sleep(1.0)
            except Exception:  # noqa: BLE001 - keep the loop alive; Redis or GitHub will return
                log.exception("relay background step failed; retrying in 1 s")
                time.sleep(1.0)


def check_config(config: RelayConfig) -> None:
    """Load everything a worker would load (allowlist, JWKS file, App key), so a bad file is
    reported once, naming it, before any worker starts. Raises RelayError."""
    if config.allowlist:
        load_allowlist(config.allowlist)
    BearerAuth(config.callback_tokens, config.oidc, config.ci_providers)
    if config.github.private_key_path:
        GitHubAdapter.from_config(config.github)


def create_app(config: RelayConfig, relay: Relay | None = None) -> Flask:
    """The WSGI application; `relay` defaults to services built from `config`."""
    relay = relay or Relay(config)
    app = Flask("relay")
    # Werkzeug answers 413 itself, before the body is read, when Content-Length is larger.
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes
    app.extensions["relay"] = relay

    @app.before_request
    def _start() -> None:
        g.started = time.perf_counter()
        # On every path, so an oversized body is 413 whether or not the view reads it. The
        # front (relay/front.py) stops reading at the limit and hands over only the size.
        if (request.content_length or 0) > config.max_body_bytes:
            abort(413)

    @app.errorhandler(413)
    def _too_large(_exc: Exception) -> Response:
        if request.path == "/github/webhook":
            _observe(relay, request.headers.get("X-GitHub-Event", ""), "too_large")
        return _answer(
            413,
            f"body is over the relay's {config.max_body_bytes}-byte limit (max_body_bytes; "
            "GitHub caps webhook payloads at 25 MB)",
        )

    @app.post("/github/webhook")
    def webhook() -> Response:
        event_name = request.headers.get("X-GitHub-Event", "")
        status, outcome, message, extra = _webhook(relay, config, event_name)
        _observe(relay, event_name, outcome)
        return _answer(status, message, **extra)

    @app.post("/github/callback")
    def callback() -> Response:
        body = request.get_data(cache=False)
        status, message, extra = relay.callbacks.handle(request.headers.get("Authorization"), body)
        relay.metrics.observe("callback", str(status))
        return _answer(status, message, **extra)

    @app.get("/runs/<run_id>")
    def run_page(run_id: str) -> Response:
        """The run's report: what `artifact_url` links HUD readers to."""
        found = _run_file(config, run_id, "report.html")
        if isinstance(found, Response):
            return found
        return Response(found.read_bytes(), status=200, mimetype="text/html")

    @app.get("/runs/<run_id>/tests")
    def run_tests(run_id: str) -> Response:
        """The run's per-test rows (`test_run`, as uploaded to HUD's S3), JSON lines."""
        found = _run_file(config, run_id, "run.json")
        if isinstance(found, Response):
            return found
        parts = sorted((found.parent / "hud" / "test_run").glob("*/*"))
        text = b"".join(gzip.decompress(p.read_bytes()) for p in parts)
        return Response(text, status=200, mimetype="application/x-ndjson")

    @app.get("/readiness")
    def readiness_page() -> Response:
        """The promotion readiness page `spyre-ci readiness --html <runs_dir>/readiness.html`
        rendered: the relay reads no History (it stays apart from the workers' store)."""
        path = Path(config.runs_dir or ".") / "readiness.html"
        return _served_page(config, "readiness.html", f"spyre-ci readiness --html {path}")

    # The run browser: pages `spyre-ci runs pages` wrote into runs_dir (no History here).
    @app.get("/runs/")
    def runs_index() -> Response:
        return _browser_page(config, "index.html")

    @app.get("/flaky")
    def flaky_page() -> Response:
        return _browser_page(config, "flaky.html")

    @app.get("/quality")
    def quality_page() -> Response:
        return _browser_page(config, "quality.html")

    @app.get("/variants/<name>")
    def variant_page(name: str) -> Response:
        # Names are what dashboard_export.browser.page_name makes; anything else (a `/`,
        # `..`, NUL, a dot) names no page.
        if not _PAGE_NAME.fullmatch(name):
            return _answer(404, f"no variant page {name!r}")
        return _browser_page(config, f"variants/{name}.html")

    @app.get("/healthz")
    def healthz() -> Response:
        try:
            relay.client.ping()
        except redis.RedisError as exc:
            return _answer(503, f"redis unreachable: {exc}")
        return _answer(200, "ok")

    @app.get("/metrics")
    def metrics() -> Response:
        try:
            depths = [("intake", relay.intake.depth())]
            if relay.fanout_enabled:
                depths.append(("fanout", relay.outbox.depth()))
            text = relay.metrics.render(depths)
        except (redis.RedisError, QueueUnavailable) as exc:
            return _answer(503, f"redis unreachable: {exc}")
        return Response(text, status=200, mimetype="text/plain; version=0.0.4")

    return app


def decode_body(body: bytes, content_type: str) -> Any | tuple[int, str]:
    """The payload of a delivery, from either content type GitHub sends; (status, why) when
    there is none.

    `application/json`, or `application/x-www-form-urlencoded` with the JSON in its `payload`
    field (GitHub's default for a new webhook); the signature was checked over the raw body
    either way. Non-finite numbers (`NaN`, `Infinity`) and nesting deeper than a bound are
    refused: JSON has neither, and GitHub never sends them.
    """
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        fields = urllib.parse.parse_qs(body.decode("latin-1"), max_num_fields=20)
        if "payload" not in fields:
            return 400, "a form-encoded delivery carries its JSON in a 'payload' field"
        text = fields["payload"][0]
    elif kind in ("application/json", ""):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return 400, f"body is not UTF-8 JSON: {exc}"
    else:
        return 415, (
            f"content type {kind!r} is not a webhook's: set the webhook's content type "
            "to application/json (or application/x-www-form-urlencoded)"
        )
    try:
        payload = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        return 400, "body is not JSON: nested too deep"
    except ValueError as exc:
        return 400, f"body is not JSON: {exc}"
    if _depth(payload) > MAX_DEPTH:
        return 400, f"body is not JSON a webhook sends: nested deeper than {MAX_DEPTH} levels"
    return payload


MAX_DEPTH = 64


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """Nesting depth of a decoded JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _webhook(
    relay: Relay, config: RelayConfig, event_name: str
) -> tuple[int, str, str, dict[str, Any]]:
    """(HTTP status, metrics outcome, message, extra JSON fields) for one delivery."""
    body = request.get_data(cache=False)
    header = request.headers.get("X-Hub-Signature-256")
    if not signature.verify(config.webhook_secret, body, header):
        if header is None and request.headers.get("X-Hub-Signature"):
            why = "SHA-1 X-Hub-Signature alone is not accepted; send X-Hub-Signature-256"
        elif header is None:
            why = "missing X-Hub-Signature-256"
        else:
            why = "X-Hub-Signature-256 does not match the body"
        log.warning("webhook rejected: %s", why)
        return 401, "unauthorized", why, {}
    delivery = request.headers.get("X-GitHub-Delivery", "").strip()
    if not event_name or not delivery:
        return 400, "bad_request", "X-GitHub-Event and X-GitHub-Delivery are required", {}
    if len(delivery) > 200:
        return 400, "bad_request", "X-GitHub-Delivery is longer than 200 characters", {}
    decoded = decode_body(body, request.headers.get("Content-Type", ""))
    if isinstance(decoded, tuple):
        status, why = decoded
        return status, "bad_request", f"delivery {delivery}: {why}", {}
    payload = decoded
    if event_name == "ping":
        return (
            200,
            "ping",
            "pong",
            {"zen": payload.get("zen") if isinstance(payload, dict) else None},
        )
    try:
        result = normalize(event_name, payload, delivery, config.rules)
    except RelayError as exc:
        return 400, "bad_request", str(exc), {}
    forward = forward_event(event_name, payload, delivery, config) if relay.fanout_enabled else None
    try:
        if isinstance(result, TriggerEvent) and isinstance(relay.intake, RedisIntake):
            also = (FANOUT_STREAM,) if forward is not None else ()
            fresh = relay.intake.accept(delivery, result, also=also)
        elif isinstance(result, TriggerEvent):
            # Another Queue cannot share the Redis script: enqueue, then fill the outbox
            # (its own dedupe; a redelivery after a failure between the two refills it).
            fresh = relay.intake.accept(delivery, result)
            if forward is not None:
                relay.outbox.accept(delivery, forward)
        elif forward is not None:
            fresh = relay.outbox.accept(delivery, forward)
        else:
            log.info("delivery %s ignored: %s", delivery, result.reason)
            return 202, "ignored", result.reason, {"delivery": delivery}
    except QueueUnavailable as exc:
        log.error("delivery %s not enqueued: %s", delivery, exc)
        return 503, "unavailable", "queue unavailable; nothing was recorded, redeliver", {}
    if not fresh:
        log.info("delivery %s is a duplicate", delivery)
        return 202, "duplicate", "already accepted", {"delivery": delivery}
    if isinstance(result, Ignored):
        return 202, "forwarded", f"forwarded only ({result.reason})", {"delivery": delivery}
    return 202, "accepted", "enqueued", {"delivery": delivery}


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def _run_file(config: RelayConfig, run_id: str, name: str) -> Path | Response:
    """`<runs_dir>/<run_id>/<name>`, or the answer saying why there is none."""
    if not config.runs_dir:
        return _answer(404, "no runs_dir configured (SPYRE_CI_RUNS_DIR): run pages are off")
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        return _answer(400, f"{run_id!r} is not a run id")
    path = Path(config.runs_dir) / run_id / name
    if not path.is_file():
        return _answer(404, f"run {run_id}: no {name} under {config.runs_dir}")
    return path


_PAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,119}")


def _browser_page(config: RelayConfig, name: str) -> Response:
    """A run browser page under runs_dir (`name` is one of ours, never a client's string)."""
    return _served_page(config, name, f"spyre-ci runs pages --out {config.runs_dir}")


def _served_page(config: RelayConfig, name: str, how: str) -> Response:
    """`<runs_dir>/<name>`, a page pre-rendered by `how`, or the 404 saying to run it."""
    if not config.runs_dir:
        return _answer(404, "no runs_dir configured (SPYRE_CI_RUNS_DIR): pages are off")
    path = Path(config.runs_dir) / name
    if not path.is_file():
        return _answer(404, f"no {name} under {config.runs_dir}: write it with `{how}`")
    return Response(path.read_bytes(), status=200, mimetype="text/html")


def _observe(relay: Relay, event_name: str, outcome: str) -> None:
    started = getattr(g, "started", None)
    elapsed = time.perf_counter() - started if started is not None else None
    relay.metrics.observe(event_name, outcome, elapsed)


def _answer(status: int, message: str, **extra: Any) -> Response:
    body = {"status": status, "message": message, **extra}
    return Response(json.dumps(body), status=status, mimetype="application/json")
