"""The selection benchmark: mutation sets, the overlay and override in real subprocesses,
the impact-map restriction, and the replay end to end."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.selection.mutations import (
    Mutation,
    MutationError,
    apply_patch,
    load_mutations,
    subprocess_env,
    torch_root,
)
from benchmarks.selection.mutations.author import git_diff, python_diff
from benchmarks.selection.mutations.impact import changed_functions, touched_variants
from selector import ChangeSet
from selector.impact import ImpactMap
from tests.testing.cli import spyre_ci
from tests.testing.paths import REPO_ROOT

SHIPPED = REPO_ROOT / "benchmarks" / "selection" / "mutations.yaml"
MICRO_SPEC = REPO_ROOT / "tests" / "workflows" / "data" / "selection" / "micro.yaml"
SOFTSIGN_OLD = "    return input / (input.abs() + 1)\n"
SOFTSIGN_NEW = "    return input / (input.abs() + 3)\n"

SIGMOID_KERNEL = textwrap.dedent("""\
    --- a/aten/src/ATen/native/cpu/UnaryOpsKernel.cpp
    +++ b/aten/src/ATen/native/cpu/UnaryOpsKernel.cpp
    @@ -60,3 +60,3 @@ static void sigmoid_kernel(TensorIteratorBase& iter) {
       const auto dtype = iter.common_dtype();
    -        [=](scalar_t a) -> scalar_t { return (1 / (1 + std::exp((-a)))); },
    +        [=](scalar_t a) -> scalar_t { return (1 / (1 + std::exp((-a) * 2))); },
    """)


def _write_set(path: Path, entries: list[dict[str, object]]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"version": 1, "mutations": entries}, sort_keys=False))
    return path


def _softsign_entry(mid: str = "py-softsign") -> dict[str, object]:
    return {
        "id": mid,
        "kind": "python",
        "file": "torch/nn/functional.py",
        "location": "softsign",
        "operator": "constant",
        "diff": python_diff("torch/nn/functional.py", SOFTSIGN_OLD, SOFTSIGN_NEW),
    }


def _kernel_entry(
    mid: str = "k-sigmoid", perturb: dict[str, object] | None = None
) -> dict[str, object]:
    return {
        "id": mid,
        "kind": "kernel",
        "file": "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp",
        "location": "sigmoid_kernel",
        "operator": "arith",
        "ops": ["aten::sigmoid", "aten::sigmoid_"],
        "perturb": perturb or {"scale": 2.0},
        "diff": SIGMOID_KERNEL,
    }


# --- the format ---------------------------------------------------------------------------


def test_shipped_set_is_large_mixed_and_applies() -> None:
    from benchmarks.selection.mutations.model import check_all

    mutations = load_mutations(SHIPPED)
    check_all(mutations)  # every python diff applies to the installed torch
    assert len(mutations) >= 40
    assert len({m.file for m in mutations}) >= 10
    kinds = {m.kind for m in mutations}
    assert kinds == {"python", "kernel"}
    assert any(m.perturb.identity for m in mutations if m.kind == "kernel")
    for m in mutations:  # the selector reads every diff
        changes = ChangeSet.from_diff(m.diff, source=m.id)
        assert m.file in {p.path for p in changes.paths}


def test_bad_sets_name_the_entry_and_field(tmp_path: Path) -> None:
    bad = _kernel_entry("k-bad")
    bad["ops"] = ["sigmoid"]
    wrong_file = _softsign_entry("py-wrong-file")
    wrong_file["file"] = "torch/functional.py"
    path = _write_set(
        tmp_path / "set.yaml",
        [
            _softsign_entry("dup"),
            _softsign_entry("dup"),
            bad,
            wrong_file,
            {
                "id": "k-kind",
                "kind": "cuda",
                "file": "x",
                "location": "y",
                "operator": "z",
                "diff": "d",
            },
            {
                "id": "no-diff",
                "kind": "python",
                "file": "torch/nn/functional.py",
                "location": "softsign",
                "operator": "constant",
            },
        ],
    )
    with pytest.raises(MutationError) as info:
        load_mutations(path)
    message = str(info.value)
    assert "duplicate id 'dup'" in message
    assert "mutations[2] (id 'k-bad'): field 'ops'" in message
    assert "(id 'py-wrong-file'): field 'file': torch/functional.py is not edited" in message
    assert "(id 'k-kind'): field 'kind': 'cuda' is not one of python, kernel" in message
    assert "(id 'no-diff'): field(s) diff missing" in message


def test_a_diff_that_does_not_match_the_installed_torch_is_refused(tmp_path: Path) -> None:
    entry = _softsign_entry()
    entry["diff"] = str(entry["diff"]).replace(
        "-    return input / (input.abs() + 1)", "-    return input / (input.abs() + 7)"
    )
    mutations = load_mutations(_write_set(tmp_path / "set.yaml", [entry]))
    with pytest.raises(MutationError, match="hunk 1 .* does not apply"):
        subprocess_env(mutations[0], tmp_path / "work")


def load_patch(diff: str):  # type: ignore[no-untyped-def]
    from selector.diff import parse_unified_diff

    return parse_unified_diff(diff).files[0]


def test_apply_patch_follows_moved_code() -> None:
    before = "".join(f"line {i}\n" for i in range(40))
    after = before.replace("line 20\n", "line twenty\n")
    patch = load_patch(git_diff("torch/x.py", before, after))
    shifted = "extra\n" * 5 + before
    assert apply_patch(shifted, patch) == "extra\n" * 5 + after


# --- the overlay and the override, in real subprocesses -------------------------------------


def _python(code: str, env: dict[str, str] | None) -> str:
    import os

    full = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# In the default run: the mutation harness's subprocess is
# `test_kernel_mutation_perturbs_the_cpu_result_not_the_device`.
@pytest.mark.long
def test_python_mutation_changes_the_function_only_in_the_subprocess(tmp_path: Path) -> None:
    installed = torch_root() / "torch" / "nn" / "functional.py"
    cache = list((installed.parent / "__pycache__").glob("functional.*.pyc"))
    before = _digest(installed), {p: _digest(p) for p in cache}
    mutation = load_mutations(_write_set(tmp_path / "set.yaml", [_softsign_entry()]))[0]
    env = subprocess_env(mutation, tmp_path / "work")
    code = (
        "import torch, torch.nn.functional as F\n"
        "from benchmarks.selection.mutations import overlay\n"
        "print(F.softsign(torch.tensor([1.0])).item(), overlay.status()['loaded'])"
    )
    mutated = _python(code, env)
    assert mutated == "0.25 ['torch.nn.functional']"
    assert _python(code, None) == "0.5 []"
    # The installed torch is untouched: its source and its bytecode cache.
    assert (_digest(installed), {p: _digest(p) for p in cache}) == before


# In the default run, a kernel mutation in a subprocess is
# `test_kernel_override_keeps_python_scalars_working`.
@pytest.mark.long
def test_kernel_mutation_perturbs_the_cpu_result_not_the_device(tmp_path: Path) -> None:
    mutation = load_mutations(_write_set(tmp_path / "set.yaml", [_kernel_entry()]))[0]
    env = subprocess_env(mutation, tmp_path / "work")
    code = (
        "import torch\n"
        "x = torch.zeros(3)\n"
        "y = x.clone(); y.sigmoid_()\n"
        "out = torch.empty(3); torch.sigmoid(x, out=out)\n"
        "dev = torch.sigmoid(x.to('spyre')).cpu()\n"
        "print(torch.sigmoid(x)[0].item(), y[0].item(), out[0].item(), dev[0].item(),"
        " torch.exp(x)[0].item())"
    )
    # functional, in-place and out= CPU kernels are perturbed (x2); the device keeps its own
    # kernel (0.5), other ops are untouched.
    assert _python(code, env) == "1.0 1.0 1.0 0.5 1.0"
    assert _python(code, None) == "0.5 0.5 0.5 0.5 1.0"


# --- the restriction ----------------------------------------------------------------------


def test_changed_functions_and_touched_variants(tmp_path: Path) -> None:
    source = textwrap.dedent("""\
        import functools

        LIMIT = 3


        @functools.cache
        def outer(x, eps=1e-5):
            def inner(y):
                return y + 1
            return inner(x) * 2


        class Box:
            def size(self):
                return LIMIT


        def plain(x):
            def helper(y):
                return y - 1
            return helper(x)
        """)
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "m.py").write_text(source)

    def mutation(old: str, new: str) -> Mutation:
        after = source.replace(old, new)
        return Mutation(
            "m", "python", "torch/m.py", "-", "-", git_diff("torch/m.py", source, after)
        )

    # `outer` is memoized: its body (and what it nests) runs once per process, so a trace
    # credits it to whichever variant ran first: no restriction.
    assert changed_functions(mutation("y + 1", "y + 2"), tmp_path) is None
    assert changed_functions(mutation("inner(x) * 2", "inner(x) * 3"), tmp_path) is None
    assert changed_functions(mutation("y - 1", "y - 2"), tmp_path) == {
        "torch/m.py:plain.<locals>.helper"
    }
    assert changed_functions(mutation("return LIMIT", "return LIMIT + 1"), tmp_path) == {
        "torch/m.py:Box.size"
    }
    # module level, a decorator and default values run at import: no restriction
    assert changed_functions(mutation("LIMIT = 3", "LIMIT = 4"), tmp_path) is None
    assert changed_functions(mutation("@functools.cache", "@functools.lru_cache"), tmp_path) is None
    assert changed_functions(mutation("eps=1e-5", "eps=1e-6"), tmp_path) is None

    trace = ImpactMap(
        functions={
            "a": frozenset({"torch/m.py:outer.<locals>.inner"}),
            "b": frozenset({"torch/other.py:f"}),
        },
        aten_ops={"a": frozenset({"aten::sigmoid"}), "b": frozenset({"aten::abs"})},
    )
    kernel = Mutation("k", "kernel", "x.cpp", "-", "-", "", ops=("aten::sigmoid",))
    assert touched_variants(kernel, trace, ["a", "b"]) == {"a"}
    assert touched_variants(kernel, trace, ["a", "b", "untraced"]) is None
    session = ImpactMap(
        functions=trace.functions, aten_ops=trace.aten_ops, session_ops=frozenset({"aten::sigmoid"})
    )
    assert touched_variants(kernel, session, ["a", "b"]) is None


# --- end to end ---------------------------------------------------------------------------


def bench_selection(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The benchmark as its documentation runs it, from the checkout's root."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.selection", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_replay_end_to_end_with_the_restriction_checked(tmp_path: Path) -> None:
    """A perturbed sigmoid kernel fails the sigmoid variant, which the selector picks; an
    identity rewrite changes nothing; the restricted ground truth equals the full one."""
    mutations = _write_set(
        tmp_path / "set.yaml",
        [
            _kernel_entry(),
            _kernel_entry("k-sigmoid-refactor", {"identity": True}),
            _softsign_entry(),
        ],
    )
    out = tmp_path / "out"
    done = bench_selection(
        "--mutations",
        str(mutations),
        "--out",
        str(out),
        "--specs",
        str(MICRO_SPEC),
        "--check-restriction",
        "k-sigmoid",
        "--record",
        str(tmp_path / "selection.json"),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "selection.json").read_text())
    by_id = {m["id"]: m for m in record["mutations"]}
    sigmoid = by_id["k-sigmoid"]
    assert sigmoid["failing_ids"] == {"micro::compare_cpu::sigmoid::float32": "passed -> failed"}
    assert sigmoid["caught"] == ["micro::compare_cpu::sigmoid::float32"]
    assert sigmoid["ground_truth_restricted"] and sigmoid["restriction_exact"]
    assert sigmoid["ground_truth_ran"] < record["inventory"]["runnable"]
    assert by_id["k-sigmoid-refactor"]["failing"] == 0
    # softsign runs the same Python on the device and the CPU: the comparison cannot see it
    assert by_id["py-softsign"]["failing"] == 0
    assert record["test_recall"] == 1.0 and record["change_recall"] == 1.0
    for key in (
        "test_recall",
        "change_recall",
        "time_ratio",
        "count_ratio",
        "mutations",
        "command",
    ):
        assert key in record
    assert (out / "impact-map.json").exists() and (out / "baseline.json").exists()

    # Re-judging the recorded ground truth (no tests run) gives the same figures, and the
    # selector given the impact map as well.
    again = bench_selection(
        "--mutations",
        str(mutations),
        "--out",
        str(out),
        "--rescore",
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    rescored = json.loads((out / "selection.json").read_text())
    for key in ("test_recall", "change_recall", "count_ratio", "time_ratio"):
        assert rescored[key] == record[key]
    assert rescored["alternative"]["test_recall"] == 1.0


@pytest.mark.slow
def test_impact_map_records_functions_and_nested_aten_ops(tmp_path: Path) -> None:
    from selector import ImpactMap

    ids = tmp_path / "ids.txt"
    ids.write_text(
        "micro::compare_cpu::nn.functional.softsign::float32\n"
        "micro::compare_cpu::sigmoid::float32\n"
    )
    out = tmp_path / "impact.json"
    done = spyre_ci(
        "impact-map", "--out", str(out), "--specs", str(MICRO_SPEC), "--ids", str(ids), timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    impact = ImpactMap.from_json(data)  # the format the selector reads
    softsign = "micro::compare_cpu::nn.functional.softsign::float32"
    sigmoid = "micro::compare_cpu::sigmoid::float32"
    assert "torch/nn/functional.py:softsign" in impact.functions[softsign]
    assert "torch/nn/functional.py:softsign" not in impact.functions[sigmoid]
    assert "aten::sigmoid" in impact.aten_ops[sigmoid]
    # softsign's Python calls abs and add: aten calls made below the Python frontend count
    assert {"aten::abs", "aten::add"} <= impact.aten_ops[softsign]
    assert "aten::sigmoid" not in impact.aten_ops[softsign]
    assert "functions" in data["session"] and data["untraced"] == []


def test_a_kernel_mutation_that_overrides_nothing_is_refused(tmp_path: Path) -> None:
    import os

    # matmul is CompositeImplicitAutograd (all overloads): its CPU work is mm's kernel, so a
    # CPU registration would never run and the mutation would silently change nothing.
    entry = _kernel_entry("k-matmul")
    entry["ops"] = ["aten::matmul"]
    mutation = load_mutations(_write_set(tmp_path / "set.yaml", [entry]))[0]
    env = {**os.environ, **subprocess_env(mutation, tmp_path / "work")}
    done = subprocess.run(
        [sys.executable, "-c", "import torch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert done.returncode != 0
    assert "none of aten::matmul has a CPU or CompositeExplicitAutograd kernel" in done.stderr


def test_kernel_override_keeps_python_scalars_working(tmp_path: Path) -> None:
    entry = _kernel_entry("k-mul")
    entry["ops"] = ["aten::mul", "aten::mul_"]
    mutation = load_mutations(_write_set(tmp_path / "set.yaml", [entry]))[0]
    env = subprocess_env(mutation, tmp_path / "work")
    code = (
        "import torch\n"
        "a = torch.ones(2)\n"
        "print((a * 3)[0].item(), (torch.arange(3) * 2).tolist(),"
        " (torch.arange(3) * 2.5).dtype, (a.to('spyre') * 3).cpu()[0].item())"
    )
    # x2 on the CPU float result (a wrapped scalar included); integers and the device untouched
    assert _python(code, env) == "6.0 [0, 2, 4] torch.float32 3.0"
