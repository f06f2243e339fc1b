"""History's run summary: `contracts.run_summary` (dashboard_export reads it too). This name
is kept for `workflows.run.pipeline` and `workflows.run.finishing`, which import it from
here while they are reworked; everything else imports `contracts.run_summary`."""

from contracts.run_summary import (
    ForensicsNote,
    PlanFacts,
    RunResults,
    RunSummary,
    UnderTestNote,
)

__all__ = [
    "ForensicsNote",
    "PlanFacts",
    "RunResults",
    "RunSummary",
    "UnderTestNote",
]
