"""A dashboard_export RunRecord built from a real pytest run's JUnit."""

from __future__ import annotations

from pathlib import Path

from contracts.event import ChangedFile, TriggerEvent
from dashboard_export import junit
from dashboard_export.model import (
    DiffCategory,
    DiffRow,
    Environment,
    PlanSummary,
    RunRecord,
    UpgradeDiff,
    VariantResult,
)
from suites.model import Outcome, Status
from tests.testing.paths import REPO_ROOT

SAMPLE = REPO_ROOT / "tests" / "dashboard_export" / "data" / "variants_sample.py"
CLASSIFY = {
    "sample::binary_ufunc::mul::float32": "new",
    "sample::module::Linear::float32": "pre-existing",
    "upstream::TestLinalg::test_det::float32": "new",
    "sample::binary_ufunc::add::float16": "flaky",  # failed once, passed on rerun
}
CRASHED = "sample::binary_ufunc::div::float32"  # its worker died: no testcase in the JUnit


def make_record(junit_dir: Path, **changes: object) -> RunRecord:
    """A run record whose results come from the real JUnit, classified as Verify would."""
    outcomes = junit.outcomes(junit.read_junit(junit_dir / "shard-0.xml"))
    results = [
        VariantResult.of(o, CLASSIFY.get(o.id), holdout=o.id.startswith("upstream::"))
        for o in outcomes
    ]
    results.append(
        VariantResult.of(
            Outcome(CRASHED, Status.CRASHED, 12.5, "worker exited with signal 11 (SIGSEGV)"), "new"
        )
    )
    payload = {
        "action": "synchronize",
        "number": 4242,
        "pull_request": {"number": 4242, "head": {"sha": "b" * 40}, "base": {"sha": "a" * 40}},
        "repository": {"full_name": "pytorch/pytorch"},
    }
    event = TriggerEvent(
        kind="pull_request",
        delivery_id="7f6e3a10-1c2d-11f1-8e9a-0242ac120002",
        repo="pytorch/pytorch",
        head_sha="b" * 40,
        base_sha="a" * 40,
        pr_number=4242,
        files=(
            ChangedFile("aten/src/ATen/native/BinaryOps.cpp", "modified"),
            ChangedFile("torch/_refs/__init__.py", "modified"),
        ),
        commit_messages=("Fix mul type promotion for half <script>", ""),
        labels=("ciflow/crcr/spyre",),
        source="crcr",
        upstream_event="pull_request",
        payload=payload,
    )
    plan = PlanSummary(
        selected=9,
        inventory=1200,
        fallback_reason=None,
        top_reasons=(("touches aten::mul (BinaryOps.cpp)", 5), ("co-failed with _refs", 3)),
        skipped={"unrelated to the change": 1185, "over budget": 6},
        holdout=3,
        holdout_misses=("upstream::TestLinalg::test_det::float32",),
        metrics={"recall_estimate": 0.8, "budget_used_s": 42.5},
    )
    upgrade = UpgradeDiff(
        "2.13.0",
        "2.14.0",
        (
            DiffRow(
                "sample::binary_ufunc::mul::float32",
                DiffCategory.REGRESSED,
                Status.PASSED,
                Status.FAILED,
                "mul gave 4, expected 5",
            ),
            DiffRow(
                "sample::unary_ufunc::tan::float32",
                DiffCategory.FIXED,
                Status.FAILED,
                Status.PASSED,
            ),
            DiffRow(
                "sample::unary_ufunc::erfinv::float32",
                DiffCategory.NEW_PASSING,
                None,
                Status.PASSED,
            ),
            DiffRow(
                "sample::unary_ufunc::old_op::float32", DiffCategory.REMOVED, Status.PASSED, None
            ),
        ),
    )
    fields: dict[str, object] = dict(
        run_id="9876543210",
        attempt=2,
        downstream_repo="torch-spyre/torch-spyre",
        workflow="spyre-ci",
        job="variants (shard 1/1)",
        event=event,
        environment=Environment(
            "2.13.0", "0123456789abcdef0123", "spyre-emulator", "0.3.1", "spyre-emulated:0"
        ),
        results=tuple(results),
        started_at="2026-11-29T14:00:05Z",
        completed_at="2026-11-29T14:07:35.250Z",
        queued_at="2026-11-29T13:59:50Z",
        check_run_id="55501",
        run_url="https://ci.example.invalid/runs/9876543210",
        ci_run_id="9876543210",
        plan=plan,
        upgrade=upgrade,
    )
    fields.update(changes)
    return RunRecord(**fields)  # type: ignore[arg-type]
