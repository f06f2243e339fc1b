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


def test_base_outcomes_are_kept_apart_by_cpu(tmp_path: Path, monkeypatch) -> None:
    """fp16 kernels compute differently on another CPU model or ISA: its base outcomes are
    another torch's, never read for this one."""
    from workflows.run import base_outcomes

    here = BaseOutcomeCache.for_torch(SHA, tmp_path, backend=BACKEND)
    here.put([Outcome(GLU, Status.FAILED, 0.1, "fp16 off by 0.25")], {GLU: "f1"}, "run-a")
    assert base_outcomes.cpu_identity().startswith(("x86_64", "aarch64", "arm64"))
    monkeypatch.setattr(base_outcomes, "cpu_identity", lambda: "x86_64 another CPU [avx2 fma]")
    elsewhere = BaseOutcomeCache.for_torch(SHA, tmp_path, backend=BACKEND)
    assert elsewhere.path != here.path
    assert elsewhere.get([GLU], {GLU: "f1"}) == {}


def test_an_entry_that_does_not_match_its_digest_is_not_read(tmp_path: Path) -> None:
    import json

    cache = BaseOutcomeCache.for_torch(SHA, tmp_path, backend=BACKEND)
    cache.put([Outcome(GLU, Status.PASSED, 0.1)], {GLU: "f1"}, "run-a")
    assert cache.read([GLU], {GLU: "f1"})[GLU].run_id == "run-a"
    assert cache.path is not None
    entries = json.loads(cache.path.read_text())
    entries[GLU]["run_id"] = "run-b"  # any field edited: the digest no longer holds
    cache.path.write_text(json.dumps(entries))
    assert cache.read([GLU], {GLU: "f1"}) == {} and cache.refused == [GLU]
