"""Triage of a failed run: a finer class per failure, and the CRCR `triage_verdict` (pure).

Each failure's class comes from its message and the plan's reasons:

- `device-rule`: a Spyre rule refused the op or dtype (`backend_under_test.rules`);
- `precision`: a tolerance was exceeded (`assert_close`: "not close", "Mismatched
  elements"), unless nearly every element is off by as much as its value (a sign flip, a
  wrong op: `wrong_values`), which is no matter of tolerance;
- `related`: neither, but the plan selected the variant because the change touched what it
  runs (`op_match`, `impact_map` reasons);
- `unknown`: none of these.

Its wire category comes from the evidence the run holds, strongest first (`category_of`):

1. flaky (failed, passed on rerun) -> `flake`;
2. a Spyre rule refused it -> `backend`: the backend chose not to lower the op, even when
   the change led the test there; the fix is on our side;
3. it passes on the base torch without the change (A/B), with the same backend and device
   -> `upstream`, whether or not the plan related the variant to the change: the change is
   the only difference;
4. History saw it pass at an earlier upstream sha with the same backend (package, version,
   device), and it fails on the torch under test (`passed_before`, from the forensics
   window) -> `upstream`, even when it fails on the base torch too or History's baseline
   already had it failing: only upstream moved since, so an earlier upstream commit (in the
   window, before this change) broke it;
5. it fails on the base torch too, without the change (the A/B run's `base_status`), or
   History's baseline had it failing already (`pre-existing`), and History never saw it
   pass with this backend -> `backend`: the change is not what breaks it, and nothing shows
   upstream did;
6. the change was not tested (nothing of it could be applied) -> `unknown`: the run cannot
   pin the failure on it;
7. no A/B outcome, but the plan selected it for what the change touched -> `upstream`;
8. otherwise `unknown`. A tolerance miss alone says nothing about who moved: the change's
   numerics and our kernels read alike.

A run whose tests could not run (an infrastructure fault, a device that failed its health
probe) is `infra` (`crcr.infra_verdict`). The run's verdict takes the category most of its
new failures share (ties: upstream, backend, unknown), confidence `high` when all agree,
`medium` for a majority, `low` otherwise. `suspected_upstream` on an `upstream` verdict
names the commit: the culprit a bisect found (`with_culprit`, `spyre-ci bisect --run`), else
the first run where it failed. Shape and caps are pytorch/test-infra's relay's
(`utils/triage_verdict.py`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from contracts.forensics import FailureTriage, SuspectedCommit, TriageEvidence, TriageVerdict
from contracts.tested import Tested
from suites.model import Status

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


_MISMATCHED = re.compile(r"Mismatched elements: (\d+) / (\d+)")
_RELATIVE = re.compile(r"Greatest relative difference: (inf|nan|[0-9.eE+-]+)")


def wrong_values(message: str) -> bool:
    """Whether a comparison failure is no matter of tolerance: (nearly) every element differs
    and by as much as the values themselves (a sign flip, a wrong op), as assert_close's own
    figures say. Such a failure is not `precision`."""
    mismatched, relative = _MISMATCHED.search(message), _RELATIVE.search(message)
    if mismatched is None or relative is None or int(mismatched.group(2)) == 0:
        return False
    share = int(mismatched.group(1)) / int(mismatched.group(2))
    try:
        worst = float(relative.group(1))
    except ValueError:
        return False
    return share >= 0.9 and not worst < 1.0  # nan and inf count as wrong


def classify(message: str, related: bool) -> str:
    """The finer class of one failure (see the module's table)."""
    if _RULE.search(message):
        return DEVICE_RULE
    if _PRECISION.search(message) and not wrong_values(message):
        return PRECISION
    return RELATED if related else UNKNOWN


def category_of(
    failure_class: str,
    related: bool,
    classification: str | None = None,
    *,
    base_status: str | None = None,
    tested: Tested | None = None,
    passed_before: str | None = None,
) -> tuple[str, str]:
    """The wire category of one failure and why, from the strongest evidence the run holds
    (the module's list): `classification` new | pre-existing | flaky, `base_status` its
    outcome on the base torch without the change (None when it was not run there),
    `tested` the environment's verdict (None: not kept), `passed_before` the
    upstream sha where History last saw it pass with the same backend, when that is not the
    torch under test (None: never seen passing, or with another backend)."""
    if classification == "flaky":
        return "flake", "failed, then passed on rerun"
    if failure_class == DEVICE_RULE:
        return "backend", "a Spyre rule refused the op or dtype"
    on_base = _status(base_status)
    if on_base is False and tested != Tested.NOT_TESTED:
        return "upstream", f"passes without the change ({base_status} on the base torch)"
    if passed_before:
        where = " and on the base torch without the change" if on_base else ""
        return "upstream", (
            f"passed at upstream {passed_before[:12]} with the same backend, fails on the torch "
            f"under test{where}: an upstream commit since broke it"
        )
    if on_base is True:
        return "backend", f"fails without the change too ({base_status} on the base torch)"
    if tested == Tested.NOT_TESTED:
        return "unknown", "the change was not tested: the failure is the torch's own"
    if classification == "pre-existing":
        return "backend", "failing on the baseline before this change"
    if related:
        return "upstream", "selected for what the change touched (no run without the change)"
    return "unknown", "no run without the change and not related to it"


def _status(value: str | None) -> bool | None:
    """Whether an outcome status is a failure; None when there is none or it is unknown."""
    if not value:
        return None
    try:
        return Status(value).is_failure
    except ValueError:
        return None


class ChosenReason(Protocol):
    """A reason the plan gave for choosing a variant (`selector.Reason`)."""

    @property
    def heuristic(self) -> str: ...

    @property
    def score(self) -> float: ...


class Chosen(Protocol):
    """A variant the plan selected, with its reasons (`selector.Selected`)."""

    @property
    def id(self) -> str: ...

    @property
    def reasons(self) -> Sequence[ChosenReason]: ...


def related_ids(plan_selected: Iterable[Chosen]) -> frozenset[str]:
    """Ids the plan selected for a reason that the change touched them (op_match, impact_map)."""
    return frozenset(
        chosen.id
        for chosen in plan_selected
        if any(r.heuristic in RELATED_HEURISTICS and r.score > 0 for r in chosen.reasons)
    )


def triage(
    failure_id: str,
    message: str,
    related: bool,
    classification: str | None = None,
    *,
    base_status: str | None = None,
    tested: Tested | None = None,
    passed_before: str | None = None,
) -> FailureTriage:
    """Class, category and why of one failure (`category_of` for the evidence)."""
    failure_class = classify(message, related)
    category, why = category_of(
        failure_class,
        related,
        classification,
        base_status=base_status,
        tested=tested,
        passed_before=passed_before,
    )
    return FailureTriage(failure_id, failure_class, category, related, why)


_TIE_ORDER = {"upstream": 0, "backend": 1, "unknown": 2, "flake": 3, "infra": 4}


def run_verdict(
    failures: Sequence[FailureTriage],
    messages: Mapping[str, str],
    *,
    first_bad: str | None,
    job: str,
    version: str,
    analyzed_at: str | None = None,
    culprit: SuspectedCommit | None = None,
) -> TriageVerdict | None:
    """`workflow.triage_verdict` for a run with failures; None when it has none.

    `culprit`: the commit a bisect named (`with_culprit`); without one an `upstream`
    verdict suspects `first_bad`, the first run where it failed."""
    if not failures:
        return None
    counts = Counter(f.category for f in failures)
    category = min(counts, key=lambda c: (-counts[c], _TIE_ORDER[c]))
    share = counts[category] / len(failures)
    confidence = "high" if share == 1 else "medium" if share > 0.5 else "low"
    classes = Counter(f.failure_class for f in failures)
    whys = Counter(f.why for f in failures if f.category == category and f.why)
    summary = (
        f"{len(failures)} failure(s): "
        + ", ".join(f"{n} {c}" for c, n in sorted(classes.items()))
        + f"; {counts[category]} point to {category}"
        + (f" ({whys.most_common(1)[0][0]})" if whys else "")
    )
    chosen = [f for f in failures if f.category == category] or list(failures)
    verdict = TriageVerdict(
        category,
        confidence,
        summary[:SUMMARY_MAX],
        tuple(
            TriageEvidence(job[:SHORT_MAX], f.id[:SHORT_MAX], _excerpt(messages.get(f.id)))
            for f in chosen[:EVIDENCE_MAX]
        ),
        (version or "unknown")[:SHORT_MAX],
    )
    if category == "upstream" and first_bad and _COMMIT.fullmatch(first_bad):
        reason = f"first run where it failed; {counts[category]} failure(s) point there"
        verdict = replace(verdict, suspected_upstream=SuspectedCommit(first_bad, reason))
    if culprit is not None:
        verdict = with_culprit(verdict, culprit.commit, culprit.reason)
    if analyzed_at:
        verdict = replace(verdict, analyzed_at=analyzed_at)
    # The relay drops a verdict over its byte cap whole: wide characters can pass it.
    while (
        len(json.dumps(verdict.to_json()).encode("utf-8")) > RAW_MAX and len(verdict.evidence) > 1
    ):
        verdict = replace(verdict, evidence=verdict.evidence[:-1])
    return verdict


def with_culprit(
    verdict: TriageVerdict, commit: str, reason: str = "", confidence: str | None = None
) -> TriageVerdict:
    """The verdict naming `commit` as `suspected_upstream.commit`: the culprit a bisect found
    by replaying upstream's commits alone (it replaces the first-bad suspicion). An
    `upstream` or `unknown` verdict becomes `upstream` with it (and the bisect's
    `confidence`, when given); a `backend`, `flake` or `infra` verdict rests on stronger
    evidence (a rule refusal, the base torch failing too, a rerun passing, a fault) and comes
    back unchanged: the relay drops a suspected commit on any category but upstream."""
    if not _COMMIT.fullmatch(commit):
        raise ValueError(f"culprit commit {commit!r}: not a hex git sha (7 to 40 digits)")
    if verdict.category not in ("upstream", "unknown"):
        return verdict
    said = reason.strip()
    summary = verdict.summary
    if said:
        said = said if said.startswith("bisect:") else f"bisect: {said}"
        summary = f"{summary}; {said}".lstrip("; ")[:SUMMARY_MAX]
    return replace(
        verdict,
        category="upstream",
        confidence=verdict.confidence if confidence is None else confidence,
        summary=summary,
        suspected_upstream=SuspectedCommit(commit, said[:REASON_MAX]),
    )


def _excerpt(message: str | None) -> str:
    text = (message or "").strip() or "(no message)"
    return text[:EXCERPT_MAX]
