"""From a delivery the relay accepted to the RunRequest of its run."""

from __future__ import annotations

from pathlib import Path

from contracts.event import TriggerEvent
from workflows import pipeline


def request_for_event(
    event: TriggerEvent,
    out_root: Path,
    inventory: Path,
    *,
    specs: tuple[str, ...] = (),
    shards: int = 1,
    impact_map: str | None = None,
) -> pipeline.RunRequest:
    """Runs are keyed by delivery: the same delivery always maps to the same run id and folder."""
    from workflows.settings import Settings

    run_id = pipeline.run_id_for(event)
    return pipeline.RunRequest(
        run_id=run_id,
        event=event.to_json(),
        out_dir=str(pipeline.run_dir(out_root, run_id)),
        inventory=str(inventory),
        specs=specs,
        shards=max(1, shards),
        impact_map=impact_map,
        mass_failure_share=Settings.from_env().mass_failure_share,
    )
