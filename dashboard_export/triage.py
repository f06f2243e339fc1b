"""Triage of a failed run: a finer class per failure, and the CRCR `triage_verdict` (pure).

Per new failure, from its message and the plan's reasons:

- `device-rule`: a Spyre rule refused the op or dtype (`backend_under_test.rules`)
  -> `backend`;
- `precision`: a tolerance was exceeded (`assert_close`: "not close", "Mismatched
  elements") -> `upstream` when related, else `backend`;
- `related`: neither, but the plan selected the variant because the change touched what it
  runs (`op_match`, `impact_map` reasons) -> `upstream`;
- `unknown`: none of these -> `unknown`.

A flaky failure (failed, passed on rerun) is `flake`; a run whose tests could not run is
`infra` (`crcr.infra_verdict`). A rule refusal is the backend's by definition (the backend
chose not to lower it), even when the change touched the op: the fix is on our side. A
tolerance miss on an op the change touched is the change's numerics, one the change did not
touch is ours (our kernels drifted, or the tolerance is ours to set).

The run's verdict takes the category most new failures share (ties: upstream, backend,
unknown), confidence `high` when all agree, `medium` for a majority, `low` otherwise;
`suspected_upstream.commit` is the first-bad sha when the category is `upstream`, the bisect's
culprit once one is found (`with_culprit`, `spyre-ci bisect --run`). Shape and
caps are pytorch/test-infra's relay's (`utils/triage_verdict.py`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEVICE_RULE = "device-rule"
PRECISION = "precision"
RELATED = "related"
UNKNOWN = "unknown"
CLASSES = (DEVICE_RULE, PRECISION, RELATED, UNKNOWN)
CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")

# Heuristics whose reason says the change touched what the variant runs.
RELATED_HEURISTICS = frozenset({"op_match", "impact_map"})

_RULE = re.compile(
    r"spyre (?:does not support dtype|cannot lower aten::)|run without Spyre rules",
    re.IGNORECASE,
)
_PRECISION = re.compile(
    r"(?:Tensor-likes|Scalars) are not (?:close|equal)|Mismatched elements|"
    r"Greatest (?:absolute|relative) difference",
)
_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")

# The reference relay's caps (it cuts longer fields; we cut first so what we send is shown).
SUMMARY_MAX = 1000
EXCERPT_MAX = 1000
EVIDENCE_MAX = 10
SHORT_MAX = 200
REASON_MAX = 300
RAW_MAX = 16 * 1024  # bytes of the whole verdict


@dataclass(frozen=True)
class FailureTriage:
    """One failure's class and the category it maps to."""

    id: str
    failure_class: str
    category: str
    related: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "class": self.failure_class,
            "category": self.category,
            "related": self.related,
        }


def classify(message: str, related: bool) -> str:
    """The finer class of one failure (see the module's table)."""
    if _RULE.search(message):
        return DEVICE_RULE
    if _PRECISION.search(message):
        return PRECISION
    return RELATED if related else UNKNOWN


def category_of(failure_class: str, related: bool, classification: str | None = None) -> str:
    """The wire category of one failure; a flaky one is `flake` whatever its message."""
    if classification == "flaky":
        return "flake"
    if failure_class == DEVICE_RULE:
        return "backend"
    if failure_class == PRECISION:
        return "upstream" if related else "backend"
    if failure_class == RELATED:
        return "upstream"
    return "unknown"


def related_ids(plan_selected: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Ids the plan selected for a reason that the change touched them (op_match, impact_map)."""
    return frozenset(
        str(entry["id"])
        for entry in plan_selected
        if any(
            r.get("heuristic") in RELATED_HEURISTICS and float(r.get("score", 1)) > 0
            for r in entry.get("reasons", ())
        )
    )


def triage(
    failure_id: str, message: str, related: bool, classification: str | None = None
) -> FailureTriage:
    """Class and category of one failure."""
    failure_class = classify(message, related)
    return FailureTriage(
        failure_id, failure_class, category_of(failure_class, related, classification), related
    )


_TIE_ORDER = {"upstream": 0, "backend": 1, "unknown": 2, "flake": 3, "infra": 4}


def run_verdict(
    failures: Sequence[FailureTriage],
    messages: Mapping[str, str],
    *,
    first_bad: str | None,
    job: str,
    version: str,
    analyzed_at: str | None = None,
) -> dict[str, Any] | None:
    """`workflow.triage_verdict` for a run with failures; None when it has none."""
    if not failures:
        return None
    counts = Counter(f.category for f in failures)
    category = min(counts, key=lambda c: (-counts[c], _TIE_ORDER[c]))
    share = counts[category] / len(failures)
    confidence = "high" if share == 1 else "medium" if share > 0.5 else "low"
    classes = Counter(f.failure_class for f in failures)
    summary = (
        f"{len(failures)} failure(s): "
        + ", ".join(f"{n} {c}" for c, n in sorted(classes.items()))
        + f"; {counts[category]} point to {category}"
    )
    chosen = [f for f in failures if f.category == category] or list(failures)
    evidence = [
        {"job": job[:SHORT_MAX], "test": f.id[:SHORT_MAX], "excerpt": _excerpt(messages.get(f.id))}
        for f in chosen[:EVIDENCE_MAX]
    ]
    verdict: dict[str, Any] = {
        "schema_version": 1,
        "category": category,
        "confidence": confidence,
        "summary": summary[:SUMMARY_MAX],
        "evidence": evidence,
        "analyzer": {"name": "spyre-ci", "version": (version or "unknown")[:SHORT_MAX]},
    }
    if category == "upstream" and first_bad and _COMMIT.fullmatch(first_bad):
        verdict["suspected_upstream"] = {
            "commit": first_bad,
            "reason": f"first run where it failed; {counts[category]} failure(s) point there",
        }
    if analyzed_at:
        verdict["analyzed_at"] = analyzed_at
    # The relay drops a verdict over its byte cap whole: wide characters can pass it.
    while len(json.dumps(verdict).encode("utf-8")) > RAW_MAX and len(evidence) > 1:
        evidence.pop()
    return verdict


def with_culprit(
    verdict: Mapping[str, Any], commit: str, reason: str, confidence: str
) -> dict[str, Any]:
    """`verdict` with the bisect's culprit commit: the failure reproduced on upstream's
    commits alone, so the category is `upstream`, `suspected_upstream.commit` that commit,
    and the confidence the bisect's."""
    if not _COMMIT.fullmatch(commit):
        return dict(verdict)
    summary = f"{verdict.get('summary', '')}; bisect: {reason}".lstrip("; ")
    return {
        **verdict,
        "category": "upstream",
        "confidence": confidence,
        "summary": summary[:SUMMARY_MAX],
        "suspected_upstream": {"commit": commit, "reason": f"bisect: {reason}"[:REASON_MAX]},
    }


def _excerpt(message: str | None) -> str:
    text = (message or "").strip() or "(no message)"
    return text[:EXCERPT_MAX]
