"""The trigger-event contract: one upstream change that may need a run, and its JSON codec.

relay normalizes deliveries into a `TriggerEvent`; workflows plans and records runs from it;
selector reads it as a ChangeSet; dashboard_export carries it in every RunRecord. The JSON
form (`to_json` / `from_json`, `contracts.codec`) is what the intake queue, task arguments and
run records hold.

`diff_text` is transient: the consumer that asks GitHub's compare API (`relay.changes`) puts
the range's patches there, and the intake hands them to the run as its diff
(`workflows.drivers.intake_bridge`), so run records do not carry them. It is written to JSON only
when set, so readers of the older form are unaffected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.codec import NONE, Record, wire


@dataclass(frozen=True)
class ChangedFile:
    path: str
    status: str  # added | modified | removed | renamed
    previous_path: str | None = None


@dataclass(frozen=True)
class TriggerEvent(Record):
    """One upstream change that may need a run, whatever way it arrived."""

    kind: str  # push | pull_request | nightly | periodic | rerun
    delivery_id: str
    repo: str
    head_sha: str
    base_sha: str | None = None
    ref: str | None = None
    pr_number: int | None = None
    files: tuple[ChangedFile, ...] = ()
    files_complete: bool = True
    truncated: bool = False
    commit_messages: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    rerun: str | None = None  # "failed" (check_run) | "full" (check_suite) | None
    source: str = "github"  # github | crcr | cli
    upstream_event: str = ""  # the X-GitHub-Event that carried it
    payload: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # The unified diff of base...head when one is known (GitHub compare patches).
    diff_text: str | None = field(default=None, compare=False, repr=False, metadata=wire(omit=NONE))

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)
