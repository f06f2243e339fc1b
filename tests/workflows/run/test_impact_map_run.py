"""The main job with an impact map: the selector also picks what the traced run saw
dispatch a touched aten op, and plan.json says which map it read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contracts.event import TriggerEvent
from tests.testing.cli import cli, spyre_ci
from tests.testing.paths import TINY_SPEC
from tests.workflows.run_context import run_context
from workflows.run import pipeline, run_model
from workflows.stores.history import SQLiteHistory

KERNEL = "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp"
MUL_KERNEL_PATCH = f"""\
diff --git a/{KERNEL} b/{KERNEL}
--- a/{KERNEL}
+++ b/{KERNEL}
@@ -130,3 +130,3 @@ void mul_kernel(TensorIteratorBase& iter) {{
   auto dtype = iter.common_dtype();
-  if (dtype == ScalarType::Bool) {{
+  if (dtype == ScalarType::Bool && false) {{
     cpu_kernel(iter, [=](bool a, bool b) -> bool {{ return a && b; }});
"""


@pytest.fixture(scope="module")
def tiny_impact_map(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real trace of the tiny suite (16 variants, about 15 s)."""
    out = tmp_path_factory.mktemp("impact") / "impact.json"
    result = spyre_ci("impact-map", "--specs", str(TINY_SPEC), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def _request(tmp_path: Path, inventory: Path, impact_map: Path | None) -> run_model.RunRequest:
    """The mul kernel change, planned with `impact_map` or, without one, by op names alone
    (no trace at all: not the shipped one either, which holds none of the tiny suite)."""
    event = TriggerEvent("push", "d-mul", "pytorch/pytorch", "a" * 40, source="cli")
    return run_model.RunRequest(
        run_id=f"mul-{impact_map is not None}",
        event=event,
        out_dir=str(tmp_path / f"out-{impact_map is not None}"),
        inventory=str(inventory),
        diff_text=MUL_KERNEL_PATCH,
        holdout=0.0,
        specs=(str(TINY_SPEC),),
        impact_map=str(impact_map) if impact_map else None,
        default_trace=impact_map is not None,
    )


@pytest.mark.slow  # records an impact map (about 30 s); fast twins: tests/selector impact-map tests
def test_a_mul_kernel_change_reaches_what_dispatches_mul(
    tiny_inventory: Path, tiny_impact_map: Path, tmp_path: Path
) -> None:
    history = SQLiteHistory(tmp_path / "history.sqlite3")
    plain = pipeline.plan(_request(tmp_path, tiny_inventory, None), run_context(history))
    by_name = set(plain.plan.selected_ids)
    assert by_name and all("::mul::" in vid for vid in by_name)
    assert plain.notes.impact_map is None

    traced = pipeline.plan(
        _request(tmp_path, tiny_inventory, tiny_impact_map), run_context(history)
    )
    reasons = {s.id: " | ".join(r.reason for r in s.reasons) for s in traced.plan.selected}
    trace = json.loads(tiny_impact_map.read_text())["variants"]
    dispatching = {
        vid
        for vid, e in trace.items()
        if "aten::mul.Tensor" in e["aten_ops"] or "aten::mul" in e["aten_ops"]
    }
    # What the trace saw dispatch mul is selected, with the trace as its reason; what it did
    # not (pow, the with_dtype samples) is not.
    assert dispatching - by_name, "the map adds variants the op name alone does not reach"
    assert set(reasons) == by_name | dispatching
    for vid in dispatching - by_name:
        assert "dispatches touched aten::mul" in reasons[vid], reasons[vid]
    about = traced.notes.impact_map
    assert about is not None
    assert about.path == str(tiny_impact_map) and about.inventory_variants_traced == 16
    saved = json.loads((Path(traced.request.out_dir) / "plan.json").read_text())
    assert saved["impact_map"] == about.to_json()


def test_impact_map_errors_name_the_file(tiny_inventory: Path, tmp_path: Path) -> None:
    env = {**os.environ, "SPYRE_CI_STATE_DIR": str(tmp_path / "state")}
    diff = tmp_path / "mul.patch"
    diff.write_text(MUL_KERNEL_PATCH)
    common = [
        "run",
        "--diff",
        str(diff),
        "--inventory",
        str(tiny_inventory),
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    missing = cli(*common, "--impact-map", str(tmp_path / "nope.json"), env=env)
    assert missing.returncode == 2
    assert "nope.json: no impact map there; record one with `spyre-ci impact-map" in (
        missing.stderr
    )
    from_env = cli(*common, env={**env, "SPYRE_CI_IMPACT_MAP": str(tmp_path / "gone.json")})
    assert from_env.returncode == 2 and "gone.json: no impact map there" in from_env.stderr
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": 1, "variants": [')
    with pytest.raises(run_model.PipelineError, match="broken.json:1:28: invalid JSON"):
        pipeline.plan(
            _request(tmp_path, tiny_inventory, broken),
            run_context(SQLiteHistory(tmp_path / "h.sqlite3")),
        )
    broken.write_text('{"format": 7, "variants": {}}')
    with pytest.raises(run_model.PipelineError, match="broken.json: format 7 is not 1"):
        pipeline.plan(
            _request(tmp_path, tiny_inventory, broken),
            run_context(SQLiteHistory(tmp_path / "h.sqlite3")),
        )
