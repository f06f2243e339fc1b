"""Triage: each failure's class from its message and the plan's reasons, the wire category
it maps to, and the run's verdict within the reference relay's schema and caps."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contracts.forensics import FailureForensics, SuspectedCommit
from dashboard_export import triage

# Message shapes as the shards record them (backend_under_test.rules, torch's assert_close).
LOWER = (
    "NotImplementedError: spyre cannot lower aten::pow (compile): no power unit; rewrite it as "
    "x * x * x for an integer exponent (torch.pow(x, 3.0) becomes x * x * x). "
    "Set SPYRE_EMU_PERMISSIVE=1 to run without Spyre rules."
)
DTYPE = (
    "TypeError: spyre does not support dtype torch.float64 (allocation): compute in float32 "
    "or float16. Set SPYRE_EMU_PERMISSIVE=1 to run without Spyre rules."
)
CLOSE = (
    "AssertionError: module input 3 (default): Tensor-likes are not close!\n\n"
    "Mismatched elements: 1 / 9 (11.1%)\n"
    "Greatest absolute difference: 0.003202676773071289 at index (2, 0) (up to 0.001 allowed)\n"
    "Greatest relative difference: 0.0022006214130669832 at index (2, 0) (up to 0.001 allowed)"
)
SCALAR = (
    "AssertionError: inplace variant, sample 0: Scalars are not equal!\n\n"
    "Expected -2.984375 but got -3.03125.\nAbsolute difference: 0.046875"
)
SCHEMA = (
    "RuntimeError: aten::_batch_norm_with_update() expected at most 7 argument(s) but "
    "received 8 argument(s). Declaration: aten::_batch_norm_with_update(Tensor input, ...)"
)


@pytest.mark.parametrize(
    ("message", "related", "failure_class", "category"),
    [
        (LOWER, False, "device-rule", "backend"),
        (LOWER, True, "device-rule", "backend"),  # a refusal is ours to fix
        (DTYPE, False, "device-rule", "backend"),
        (CLOSE, False, "precision", "unknown"),  # a tolerance miss alone names nobody
        (CLOSE, True, "precision", "upstream"),
        (SCALAR, True, "precision", "upstream"),
        (SCHEMA, True, "related", "upstream"),
        (SCHEMA, False, "unknown", "unknown"),
        ("", False, "unknown", "unknown"),
    ],
)
def test_classes_and_categories(
    message: str, related: bool, failure_class: str, category: str
) -> None:
    one = triage.triage("s::t::op::float32", message, related)
    assert (one.failure_class, one.category) == (failure_class, category)


@pytest.mark.parametrize(
    ("message", "related", "classification", "base_status", "tested", "category"),
    [
        # passes on the base torch without the change: the change's, related or not
        (CLOSE, False, "new", "passed", "tested", "upstream"),
        (SCHEMA, False, "new", "passed", "partial", "upstream"),
        # fails on the base torch too: not the change's, even when the plan related it
        (CLOSE, True, "pre-existing", "failed", "tested", "backend"),
        (SCHEMA, True, "new", "error", "tested", "backend"),
        (SCHEMA, True, "pre-existing", None, None, "backend"),  # History's baseline
        # a rule refusal stays ours even when the change led the test there
        (LOWER, True, "new", "passed", "tested", "backend"),
        # nothing of the change ran: it cannot be pinned on it
        (CLOSE, True, "new", None, "not_tested", "unknown"),
        (CLOSE, True, "pre-existing", None, "not_tested", "unknown"),  # the torch's own
        (CLOSE, True, "flaky", "failed", "tested", "flake"),
        ("", False, "new", "not-a-status", None, "unknown"),
    ],
)
def test_the_evidence_decides_the_category(
    message: str,
    related: bool,
    classification: str,
    base_status: str | None,
    tested: str | None,
    category: str,
) -> None:
    one = triage.triage(
        "v", message, related, classification, base_status=base_status, tested=tested
    )
    assert one.category == category
    assert one.why and one.to_json()["why"] == one.why


GOOD = "a" * 40


@pytest.mark.parametrize(
    ("message", "related", "classification", "base_status", "tested", "category"),
    [
        # fails on the base torch too, but passed upstream earlier with the same backend:
        # an earlier upstream commit, not the backend, even though the plan did not relate it
        (SCHEMA, False, "pre-existing", "failed", "tested", "upstream"),
        (CLOSE, False, "pre-existing", None, None, "upstream"),  # History's baseline
        # no A/B outcome, not related, even untested: only upstream moved since it passed
        (SCHEMA, False, "new", None, "not_tested", "upstream"),
        # passes on the base torch: this change's, whatever History says
        (SCHEMA, False, "new", "passed", "tested", "upstream"),
        # a rule refusal and a flake keep their evidence
        (LOWER, False, "pre-existing", "failed", "tested", "backend"),
        (CLOSE, False, "flaky", None, "tested", "flake"),
    ],
)
def test_passed_at_an_earlier_upstream_sha_with_the_same_backend(
    message: str,
    related: bool,
    classification: str,
    base_status: str | None,
    tested: str | None,
    category: str,
) -> None:
    one = triage.triage(
        "v",
        message,
        related,
        classification,
        base_status=base_status,
        tested=tested,
        passed_before=GOOD,
    )
    assert one.category == category
    if category == "upstream" and base_status != "passed":
        assert GOOD[:12] in one.why
    # Without that evidence the same failure is not called upstream.
    without = triage.triage(
        "v", message, related, classification, base_status=base_status, tested=tested
    )
    if base_status != "passed" and classification != "flaky":
        assert without.category != "upstream"


def test_a_bisect_culprit_replaces_the_first_bad_suspicion() -> None:
    failures = [triage.triage("a", SCHEMA, False, "new", base_status="passed")]
    made = triage.run_verdict(failures, {"a": SCHEMA}, first_bad="abc1234", job="j", version="1")
    assert made is not None and made.suspected_upstream is not None
    assert made.suspected_upstream.commit == "abc1234"
    culprit = SuspectedCommit("d" * 40, "bisect: 2 agreeing runs per step")
    found = triage.run_verdict(
        failures, {"a": SCHEMA}, first_bad="abc1234", job="j", version="1", culprit=culprit
    )
    assert found is not None and found.suspected_upstream == culprit
    assert found.to_json()["suspected_upstream"] == {
        "commit": "d" * 40,
        "reason": "bisect: 2 agreeing runs per step",
    }
    assert "passes without the change" in found.summary
    backend = triage.run_verdict(
        [triage.triage("b", LOWER, True)], {}, first_bad=None, job="j", version="1"
    )
    assert backend is not None
    assert "suspected_upstream" not in triage.with_culprit(backend, "d" * 40).to_json()
    with pytest.raises(ValueError, match="not a hex git sha"):
        triage.with_culprit(found, "HEAD~1")


def test_a_flaky_failure_is_a_flake_whatever_its_message() -> None:
    assert triage.triage("v", CLOSE, True, "flaky").category == "flake"


def test_related_ids_are_those_the_change_reached() -> None:
    from selector import Reason, Selected

    def chosen(vid: str, heuristic: str, score: float) -> Selected:
        return Selected(vid, score, (Reason(heuristic, score, "why"),))

    selected = [
        chosen("a", "op_match", 0.9),
        chosen("b", "impact_map", 0.5),
        chosen("c", "watch", 0.9),
        chosen("d", "op_match", -0.2),
    ]
    assert triage.related_ids(selected) == {"a", "b"}


def test_the_run_verdict_takes_the_majority_and_names_the_first_bad_commit() -> None:
    failures = [
        triage.triage("a", CLOSE, True),
        triage.triage("b", SCHEMA, True),
        triage.triage("c", LOWER, True),
    ]
    messages = {"a": CLOSE, "b": SCHEMA, "c": LOWER}
    verdict = triage.run_verdict(
        failures,
        messages,
        first_bad="c" * 40,
        job="main",
        version="0.1",
        analyzed_at="2026-12-02T01:00:00Z",
    )
    assert verdict is not None and verdict.suspected_upstream is not None
    assert (verdict.category, verdict.confidence) == ("upstream", "medium")
    assert verdict.suspected_upstream.commit == "c" * 40
    assert [e.test for e in verdict.evidence] == ["a", "b"]
    assert verdict.summary.startswith("3 failure(s): 1 device-rule, 1 precision, 1 related")
    assert verdict.to_json()["analyzed_at"] == "2026-12-02T01:00:00Z"


def test_the_verdict_stays_within_the_reference_caps() -> None:
    failures = [triage.triage(f"v{i}" * 80, "x" * 5000, False) for i in range(30)]
    messages = {f.id: "x" * 5000 for f in failures}
    made = triage.run_verdict(failures, messages, first_bad="nope", job="j" * 300, version="")
    assert made is not None
    verdict = made.to_json()  # as the callback sends it
    assert verdict["category"] == "unknown" and verdict["confidence"] == "high"
    assert "suspected_upstream" not in verdict  # only for upstream, and only a hex sha
    assert len(verdict["evidence"]) == 10
    assert all(len(e["excerpt"]) <= 1000 and len(e["test"]) <= 200 for e in verdict["evidence"])
    assert len(json.dumps(verdict).encode()) <= 16 * 1024
    assert triage.run_verdict([], {}, first_bad=None, job="j", version="1") is None


def test_wide_characters_never_push_the_verdict_over_the_byte_cap() -> None:
    failures = [triage.triage(f"v{i}", "\N{SNOWMAN}" * 1000, False) for i in range(10)]
    messages = {f.id: "\N{SNOWMAN}" * 1000 for f in failures}
    verdict = triage.run_verdict(failures, messages, first_bad=None, job="j", version="1")
    assert verdict is not None and 1 <= len(verdict.evidence) < 10
    assert len(json.dumps(verdict.to_json()).encode()) <= 16 * 1024


def test_a_sign_flip_is_no_matter_of_precision() -> None:
    """20 of 20 elements wrong by twice their value is a wrong result, not a tolerance."""
    flipped = (
        "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 20 / 20 (100.0%)\n"
        "Greatest absolute difference: 40.0 at index (19,) (up to 1e-05 allowed)\n"
        "Greatest relative difference: 2.0 at index (0,) (up to 1.3e-06 allowed)"
    )
    rounding = flipped.replace("20 / 20 (100.0%)", "1 / 20 (5.0%)").replace(
        "relative difference: 2.0", "relative difference: 0.001"
    )
    assert triage.classify(flipped, related=True) == triage.RELATED
    assert triage.classify(flipped, related=False) == triage.UNKNOWN
    assert triage.classify(rounding, related=True) == triage.PRECISION
    everywhere_small = flipped.replace("relative difference: 2.0", "relative difference: 0.01")
    assert triage.classify(everywhere_small, related=False) == triage.PRECISION


def test_a_failure_that_passed_without_the_change_is_never_called_never_seen_passing() -> None:
    from dashboard_export.report import forensics_line

    entry = FailureForensics.from_json(
        {"last_good_sha": None, "first_bad_sha": "b" * 12, "class": "related"}
    )
    assert "the torch without the change (this run's A/B)" in forensics_line(entry, "passed")
    assert "never saw it pass" in forensics_line(entry, "failed")
    assert "never saw it pass" in forensics_line(entry)
    assert forensics_line(replace(entry, last_good_sha="a" * 12), "passed").startswith(
        "last good " + "a" * 12
    )
