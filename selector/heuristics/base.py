"""The heuristic plug-in boundary: a name and a `score(context)` over variant ids."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from selector.history import History
from selector.impact import ImpactMap
from selector.index import InventoryIndex
from selector.scout import ChangeFacts


@dataclass(frozen=True)
class Score:
    """One heuristic's opinion of one variant: in [-1, 1], with the reason in words."""

    value: float
    reason: str

    def __post_init__(self) -> None:
        if not -1.0 <= self.value <= 1.0:
            raise ValueError(f"score {self.value} is outside [-1, 1] ({self.reason})")


@dataclass(frozen=True)
class RetrieveContext:
    """Everything a heuristic may read. Heuristics are pure: same context, same scores."""

    facts: ChangeFacts
    index: InventoryIndex
    history: History
    # id -> fingerprint of the inventory the last run used (None: not known)
    previous: Mapping[str, str] | None = None
    impact: ImpactMap | None = None


class Heuristic(Protocol):
    """A retrieval plug-in. Returns only the variants it has an opinion on (sparse)."""

    name: str

    def score(self, ctx: RetrieveContext) -> Mapping[str, Score]: ...
