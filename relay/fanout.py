"""CRCR fan-out: what the reference relay does with upstream events, off the request path.

The webhook writes each delivery the relay acts on to the fan-out outbox (a Redis Stream) in
the same atomic step as the intake queue; `Fanout.run_once` then, as the reference does:

- pushes and pull requests (opened, reopened, synchronize, closed): a `repository_dispatch`
  to every allowlisted repo, recording each dispatch (DISPATCHED) so callbacks can follow,
  and the check-run-wanted flag of L3 repos whose `ciflow/crcr/<device>` label is already on
  the PR (a reopen fires no new `labeled`). A repo already dispatched is skipped, so
  re-processing an entry after a crash sends nothing twice; so is one whose allowlist
  `events` leave out `pull_request` (a nightly-only repository).
- `pull_request` `labeled` `ciflow/crcr/<device>`: no dispatch; the device's L3 repos want
  check runs on that head sha, and jobs that already reported get theirs.
- `check_run` / `check_suite` `rerequested`: re-runs the downstream workflow run behind our
  check run (failed jobs; for a suite, every job). Other actions are not acted on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from contracts.event import TriggerEvent
from relay.allowlist import Allowlist, AllowlistFile
from relay.callback import CallbackService
from relay.config import RelayConfig
from relay.crcr_state import CrcrState
from relay.events import RelayError, RelayUnavailable
from relay.github import GitHubAdapter, GitHubUnavailable
from relay.intake import Claimed, RedisIntake

log = logging.getLogger("relay.fanout")

FANOUT_STREAM = "spyre-ci:fanout"
FANOUT_GROUP = "fanout"
FORWARDED_PR_ACTIONS = ("opened", "reopened", "synchronize", "closed")
FORWARDED_EVENTS = ("push", "pull_request", "check_run", "check_suite")


def forward_event(
    event_name: str, payload: Any, delivery_id: str, config: RelayConfig
) -> TriggerEvent | None:
    """The outbox record for a delivery the reference relay acts on, else None.

    From the upstream repository only: pushes, pull requests opened, reopened, synchronized
    or closed, or labelled `ciflow/crcr/*`, and check runs and suites re-requested.
    """
    if event_name not in FORWARDED_EVENTS or not isinstance(payload, Mapping):
        return None
    repo = payload.get("repository")
    if not isinstance(repo, Mapping) or repo.get("full_name") != config.upstream_repo:
        return None
    if event_name in ("check_run", "check_suite") and payload.get("action") != "rerequested":
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
        callbacks: CallbackService | None = None,
    ) -> None:
        self.outbox = outbox
        self.adapter = adapter
        self.allowlist = allowlist
        self.state = state
        self.clock = clock
        self.callbacks = callbacks

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
        payload = event.payload
        if self.callbacks is not None and (
            event_type in ("check_run", "check_suite")
            or (event_type == "pull_request" and payload.get("action") == "labeled")
        ):
            return self._act(claimed, event_type)
        client_payload = {
            "event_type": event_type,
            "delivery_id": claimed.delivery_id,
            "payload": dict(payload),
        }
        found = payload.get("pull_request")
        pr: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        head = str((pr.get("head") or {}).get("sha") or "")
        labels = tuple(
            str(label.get("name", ""))
            for label in pr.get("labels") or ()
            if isinstance(label, Mapping)
        )
        sent = 0
        retry = False
        for entry in self.allowlist:
            if not entry.takes_part(event_type):
                continue  # e.g. a nightly-only repository: no dispatches
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
            if entry.level == "L3" and head and entry.wants_check_run(labels):
                self.state.mark_check_run_wanted(head, entry.repo)
            sent += 1
        if not retry:
            self.outbox.ack(claimed)
        return sent

    def _act(self, claimed: Claimed, event_type: str) -> int:
        """A label or a re-run request: act on it; a GitHub or Redis outage leaves it pending."""
        assert self.callbacks is not None
        payload = claimed.event.payload
        try:
            if event_type == "pull_request":
                done = len(self.callbacks.label_added(payload))
            else:
                done = len(self.callbacks.rerequested(event_type, payload))
        except RelayUnavailable as exc:
            log.warning("%s %s: %s (will retry)", event_type, claimed.delivery_id, exc)
            return 0
        except RelayError as exc:
            log.error("%s %s refused: %s", event_type, claimed.delivery_id, exc)
            done = 0
        self.outbox.ack(claimed)
        return done
