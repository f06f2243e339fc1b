"""Stage 2 plug-ins. Each scores variants in [-1, 1] with a reason; `REGISTRY` names them.

A new heuristic is a class with `name` and `score(ctx)` (see `base.Heuristic`); add it to
`REGISTRY` here, or pass it to `plan(..., heuristics=...)`.
"""

from __future__ import annotations

from selector.heuristics.base import Heuristic, RetrieveContext, Score
from selector.heuristics.change import (
    ImpactMapMatch,
    OpMatch,
    TemplateChanged,
    UpstreamTestChanged,
    WatchGlobs,
)
from selector.heuristics.record import CoFailure, DefinitionChanged, NewVariant, PreviouslyFailing

REGISTRY: dict[str, Heuristic] = {
    h.name: h
    for h in (
        WatchGlobs(),
        OpMatch(),
        TemplateChanged(),
        UpstreamTestChanged(),
        DefinitionChanged(),
        CoFailure(),
        PreviouslyFailing(),
        NewVariant(),
        ImpactMapMatch(),
    )
}

__all__ = ["REGISTRY", "Heuristic", "RetrieveContext", "Score"]
