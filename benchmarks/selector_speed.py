"""How long selection takes over a 50,000-variant inventory for a 30-file change.

The inventory is synthetic but shaped like the real one (op_db names widened with numbered
OpInfo variants x 8 test_ops templates x 3 dtypes, watch globs on every variant); the History
times every variant and holds co-failure counts; a previous inventory differs in 1 % of the
fingerprints, so every heuristic has work. The change is a 30-file diff across kernels,
Python frontend, refs, the OpInfo database, tests and docs (targeted, so nothing short-cuts
to a full run). Figures are medians over 15 runs after one warm-up:
  value            `plan()` with a prebuilt `InventoryIndex` (warm: what a worker that keeps
                   its index pays per change)
  cold_index_s     building the `InventoryIndex` alone (paid once per inventory)
  plan_with_build  `plan()` handed the bare Inventory (builds the index every call)
  full_fallback_s  `plan()` for a CMakeLists.txt change: all 50,000 selected and sharded
Writes benchmarks/results/selector_speed.json. Run: .venv/bin/python benchmarks/selector_speed.py
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from selector import ChangeSet, History, InventoryIndex, PlanConfig, VariantHistory, plan  # noqa: E402
from suites.model import Inventory  # noqa: E402
from tests.selector.synthetic import large_inventory  # noqa: E402

VARIANTS = 50_000
RUNS = 15
RESULT = REPO / "benchmarks" / "results" / "selector_speed.json"

# (path, hunk header context, changed line): 30 files, the way a busy day's push looks.
CHANGE = [
    ("aten/src/ATen/native/SoftMax.cpp", "TORCH_IMPL_FUNC(softmax_cpu_out)", "  x = 1;"),
    (
        "aten/src/ATen/native/cpu/SoftMaxKernel.cpp",
        "static void softmax_lastdim_kernel_impl(",
        "  y = 2;",
    ),
    ("aten/src/ATen/native/BinaryOps.cpp", "TORCH_IMPL_FUNC(add_out)", "  z = 3;"),
    (
        "aten/src/ATen/native/cpu/BinaryOpsKernel.cpp",
        "void mul_kernel(TensorIteratorBase& iter) {",
        "  w = 4;",
    ),
    ("aten/src/ATen/native/ReduceOps.cpp", "TORCH_IMPL_FUNC(sum_out)", "  a = 5;"),
    ("aten/src/ATen/native/cpu/ReduceOpsKernel.cpp", "static void mean_kernel_impl(", "  b = 6;"),
    ("aten/src/ATen/native/Sorting.cpp", "TORCH_IMPL_FUNC(topk_out_cpu)", "  c = 7;"),
    (
        "aten/src/ATen/native/TensorShape.cpp",
        "Tensor permute(const Tensor& self, IntArrayRef d) {",
        "  d = 8;",
    ),
    ("aten/src/ATen/native/Activation.cpp", "TORCH_IMPL_FUNC(gelu_out_cpu)", "  e = 9;"),
    (
        "aten/src/ATen/native/layer_norm.cpp",
        "std::tuple<Tensor, Tensor, Tensor> layer_norm_cpu(",
        "  f = 10;",
    ),
    ("aten/src/ATen/native/UnaryOps.cpp", "TORCH_IMPL_FUNC(sqrt_out)", "  g = 11;"),
    (
        "aten/src/ATen/native/native_functions.yaml",
        "- func: clamp(Tensor self) -> Tensor",
        "  tags: pointwise",
    ),
    (
        "tools/autograd/derivatives.yaml",
        "- name: cumsum(Tensor self, int dim) -> Tensor",
        "  self: cumsum_backward(grad, dim)",
    ),
    ("torch/nn/functional.py", "def embedding(", "    h = 12"),
    ("docs/source/notes/numerical_accuracy.rst", "", "x"),
    ("torch/_refs/__init__.py", "def where(", "    i = 13"),
    ("torch/_decomp/decompositions.py", "def index_select(", "    j = 14"),
    (
        "torch/testing/_internal/common_methods_invocations.py",
        "def sample_inputs_gather(",
        "    k = 15",
    ),
    ("torch/functional.py", "def norm(", "    l = 16"),
    ("torch/_tensor_str.py", "def _tensor_str(", "    m = 17"),
    ("torch/_inductor/lowering.py", "def roll(", "    n = 18"),
    ("torch/_dynamo/variables/torch.py", "class TorchInGraphFunctionVariable(", "    o = 19"),
    ("torch/fx/graph.py", "def python_code(", "    p = 20"),
    ("test/test_binary_ufuncs.py", "class TestBinaryUfuncs(TestCase):", "    q = 21"),
    ("test/test_nn.py", "class TestNN(NNTestCase):", "    r = 22"),
    ("test/test_torch.py", "class TestTorch(TestCase):", "    s = 23"),
    ("test/inductor/test_torchinductor.py", "class CommonTemplate:", "    t = 24"),
    ("docs/source/nn.functional.rst", "", "u"),
    ("docs/source/torch.rst", "", "v"),
    (".github/workflows/trunk.yml", "", "w"),
]


def change_diff() -> str:
    out = []
    for path, context, line in CHANGE:
        out += [
            f"diff --git a/{path} b/{path}",
            "index 1111111..2222222 100644",
            f"--- a/{path}",
            f"+++ b/{path}",
            f"@@ -10,3 +10,3 @@ {context}".rstrip(),
            " context above",
            f"-{line}",
            f"+{line} # changed",
            " context below",
        ]
    return "\n".join(out) + "\n"


def main() -> None:
    inventory = large_inventory(VARIANTS)
    ids = [v.id for v in inventory.variants]
    previous = Inventory(
        inventory.torch_version,
        "previous",
        tuple(
            replace(v, fingerprint="0" * 16) if i % 100 == 0 else v
            for i, v in enumerate(inventory.variants)
        ),
    )
    history = History(
        variants={
            vid: VariantHistory(mean_duration_s=0.05 + (i % 17) * 0.01) for i, vid in enumerate(ids)
        },
        co_failures={"torch/_tensor_str.py": {ids[i]: 1 + i % 3 for i in range(0, 5000, 50)}},
        known_variants=frozenset(ids),
    )
    changes = ChangeSet.from_diff(change_diff(), head_sha="c0ffee" * 6 + "abcd")
    assert len(changes.paths) == 30
    config = PlanConfig(shards=4)

    start = time.perf_counter()
    index = InventoryIndex.build(inventory)
    cold_index = time.perf_counter() - start

    result = plan(changes, index, history, config, previous=previous)  # warm-up
    assert result.decision == "targeted", result.facts.reasons
    warm = []
    for _ in range(RUNS):
        start = time.perf_counter()
        result = plan(changes, index, history, config, previous=previous)
        warm.append(time.perf_counter() - start)
    with_build = []
    for _ in range(5):
        start = time.perf_counter()
        plan(changes, inventory, history, config, previous=previous)
        with_build.append(time.perf_counter() - start)

    build = ChangeSet.from_diff(
        "diff --git a/CMakeLists.txt b/CMakeLists.txt\n--- a/CMakeLists.txt\n"
        "+++ b/CMakeLists.txt\n@@ -1 +1 @@\n-a\n+b\n",
        head_sha="b" * 40,
    )
    full = []
    for _ in range(5):
        start = time.perf_counter()
        full_plan = plan(build, index, history, config, previous=previous)
        full.append(time.perf_counter() - start)
    assert full_plan.decision == "full"

    value = statistics.median(warm)
    data = {
        "name": "selector_speed",
        "value": round(value, 4),
        "unit": "s",
        "command": ".venv/bin/python benchmarks/selector_speed.py",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cpu, "
        f"Python {platform.python_version()}, {platform.system()}".replace("  ", " "),
        "notes": f"plan() over {VARIANTS:,} synthetic variants for a {len(CHANGE)}-file "
        "targeted change, InventoryIndex prebuilt, History timing every variant, "
        f"previous inventory for fingerprints; median of {RUNS} after a warm-up. "
        "Aim: under 0.5 s. The machine is shared: see load_average_1m.",
        "variants": VARIANTS,
        "changed_files": len(CHANGE),
        "warm_plan_s": {
            "median": round(value, 4),
            "min": round(min(warm), 4),
            "max": round(max(warm), 4),
        },
        "cold_index_s": round(cold_index, 4),
        "plan_with_index_build_s": round(statistics.median(with_build), 4),
        "full_fallback_s": round(statistics.median(full), 4),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "selected": result.totals.selected,
        "holdout": len(result.holdout),
        "ops_touched": len(result.facts.ops),
        "ratio_count": result.totals.ratio_count,
        "skipped": dict(result.skipped),
    }
    RESULT.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
