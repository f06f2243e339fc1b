"""The A/B's base outcomes kept per base torch (`workflows.run.base_outcomes`): a base side
read from the cache must be the same torch and backend the run's base side would run, else
it is run again (a run on a build with another upstream drift, or another backend, tests
another torch: its base outcomes once decided a harmless change as the breaker)."""

from __future__ import annotations

from pathlib import Path

from suites.model import Outcome, Status
from workflows.run.base_outcomes import BaseOutcomeCache

SHA = "63547bfd1c817b681cec48566f75a56afcbcbccd"
GLU = "ops::compare_cpu::nn.functional.glu::float32"
BACKEND = {"package": "backend_under_test", "version": "0.1.0", "digest": "aa11"}


def test_base_outcomes_are_kept_apart_by_drift_and_backend(tmp_path: Path) -> None:
    fingerprints = {GLU: "f1"}
    before_break = BaseOutcomeCache.for_torch(SHA, tmp_path, base="drift A", backend=BACKEND)
    before_break.put([Outcome(GLU, Status.PASSED, 0.1)], fingerprints)
    assert before_break.get([GLU], fingerprints)[GLU].status == Status.PASSED

    # The same build, a base whose drift holds the break: not the same base torch.
    after_break = BaseOutcomeCache.for_torch(SHA, tmp_path, base="drift B", backend=BACKEND)
    assert after_break.get([GLU], fingerprints) == {}
    fixed = {**BACKEND, "digest": "bb22"}  # the backend edited since
    assert (
        BaseOutcomeCache.for_torch(SHA, tmp_path, base="drift A", backend=fixed).get(
            [GLU], fingerprints
        )
        == {}
    )
    # The same base torch and backend read it back; a changed definition does not.
    again = BaseOutcomeCache.for_torch(SHA, tmp_path, base="drift A", backend=dict(BACKEND))
    assert again.get([GLU], fingerprints)[GLU].status == Status.PASSED
    assert again.get([GLU], {GLU: "f2"}) == {}
    assert len({p.name for p in (tmp_path / "base-outcomes").glob("*.json")}) == 1
    assert BaseOutcomeCache.for_torch("not a sha", tmp_path).path is None
