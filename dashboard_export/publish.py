"""Thin HTTP publishers: HUD `POST /crcr/results` and the CRCR relay callback.

Builders decide what to send; these only send it. HUD's contract: header
`x-hud-internal-bot`, 10 s timeout, body at most 2 MB (else 413). Every POST follows the one
retry policy (`dashboard_export.retry`): 408, 429, 5xx and network errors are tried again,
honoring `Retry-After`, up to the cap, then raised as `RetriesExhausted` (a
PublishUnavailable); any other 4xx is raised at once as PublishRefused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import requests

from dashboard_export import ExportError, PublishRefused, PublishUnavailable, retry
from dashboard_export.crcr import HUD_BODY_LIMIT, callback_body, encode, envelope_for, fit_body
from dashboard_export.model import RunRecord
from dashboard_export.retry import RetryPolicy
from dashboard_export.validation import validate

HUD_PATH = "/crcr/results"
HUD_AUTH_HEADER = "x-hud-internal-bot"
TIMEOUT_S = 10.0
HUD_DUPLICATE = 409  # HUD's answer to a write on a record that is final already
_BODY_SHOWN = 500  # characters of an error response quoted in an ExportError


@dataclass(frozen=True)
class Delivery:
    """What a publisher sent and what came back."""

    url: str
    status: int
    body: str
    attempts: int
    bytes_sent: int
    omitted_failed_tests: int = 0


def post_json(
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    session: requests.Session | None = None,
    timeout: float = TIMEOUT_S,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    what: str = "POST",
) -> Delivery:
    """POST compact JSON under the retry policy (`dashboard_export.retry`).

    Raises PublishRefused on a 4xx other than 408 and 429, and `retry.RetriesExhausted` (a
    PublishUnavailable) once the retries are spent. `sleep` is injectable so tests check
    the waits without waiting them.
    """
    data = encode(body)
    http = session or requests.Session()
    all_headers = {"Content-Type": "application/json", **headers}

    def attempt() -> requests.Response:
        try:
            response = http.post(url, data=data, headers=all_headers, timeout=timeout)
        except requests.RequestException as exc:
            raise PublishUnavailable(f"network error: {exc.__class__.__name__}: {exc}") from exc
        if response.status_code < 400:
            return response
        shown = f"{response.status_code}: {response.text[:_BODY_SHOWN]}"
        if retry.retryable(response.status_code):
            raise PublishUnavailable(
                shown, retry.retry_after_s(response.headers.get("Retry-After"))
            )
        raise PublishRefused(f"{what} {url} answered {shown}", response.status_code)

    response, attempts = retry.run(attempt, what=f"{what} {url}", policy=policy, sleep=sleep)
    return Delivery(url, response.status_code, response.text, attempts, len(data))


def publish_hud(
    envelope: Mapping[str, Any],
    hud_url: str,
    bot_key: str,
    *,
    session: requests.Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
    require_https: bool = True,
    policy: RetryPolicy | None = None,
) -> Delivery:
    """POST one relay-to-HUD envelope to `{hud_url}/crcr/results`.

    The body is trimmed to HUD's 2 MB cap (failed tests dropped behind an explicit marker)
    and validated first: an invalid or oversized body is never sent.
    """
    if not bot_key:
        raise ExportError("HUD bot key is empty; set HUD_BOT_KEY (the x-hud-internal-bot secret)")
    if require_https and not hud_url.startswith("https://"):
        raise ExportError(f"HUD_API_URL must be https, not {hud_url!r}")
    fitted, omitted = fit_body(envelope, HUD_BODY_LIMIT)
    validate("hud_envelope", fitted)
    delivery = post_json(
        hud_url.rstrip("/") + HUD_PATH,
        fitted,
        {HUD_AUTH_HEADER: bot_key},
        session=session,
        policy=policy,
        sleep=sleep,
        what="HUD",
    )
    return replace(delivery, omitted_failed_tests=omitted)


def publish_run_to_hud(
    record: RunRecord,
    hud_url: str,
    bot_key: str,
    *,
    status: str = "completed",
    session: requests.Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
    require_https: bool = True,
    policy: RetryPolicy | None = None,
) -> Delivery:
    """Build the run's envelope and publish it (HUD keeps one row per dynamoKey).

    HUD writes a record once it is final: re-publishing a completed run is answered 409,
    which here is a success that changed nothing (`Delivery.status` 409), as it is for the
    reference relay."""
    envelope = envelope_for(record, status)
    try:
        return publish_hud(
            envelope,
            hud_url,
            bot_key,
            session=session,
            sleep=sleep,
            require_https=require_https,
            policy=policy,
        )
    except PublishRefused as exc:
        if exc.status != HUD_DUPLICATE:
            raise
        fitted, omitted = fit_body(envelope, HUD_BODY_LIMIT)
        url = hud_url.rstrip("/") + HUD_PATH
        return Delivery(url, exc.status, str(exc), 1, len(encode(fitted)), omitted)


def publish_callback(
    record: RunRecord,
    callback_url: str,
    token: str,
    *,
    status: str = "completed",
    session: requests.Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
    policy: RetryPolicy | None = None,
) -> Delivery:
    """POST the run's CRCR callback to the relay with `Authorization: Bearer <token>`.

    The relay answers 400 to a duplicate or out-of-order callback; that is surfaced, since
    only the caller knows whether the state was already reported.
    """
    if not token:
        raise ExportError("callback token is empty; pass the OIDC token the relay verifies")
    if not record.ci_run_id:
        raise ExportError(
            f"run {record.run_id}: no CI run id (GITHUB_RUN_ID or BUILDKITE_BUILD_ID when the "
            "run was exported); the reference relay keys a job by the CI's run id "
            "(workflow.run_id) and answers 500 to anything else"
        )
    body, omitted = fit_body(callback_body(record, status))
    validate("callback", body)
    delivery = post_json(
        callback_url,
        body,
        {"Authorization": f"Bearer {token}"},
        session=session,
        policy=policy,
        sleep=sleep,
        what="CRCR callback",
    )
    return replace(delivery, omitted_failed_tests=omitted)
