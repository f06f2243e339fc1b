"""From a delivery the relay accepted to the RunRequest of its run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from contracts.event import TriggerEvent
from workflows.run import run_folder, run_model
from workflows.settings import Settings


def request_for_event(
    event: TriggerEvent,
    out_root: Path,
    inventory: Path,
    *,
    specs: tuple[str, ...] = (),
    shards: int = 1,
    impact_map: str | None = None,
    settings: Settings,
) -> run_model.RunRequest:
    """Runs are keyed by delivery: the same delivery always maps to the same run id and folder.

    The diff the event brings (GitHub compare patches, `relay.changes.complete_files`) becomes
    the run's diff; the event stored with the run does not repeat it. `settings`: the
    intake's (traces, the held-back share)."""
    run_id = run_folder.run_id_for(event)
    return run_model.RunRequest(
        run_id=run_id,
        event=replace(event, diff_text=None),
        out_dir=str(run_folder.run_dir(out_root, run_id)),
        inventory=str(inventory),
        diff_text=event.diff_text,
        diff_source=(
            f"GitHub compare {event.base_sha[:12]}...{event.head_sha[:12]}"
            if event.diff_text and event.base_sha
            else ""
        ),
        specs=specs,
        shards=max(1, shards),
        impact_map=impact_map,
        mass_failure_share=settings.mass_failure_share,
        record_traces=settings.record_traces,
        trace_share=settings.trace_share,
    )
