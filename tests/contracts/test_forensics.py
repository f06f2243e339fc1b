"""A run's forensics as one set of records, written as the objects the files always held."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts.forensics import (
    BisectAnswer,
    FailureForensics,
    FailureTriage,
    SuspectedCommit,
    TriageEvidence,
    TriageVerdict,
)

A, B = "a" * 40, "b" * 40
RECORDED = Path(__file__).parents[1] / "dashboard_export" / "data" / "recorded_run"


def _recorded() -> dict[str, Any]:
    """The forensics of a recorded run.json (forensics.json holds them too, keys sorted)."""
    run = json.loads((RECORDED / "run.json").read_text())
    return {"failures": run["forensics"], "triage_verdict": run["triage_verdict"]}


def test_recorded_entries_and_verdict_read_typed_and_write_the_same_text() -> None:
    found = _recorded()
    entries = {k: FailureForensics.from_json(v) for k, v in found["failures"].items()}
    glu = entries["tiny::compare_cpu::nn.functional.glu::float32"]
    assert (glu.last_good_sha, glu.first_bad_sha, glu.passed_before) == (A, B, A)
    assert glu.triage == FailureTriage(glu.id, "precision", "upstream", True, glu.triage.why)
    assert glu.bisect is not None and glu.bisect.outcome == "culprit" and glu.bisectable
    assert glu.bisect.extra["culprit"]["sha"] == B  # the culprit as the bisect wrote it
    for key, entry in entries.items():
        assert json.dumps(entry.to_json()) == json.dumps(found["failures"][key])
    verdict = TriageVerdict.from_json(found["triage_verdict"])
    assert verdict.suspected_upstream is not None and verdict.suspected_upstream.commit == B
    assert json.dumps(verdict.to_json()) == json.dumps(found["triage_verdict"])


@pytest.mark.parametrize(
    "entry",
    [
        # as History's rows held them before `passed_before` was kept
        {
            "id": "v",
            "last_good_sha": None,
            "first_bad_sha": "",
            "last_good_run": None,
            "first_bad_run": "push-1",
            "compare_url": None,
            "class": "device-rule",
            "category": "backend",
            "related": True,
            "why": "a Spyre rule refused the op or dtype",
        },
        {"id": "w", "last_good_sha": A, "first_bad_sha": B},  # a window without triage
        {"id": "x", "bisect": {"summary": "culprit 3333333", "confidence": "medium"}},
        {"id": "y", "bisect": "not an answer", "from_a_newer_version": [1]},
    ],
)
def test_an_entry_missing_keys_or_with_unknown_ones_writes_back_unchanged(
    entry: dict[str, Any],
) -> None:
    assert FailureForensics.from_json(entry).to_json() == entry


def test_a_verdict_missing_keys_or_with_unknown_ones_writes_back_unchanged() -> None:
    verdict = _recorded()["triage_verdict"]
    older = {k: v for k, v in verdict.items() if k != "analyzer"}
    newer = {**verdict, "reproduced_on_retry": False}
    for data in (older, newer):
        assert json.dumps(TriageVerdict.from_json(data).to_json()) == json.dumps(data)


def test_a_made_verdict_writes_the_relays_shape() -> None:
    verdict = TriageVerdict(
        "upstream",
        "high",
        "1 failure(s)",
        (TriageEvidence("variant-tests", "v", "AssertionError"),),
        "0.1.0",
        SuspectedCommit(B),
        analyzed_at="2026-12-06T10:05:00Z",
    )
    assert verdict.to_json() == {
        "schema_version": 1,
        "category": "upstream",
        "confidence": "high",
        "summary": "1 failure(s)",
        "evidence": [{"job": "variant-tests", "test": "v", "excerpt": "AssertionError"}],
        "analyzer": {"name": "spyre-ci", "version": "0.1.0"},
        "suspected_upstream": {"commit": B},
        "analyzed_at": "2026-12-06T10:05:00Z",
    }
    assert TriageVerdict.from_json(verdict.to_json()) == verdict


def test_a_made_entry_writes_window_triage_and_where_it_passed() -> None:
    made = FailureForensics(
        "v", A, B, "r1", "r2", None, FailureTriage("v", "related", "upstream", True), A
    )
    assert list(made.to_json()) == [
        *("id", "last_good_sha", "first_bad_sha", "last_good_run", "first_bad_run"),
        *("compare_url", "class", "category", "related", "passed_before"),
    ]
    answered = BisectAnswer("culprit", "high", "culprit", extra={"culprit": {"sha": B}})
    assert FailureForensics.from_json(
        {**made.to_json(), "bisect": answered.to_json()}
    ).bisect == BisectAnswer.from_json(answered.to_json())
