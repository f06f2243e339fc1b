"""The one retry policy of everything spyre-ci publishes: the CRCR callback, HUD, GitHub.

An answer worth trying again is 408 (request timeout), 429 (rate limited) or a 5xx, or no
answer at all (a network error); any other 4xx is a refusal and is never retried, since the
same request fails the same way. A `Retry-After` header (seconds, or an HTTP date) is honored:
the next attempt never starts sooner. Without one the waits grow 1, 2, 4, ... s. Each wait
gets up to a quarter more at random, so many senders refused at once do not come back at
once. Attempts stop at an overall cap (`SPYRE_CI_PUBLISH_RETRY_S`, default 30 s): a wait
that would pass it is not begun, and the caller gets `RetriesExhausted`, an outage
(`contracts.errors.Unavailable`, exit code 3), with what the endpoint said last.

A publisher hands `run` one attempt as a callable that returns, or raises
`contracts.errors.Unavailable` for an answer worth retrying (its `retry_after` attribute, in
seconds, when the endpoint named one) or any other exception for a refusal.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

from contracts.errors import Unavailable
from dashboard_export import ExportError, PublishUnavailable

T = TypeVar("T")

CAP_ENV = "SPYRE_CI_PUBLISH_RETRY_S"
DEFAULT_CAP_S = 30.0
RETRY_STATUSES = frozenset({408, 429})


def retryable(status: int) -> bool:
    """Whether an HTTP answer is worth trying again: 408, 429 or a 5xx."""
    return status in RETRY_STATUSES or 500 <= status <= 599


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """A `Retry-After` header in seconds from now: delta-seconds or an HTTP date (RFC 9110
    10.2.3); None when absent or unreadable. A date in the past is 0."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:  # an HTTP date is always GMT
        moment = moment.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0.0, moment.timestamp() - current)


class RetriesExhausted(PublishUnavailable):
    """An endpoint kept answering 408, 429, 5xx or nothing until the retry cap: an outage.
    `attempts` is how many were made; `last` the last attempt's error."""

    def __init__(self, message: str, attempts: int, last: Unavailable) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last = last


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often a publish is tried (see the module doc)."""

    cap_s: float = DEFAULT_CAP_S  # no attempt starts later than this after the first
    first_delay_s: float = 1.0
    max_delay_s: float = 16.0  # without Retry-After; a server's Retry-After may ask for more
    jitter: float = 0.25  # share of a wait added at random, never taken off
    max_attempts: int = 10

    def __post_init__(self) -> None:
        if not self.cap_s >= 0:
            raise ExportError(f"retry cap must be >= 0 seconds, not {self.cap_s!r}")
        if self.max_attempts < 1:
            raise ExportError(f"retry attempts must be >= 1, not {self.max_attempts}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetryPolicy:
        """The default policy, its cap from `SPYRE_CI_PUBLISH_RETRY_S` when set."""
        env = os.environ if env is None else env
        raw = env.get(CAP_ENV, "").strip()
        if not raw:
            return cls()
        try:
            cap = float(raw)
        except ValueError:
            raise ExportError(f"{CAP_ENV}={raw!r}: want seconds, e.g. 30") from None
        if not cap >= 0:
            raise ExportError(f"{CAP_ENV}={raw!r}: want seconds >= 0")
        return cls(cap_s=cap)

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """The wait after failed attempt number `attempt` (1 = the first)."""
        if retry_after is not None:
            base = max(0.0, retry_after)
        else:
            base = min(self.max_delay_s, self.first_delay_s * 2 ** (attempt - 1))
        return base + rng.uniform(0.0, self.jitter * base)


_RNG = random.Random()


def run(
    call: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """`call()` until it returns, under `policy` (default `RetryPolicy.from_env()`);
    returns (its value, attempts made).

    Anything but `contracts.errors.Unavailable` goes straight through (a refusal is never
    retried). Time spent counts what `sleep` was asked to wait, so an injected `sleep` that
    returns at once still meets the cap as a real one would.
    """
    policy = RetryPolicy.from_env() if policy is None else policy
    rng = _RNG if rng is None else rng
    started = clock()
    asked = 0.0  # waits asked of `sleep`
    slept = 0.0  # time `sleep` really took
    attempts = 0
    while True:
        attempts += 1
        try:
            return call(), attempts
        except Unavailable as exc:
            last = exc
        hint = getattr(last, "retry_after", None)
        retry_after = float(hint) if isinstance(hint, int | float) else None
        spent = clock() - started - slept + asked
        wait = policy.delay(attempts, retry_after, rng)
        why = ""
        if attempts >= policy.max_attempts:
            why = f"{policy.max_attempts} attempts"
        elif spent + wait > policy.cap_s:
            asked_for = f"asked to retry after {retry_after:g} s; " if retry_after else ""
            why = f"{asked_for}the retry cap is {policy.cap_s:g} s ({CAP_ENV})"
        if why:
            raise RetriesExhausted(
                f"{what} failed after {attempts} attempt{'s' if attempts != 1 else ''}; "
                f"last: {last} ({why})",
                attempts,
                last,
            ) from last
        before = clock()
        sleep(wait)
        slept += clock() - before
        asked += wait
