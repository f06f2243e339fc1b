"""The OpInfo compare-with-CPU sweep against its committed manifest.

The sweep itself is slow (minutes); the manifest checks are fast and run by default.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend_under_test import sweep


def _manifest() -> dict[str, object]:
    return json.loads(sweep.MANIFEST.read_text())


def test_manifest_failures_are_all_explained() -> None:
    manifest = _manifest()
    groups = manifest["failure_groups"]
    assert isinstance(groups, dict)
    assert sweep.UNEXPLAINED not in groups
    known = {g.name for g in sweep.FAILURE_GROUPS}
    tests = manifest["tests"]
    assert isinstance(tests, dict)
    assert len(tests) > 1000
    for test, outcome in tests.items():
        assert outcome in ("passed", "skipped", "xfailed") or (
            outcome.startswith("failed:") and outcome.split(":", 1)[1] in known
        ), (test, outcome)


def test_readme_table_matches_manifest() -> None:
    table = sweep.render_table(_manifest())
    assert table in sweep.README.read_text()


@pytest.mark.parametrize(
    "message, passes_without_rules, group",
    [
        (
            "TypeError: spyre does not support dtype torch.float64 (allocation): use",
            None,
            "rule-dtype",
        ),
        (
            "NotImplementedError: spyre cannot lower aten::pow (eager): ...",
            None,
            "rule-unlowerable",
        ),
        ("AssertionError: Tensor-likes are not close!", True, "rule-fp16-compute"),
        ("AssertionError: Tensor-likes are not close!", False, "low-precision-path"),
        ("AssertionError: Tensor-likes are not close!", None, sweep.UNEXPLAINED),
        ("RuntimeError: something new", None, sweep.UNEXPLAINED),
    ],
)
def test_classify(message: str, passes_without_rules: bool | None, group: str) -> None:
    assert sweep.classify(message, passes_without_rules) == group


@pytest.mark.slow
def test_opinfo_sweep_matches_manifest(tmp_path: Path) -> None:
    junit = tmp_path / "sweep.xml"
    sweep.run_sweep(junit)
    # Outcomes must match the manifest; the manifest explains every failure (checked above).
    actual_tests = {o.test: o.status for o in sweep.parse_junit(junit)}
    expected_tests = {t: o.split(":", 1)[0] for t, o in _manifest()["tests"].items()}
    changed = {
        t: (expected_tests.get(t), actual_tests.get(t))
        for t in set(expected_tests) | set(actual_tests)
        if expected_tests.get(t) != actual_tests.get(t)
    }
    assert not changed, f"{len(changed)} outcomes differ from the manifest: " + ", ".join(
        f"{t}: {e} -> {a}" for t, (e, a) in sorted(changed.items())[:30]
    )
