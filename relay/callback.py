"""`POST /github/callback`: downstream CI reports a job's progress (CRCR schema_version "1").

Steps, each with its own answer: bearer auth (401) -> JSON (400) -> JSON Schema (400) ->
allowlist (403) -> per-repo rate limit (429; 503 when Redis is down: fail closed) -> state
transition (400 for no dispatch, duplicate or skipped state) -> HUD forward for L2 and up
(502 if HUD stays down; the state is then left unchanged so the downstream can retry) ->
commit -> check run for L3/L4 (best effort: GitHub trouble never fails a callback).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis
from jsonschema import Draft202012Validator

from relay.allowlist import Allowlist, AllowlistEntry, AllowlistFile
from relay.callback_auth import BearerAuth, Unauthorized
from relay.config import RelayConfig
from relay.crcr_state import (
    SCHEDULED_EVENTS,
    CrcrState,
    JobKey,
    Plan,
    Rejected,
    StateUnavailable,
    callback_of,
    plan,
)
from relay.events import RelayError
from relay.github import GitHubAdapter

log = logging.getLogger("relay.callback")

# What the relay itself needs (the upstream relay's required fields); the rest is typed when
# present but optional, so any downstream speaking schema_version "1" is accepted.
CALLBACK_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["delivery_id", "workflow"],
    "properties": {
        "event_type": {"type": "string", "maxLength": 100},
        "delivery_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "payload": {"type": "object"},
        "workflow": {
            "type": "object",
            "required": ["schema_version", "status", "run_id", "name"],
            "properties": {
                "schema_version": {"const": "1"},
                "status": {"enum": ["in_progress", "completed"]},
                "conclusion": {
                    "enum": [
                        None,
                        "success",
                        "failure",
                        "cancelled",
                        "timed_out",
                        "skipped",
                        "neutral",
                        "action_required",
                    ],
                },
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "url": {"type": ["string", "null"]},
                "run_id": {"type": ["string", "integer"], "minLength": 1, "maxLength": 100},
                "run_attempt": {"type": ["string", "integer"], "pattern": "^[0-9]{1,9}$"},
                "job_name": {"type": ["string", "null"], "maxLength": 200},
                "check_run_id": {"type": ["string", "null"]},
                "started_at": {"type": ["string", "null"]},
                "completed_at": {"type": ["string", "null"]},
                "test_results": {"type": "object"},
                "artifact_url": {"type": ["string", "null"]},
            },
        },
    },
}
_VALIDATOR = Draft202012Validator(CALLBACK_SCHEMA)
# Publishes one relay-to-HUD envelope; raises on failure (dashboard_export.publish.publish_hud).
HudPublisher = Callable[[Mapping[str, Any]], Any]


class CallbackService:
    """Everything behind `POST /github/callback`; `handle` returns (status, message, extra)."""

    def __init__(
        self,
        config: RelayConfig,
        client: redis.Redis,
        adapter: GitHubAdapter | None = None,
        hud: HudPublisher | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.state = CrcrState(client)
        self.auth = BearerAuth(config.callback_tokens, config.oidc)
        self.allowlist: Allowlist | AllowlistFile | None = (
            AllowlistFile(config.allowlist) if config.allowlist else None
        )
        self.adapter = adapter
        self.hud = hud if hud is not None else default_hud_publisher(config)
        self.clock = clock

    def handle(self, authorization: str | None, body: bytes) -> tuple[int, str, dict[str, Any]]:
        try:
            return self._handle(authorization, body)
        except Unauthorized as exc:
            return 401, str(exc), {}
        except Rejected as exc:
            log.info("callback rejected: %s", exc)
            return 400, str(exc), {}
        except StateUnavailable as exc:
            log.error("callback refused, Redis unavailable: %s", exc)
            return 503, "state store unavailable; nothing was recorded, retry", {}
        except HudDown as exc:
            log.error("callback not recorded: %s", exc)
            return 502, f"{exc}; nothing was recorded, retry", {}

    def _handle(self, authorization: str | None, body: bytes) -> tuple[int, str, dict[str, Any]]:
        repo = self.auth.verify(authorization)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return 400, f"body is not JSON: {exc}", {}
        problems = sorted(_VALIDATOR.iter_errors(data), key=lambda e: e.json_path)
        if problems:
            first = problems[0]
            return 400, f"schema_version 1: {first.json_path}: {first.message}", {}
        entry = self.allowlist.get(repo) if self.allowlist else None
        if entry is None:
            return 403, f"{repo} is not on the CRCR allowlist", {}
        now = self.clock()
        if not self.state.allow(repo, self.config.callback_rate_per_minute, now):
            return 429, f"{repo}: over {self.config.callback_rate_per_minute} callbacks/min", {}
        workflow = data["workflow"]
        if data.get("event_type") in SCHEDULED_EVENTS:
            # Nightly/periodic runs report once, keyed by the upstream sha: no state machine.
            forwarded = self._forward(data, repo, entry, None, None)
            return 200, "recorded", {"hud": forwarded}
        key = JobKey(
            str(data["delivery_id"]),
            repo,
            str(workflow["run_id"]),
            str(workflow.get("run_attempt") or 1),
            str(workflow.get("job_name") or ""),
        )
        current, dispatched_at = self.state.read(key)
        change = plan(workflow["status"], current, dispatched_at, now, key.redis_key)
        forwarded = self._forward(data, repo, entry, change.queue_time, change.execution_time)
        extra = {
            "callback": json.dumps(data, separators=(",", ":")),
            "level": entry.level,
            "repo": repo,
        }
        self.state.commit(key, change, now, extra)
        check = self._check_run(key, entry, data, change, current)
        return (
            200,
            change.state.lower(),
            {
                "queue_time": change.queue_time,
                "execution_time": change.execution_time,
                "hud": forwarded,
                "check_run": check,
            },
        )

    def _forward(
        self,
        callback: Mapping[str, Any],
        repo: str,
        entry: AllowlistEntry,
        queue_time: float | None,
        execution_time: float | None,
    ) -> str:
        if not entry.hud:
            return "not forwarded: L1"
        if self.hud is None:
            return "not forwarded: no HUD configured"
        from dashboard_export.crcr import hud_envelope

        envelope = hud_envelope(
            callback,
            verified_repo=repo,
            level=entry.level,
            queue_time=queue_time,
            execution_time=execution_time,
        )
        try:
            self.hud(envelope)
        except Exception as exc:  # noqa: BLE001 - the publisher's own error type varies
            if not _is_outage(exc):
                # A retry would be refused the same way: record the state, say why.
                log.warning("callback from %s not forwarded to HUD: %s", repo, exc)
                return f"not forwarded: {exc}"
            raise HudDown(f"HUD did not take the result: {exc}") from exc
        return "forwarded"

    def _check_run(
        self,
        key: JobKey,
        entry: AllowlistEntry,
        data: Mapping[str, Any],
        change: Plan,
        current: Mapping[str, str] | None,
    ) -> int | str | None:
        payload = _mapping(data.get("payload"))
        pr = _mapping(payload.get("pull_request"))
        labels = tuple(str(_mapping(lbl).get("name", "")) for lbl in _list(pr.get("labels")))
        if self.adapter is None or not entry.wants_check_run(labels):
            return None
        workflow = data["workflow"]
        name = f"crcr/{key.repo}/{workflow['name']}/{key.job_name}"
        head = str(
            _mapping(pr.get("head")).get("sha") or payload.get("head_sha") or key.delivery_id
        )
        upstream = str(
            _mapping(payload.get("repository")).get("full_name") or self.config.upstream_repo
        )
        number = pr.get("number") if isinstance(pr.get("number"), int) else 0
        try:
            if change.state == "IN_PROGRESS":
                check_id = self.adapter.create_check_run(
                    upstream,
                    head,
                    name,
                    f"{key.run_id}:{number}",
                    "in_progress",
                    details_url=workflow.get("url") or None,
                )
                self.state.annotate(key, check_run_id=str(check_id))
                return check_id
            existing = (current or {}).get("check_run_id")
            if existing:
                self.adapter.update_check_run(
                    upstream,
                    int(existing),
                    status="completed",
                    conclusion=workflow.get("conclusion") or "neutral",
                )
                return int(existing)
        except RelayError as exc:
            log.warning("check run %s on %s: %s", name, upstream, exc)
            return f"failed: {exc}"
        return None

    def sweep(self) -> int:
        """Time out jobs in progress for over 6 h; report them to HUD and their check runs."""
        swept = self.state.sweep(self.clock())
        for job in swept:
            body = callback_of(job)
            log.warning("job %s timed out after 6 h in progress", job["key"])
            if body is None or self.allowlist is None:
                continue
            repo = job.get("repo", "")
            entry = self.allowlist.get(repo)
            if entry is None:
                continue
            workflow = dict(body.get("workflow") or {})
            workflow.update(status="completed", conclusion="timed_out")
            try:
                self._forward(
                    {**body, "workflow": workflow}, repo, entry, _float(job.get("queue_time")), None
                )
            except HudDown as exc:
                log.error("timed-out job %s not reported to HUD: %s", job["key"], exc)
            check_id = job.get("check_run_id")
            if check_id and self.adapter is not None:
                upstream = str(
                    ((body.get("payload") or {}).get("repository") or {}).get("full_name")
                    or self.config.upstream_repo
                )
                try:
                    self.adapter.update_check_run(
                        upstream, int(check_id), status="completed", conclusion="timed_out"
                    )
                except RelayError as exc:
                    log.warning("check run %s: %s", check_id, exc)
        return len(swept)


class HudDown(RelayError):
    """HUD did not accept a result after its retries (answer 502; the state is unchanged)."""


def default_hud_publisher(config: RelayConfig) -> HudPublisher | None:
    """dashboard_export's HUD publisher bound to the configured URL and bot key, if any."""
    if not (config.hud_url and config.hud_bot_key):
        return None
    from dashboard_export.publish import publish_hud

    url, key = config.hud_url, config.hud_bot_key
    return lambda envelope: publish_hud(envelope, url, key)


def _is_outage(exc: Exception) -> bool:
    """dashboard_export retries 5xx and network errors, then says "failed after N attempts";
    anything else (a 4xx, a body its schema refuses) would fail the same way again."""
    return "failed after" in str(exc)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
