"""CRCR fan-out: forward upstream events to allowlisted repositories as repository_dispatch.

The webhook writes each forwardable delivery to the fan-out outbox (a Redis Stream) in the
same atomic step as the intake queue; `Fanout.run_once` sends it to every allowlisted repo
and records each dispatch (DISPATCHED) so callbacks can follow. A repo already dispatched
for a delivery is skipped, so re-processing an entry after a crash sends nothing twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from relay.allowlist import Allowlist, AllowlistFile
from relay.config import RelayConfig
from relay.crcr_state import CrcrState
from relay.events import RelayError, TriggerEvent
from relay.github import GitHubAdapter, GitHubUnavailable
from relay.intake import RedisIntake

log = logging.getLogger("relay.fanout")

FANOUT_STREAM = "spyre-ci:fanout"
FANOUT_GROUP = "fanout"
FORWARDED_PR_ACTIONS = ("opened", "reopened", "synchronize", "closed")
FORWARDED_EVENTS = ("push", "pull_request", "check_run", "check_suite")


def forward_event(
    event_name: str, payload: Any, delivery_id: str, config: RelayConfig
) -> TriggerEvent | None:
    """The outbox record for a delivery the upstream relay would forward, else None.

    Forwarded, as upstream does: pushes, check runs and suites, and pull requests opened,
    reopened, synchronized or closed (labelled only with a `ciflow/crcr/*` label), from the
    upstream repository only.
    """
    if event_name not in FORWARDED_EVENTS or not isinstance(payload, Mapping):
        return None
    repo = payload.get("repository")
    if not isinstance(repo, Mapping) or repo.get("full_name") != config.upstream_repo:
        return None
    if event_name == "pull_request":
        action = payload.get("action")
        label = (
            (payload.get("label") or {}).get("name", "")
            if isinstance(payload.get("label"), Mapping)
            else ""
        )
        if action not in FORWARDED_PR_ACTIONS and not (
            action == "labeled" and str(label).startswith("ciflow/crcr/")
        ):
            return None
    return TriggerEvent(
        kind="forward",
        delivery_id=delivery_id,
        repo=config.upstream_repo,
        head_sha="",
        files_complete=False,
        upstream_event=event_name,
        payload=payload,
    )


class Fanout:
    """Consumes the fan-out outbox and dispatches to allowlisted repositories."""

    def __init__(
        self,
        outbox: RedisIntake,
        adapter: GitHubAdapter,
        allowlist: Allowlist | AllowlistFile,
        state: CrcrState,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.outbox = outbox
        self.adapter = adapter
        self.allowlist = allowlist
        self.state = state
        self.clock = clock

    def run_once(self, consumer: str, block_ms: int = 0) -> int:
        """Handle one outbox entry (waiting up to `block_ms`); returns dispatches sent.

        The entry is acknowledged once every repository got it or refused it for good; a
        GitHub outage leaves it pending, to be reclaimed and retried.
        """
        claimed = self.outbox.claim(consumer, block_ms)
        if claimed is None:
            return 0
        event = claimed.event
        event_type = event.upstream_event or event.kind
        client_payload = {
            "event_type": event_type,
            "delivery_id": claimed.delivery_id,
            "payload": dict(event.payload),
        }
        sent = 0
        retry = False
        for entry in self.allowlist:
            if self.state.dispatched(claimed.delivery_id, entry.repo):
                continue
            try:
                self.adapter.dispatch(entry.repo, event_type, client_payload)
            except GitHubUnavailable as exc:
                log.warning(
                    "dispatch %s to %s: %s (will retry)", claimed.delivery_id, entry.repo, exc
                )
                retry = True
                continue
            except RelayError as exc:
                log.error("dispatch %s to %s refused: %s", claimed.delivery_id, entry.repo, exc)
                continue
            self.state.record_dispatch(claimed.delivery_id, entry.repo, event_type, self.clock())
            sent += 1
        if not retry:
            self.outbox.ack(claimed)
        return sent
