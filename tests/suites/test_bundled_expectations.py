"""The bundled expectations agree with every full run recorded on the installed torch.

`data/full-run-<torch>[-<cpu>].json.gz` holds the outcome of every variant of a full run
(`spyre-ci run --event examples/events/nightly.json --full`) as statuses only: no message,
no path of the machine that ran it, and the CPU it ran on (model, flags, torch's CPU
capability, whether oneDNN has 16-bit float kernels there). One file per machine kind:
ATen picks kernels by what the CPU can do, so a 16-bit variant can pass on one x86-64 CPU
and fail on another. Such a variant says so in its expectation: a non-strict xfail whose
reason starts with `depends on the CPU` (and names where it passes and where it fails); the
check takes either outcome for those only.

When the specs, the backend or torch change, re-run and re-record on each machine:
`python -m tests.suites.test_bundled_expectations out/run.json` (the file is named after the
CPU it runs on; `--cpu-tag TAG` names it otherwise).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from suites.model import Expectation, Status

DATA = Path(__file__).parent / "data"
PASSING = frozenset({Status.PASSED, Status.XPASSED})
# A test may skip itself at run time (no error inputs for an op, say): no contradiction.
AS_EXPECTED = PASSING | {Status.SKIPPED}
FAILING = frozenset(s for s in Status if s.is_failure) | {Status.XFAILED}
# The start of the reason of an expectation whose outcome depends on the CPU it runs on
# (the audit's: it never proposes removing one for a pass on one CPU).
from suites.audit import CPU_DEPENDENT  # noqa: E402

RERECORD = (
    "spyre-ci run --event examples/events/nightly.json --full --out out && "
    "python -m tests.suites.test_bundled_expectations out/run.json"
)
# Outcomes a recorded run no longer speaks for: the variant's check changed after the run
# was recorded on a machine not at hand to re-record. File -> id -> why (with the evidence).
SUPERSEDED: dict[str, dict[str, str]] = {
    "full-run-2.13.0.json.gz": {
        "ops::numpy_ref::nn.functional.tanhshrink::float16": (
            "recorded at atol 1e-3; at float16's default atol 1e-5 it fails wherever tanh "
            "rounds correctly: the result is x minus the correctly rounded float16 tanh(x), "
            "element for element, 60,652 elements of sample 3 off the rounded float64 "
            "reference (test_reference_templates.py shows it)"
        ),
    },
}
# /proc/cpuinfo fields kept in a recorded run (the rest names this one machine).
_CPU_FIELDS = {
    "vendor_id": "vendor",
    "model name": "model",
    "cpu family": "family",
    "model": "model_number",
}


def depends_on_cpu(expectation: Expectation, reason: str) -> bool:
    """Whether an expectation says its outcome depends on the CPU (a non-strict xfail)."""
    return expectation is Expectation.XFAIL and reason.startswith(CPU_DEPENDENT)


def recorded_path(torch_version: str, cpu_tag: str = "", data: Path = DATA) -> Path:
    suffix = f"-{cpu_tag}" if cpu_tag else ""
    return data / f"full-run-{torch_version}{suffix}.json.gz"


def recorded_runs(torch_version: str, data: Path = DATA) -> list[Path]:
    """Every full run recorded on this torch version, whatever CPU ran it."""
    exact = re.compile(rf"full-run-{re.escape(torch_version)}(-[a-z0-9-]+)?\.json\.gz")
    return sorted(p for p in data.glob("full-run-*.json.gz") if exact.fullmatch(p.name))


def read_run(path: Path) -> dict[str, Any]:
    return dict(json.loads(gzip.decompress(path.read_bytes())))


def cpu_of_this_machine(cpuinfo: str | None = None) -> dict[str, Any]:
    """The CPU a run is recorded on: model, flags, torch's CPU capability and whether oneDNN
    has float16/bfloat16 kernels here (these decide which ATen kernels run)."""
    import platform

    import torch

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            cpuinfo = ""
    first = cpuinfo.split("\n\n", 1)[0]
    fields = {
        k.strip(): v.strip()
        for k, _, v in (line.partition(":") for line in first.splitlines())
        if k.strip()
    }
    cpu: dict[str, Any] = {name: fields[key] for key, name in _CPU_FIELDS.items() if key in fields}
    cpu.setdefault("model", platform.processor() or platform.machine())
    cpu["flags"] = sorted(fields.get("flags", "").split())
    cpu["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    cpu["onednn_float16"] = bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    cpu["onednn_bfloat16"] = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return cpu


def cpu_tag(cpu: Mapping[str, Any]) -> str:
    """A file-name tag for a CPU: its model and torch's capability (`amd-epyc-avx2`)."""
    words = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*", " ", str(cpu.get("model", "")).lower())
    words = re.sub(r"[^a-z0-9]+", "-", words).strip("-") or "cpu"
    capability = str(cpu.get("torch_cpu_capability", "")).lower()
    return f"{words}-{capability}" if capability else words


def record(
    run_json: Path, cpu: Mapping[str, Any] | None = None, tag: str = "", data: Path = DATA
) -> Path:
    """Write a full run's statuses (its run.json) and the CPU it ran on (this machine's by
    default) as a recorded outcome file named after that CPU."""
    body = json.loads(run_json.read_text(encoding="utf-8"))
    if body["plan"] and body["plan"].get("decision") not in (None, "full"):
        raise SystemExit(f"{run_json}: not a full run (decision {body['plan']['decision']!r})")
    version = body["environment"]["torch_version"]
    statuses = {r["id"]: r["status"] for r in body["results"] if r["status"] != "removed"}
    cpu = dict(cpu_of_this_machine() if cpu is None else cpu)
    out = {"torch": version, "cpu": cpu, "statuses": dict(sorted(statuses.items()))}
    path = recorded_path(version, tag or cpu_tag(cpu), data)
    with gzip.GzipFile(path, "wb", mtime=0) as stream:
        stream.write((json.dumps(out, indent=0) + "\n").encode())
    return path


def disagreements(
    expected: Mapping[str, Expectation],
    statuses: Mapping[str, str],
    cpu_dependent: frozenset[str] = frozenset(),
    superseded: frozenset[str] = frozenset(),
) -> list[str]:
    """Where a recorded outcome contradicts its variant's expectation, one line each. A
    variant in `cpu_dependent` may pass or fail; the run does not speak for `superseded`."""
    lines = []
    for vid, expectation in sorted(expected.items()):
        if vid in superseded:
            continue
        status = statuses.get(vid)
        if status is None:
            if expectation is not Expectation.SKIP:
                lines.append(f"{vid}: {expectation}, not in the recorded run (re-record)")
            continue
        seen = Status(status)
        if vid in cpu_dependent:
            continue
        if expectation is Expectation.PASS and seen not in AS_EXPECTED:
            lines.append(f"{vid}: expected to pass, the run saw {seen}")
        elif expectation in (Expectation.XFAIL, Expectation.XFAIL_STRICT) and seen in PASSING:
            lines.append(f"{vid}: an xfail, the run saw it pass: the expectation can go")
    lines += [f"{vid}: recorded, but no bundled variant" for vid in statuses if vid not in expected]
    return lines


def split_outcomes(runs: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Variants that passed in one recorded run and failed in another: id -> run -> status."""
    ids = {vid for statuses in runs.values() for vid in statuses}
    split: dict[str, dict[str, str]] = {}
    for vid in sorted(ids):
        seen = {name: s[vid] for name, s in runs.items() if vid in s}
        kinds = {Status(s) in PASSING for s in seen.values() if Status(s) is not Status.SKIPPED}
        if len(kinds) == 2:
            split[vid] = seen
    return split


def without_superseded(name: str, statuses: Mapping[str, str]) -> dict[str, str]:
    gone = SUPERSEDED.get(name, {})
    return {vid: status for vid, status in statuses.items() if vid not in gone}


def superseded_in(name: str) -> frozenset[str]:
    return frozenset(SUPERSEDED.get(name, {}))


@pytest.fixture(scope="module")
def bundled() -> dict[str, tuple[Expectation, str]]:
    pytest.importorskip("torch")
    from suites.expand import expand, load_suites

    return {v.id: (v.expectation, v.reason) for v in expand(load_suites(None)).variants}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, str]]:
    torch = pytest.importorskip("torch")
    version = torch.__version__.split("+")[0]
    paths = recorded_runs(version)
    if not paths:
        pytest.skip(f"no full run recorded on torch {version}: {RERECORD}")
    return {p.name: read_run(p)["statuses"] for p in paths}


@pytest.mark.parametrize("path", sorted(DATA.glob("full-run-*.json.gz")), ids=lambda p: p.name)
def test_a_recorded_full_run_is_a_full_run_without_machine_paths(path: Path) -> None:
    text = gzip.decompress(path.read_bytes()).decode()
    assert ".venv" not in text and "/work/" not in text
    body = json.loads(text)
    assert len(body["statuses"]) > 8000 and set(body["statuses"].values()) <= set(Status)
    if path.name != f"full-run-{body['torch']}.json.gz":  # named after a CPU: it says which
        assert path.name.startswith(f"full-run-{body['torch']}-")
        cpu = body["cpu"]
        assert cpu["model"] and cpu["flags"] and cpu["torch_cpu_capability"]
        assert isinstance(cpu["onednn_float16"], bool) and isinstance(cpu["onednn_bfloat16"], bool)


def test_superseded_outcomes_name_recorded_runs_and_variants() -> None:
    for name, ids in SUPERSEDED.items():
        statuses = read_run(DATA / name)["statuses"]
        assert set(ids) <= set(statuses), name
        assert all(len(why) > 40 for why in ids.values())


def test_bundled_specs_carry_no_path_of_a_machine() -> None:
    specs = Path(__file__).parents[2] / "suites" / "specs"
    for spec in specs.glob("*.yaml"):
        text = spec.read_text(encoding="utf-8")
        assert ".venv" not in text and "site-packages" not in text and "/work/" not in text, spec


# Not `slow`: the promise that the bundled expectations hold on every recorded CPU is checked
# in the default run (one expansion of every bundled variant, about 15 s, shared by the two).
def test_bundled_expectations_agree_with_every_recorded_full_run(
    bundled: dict[str, tuple[Expectation, str]], runs: dict[str, dict[str, str]]
) -> None:
    expected = {vid: e for vid, (e, _) in bundled.items()}
    either = frozenset(vid for vid, (e, reason) in bundled.items() if depends_on_cpu(e, reason))
    problems = [
        f"{name}: {line}"
        for name, statuses in runs.items()
        for line in disagreements(expected, statuses, either, superseded_in(name))
    ]
    assert not problems, (
        f"{len(problems)} bundled expectation(s) disagree with a recorded full run; fix the "
        "expectations (`spyre-ci suites audit --results out/run.json --patch fix.diff`), or, "
        f"when the change is meant, re-record: {RERECORD}\n" + "\n".join(problems[:50])
    )


def test_a_variant_whose_outcome_differs_between_cpus_says_so(
    bundled: dict[str, tuple[Expectation, str]], runs: dict[str, dict[str, str]]
) -> None:
    split = split_outcomes({name: without_superseded(name, s) for name, s in runs.items()})
    unmarked = [
        f"{vid}: {seen}"
        for vid, seen in split.items()
        if vid in bundled and not depends_on_cpu(*bundled[vid])
    ]
    assert not unmarked, (
        f"{len(unmarked)} variant(s) pass on one recorded CPU and fail on another; make each "
        f"a non-strict xfail whose reason starts with {CPU_DEPENDENT!r} and says where it "
        "passes and where it fails:\n" + "\n".join(unmarked[:50])
    )
    if len(runs) > 1:
        unfounded = sorted(vid for vid, (e, reason) in bundled.items() if depends_on_cpu(e, reason))
        unfounded = [vid for vid in unfounded if vid not in split]
        assert not unfounded, (
            f"{len(unfounded)} expectation(s) say they depend on the CPU, but every recorded "
            "run agrees on them: " + ", ".join(unfounded[:20])
        )


@pytest.mark.parametrize(
    ("expectation", "status", "says"),
    [
        (Expectation.PASS, "failed", "expected to pass, the run saw failed"),
        (Expectation.XFAIL, "xpassed", "the expectation can go"),
        (Expectation.XFAIL, "passed", "the expectation can go"),
        (Expectation.XFAIL_STRICT, "passed", "the expectation can go"),
        (Expectation.PASS, None, "not in the recorded run"),
    ],
)
def test_a_disagreement_is_named(expectation: Expectation, status: str | None, says: str) -> None:
    statuses = {} if status is None else {"ops::compare_cpu::abs::float32": status}
    (line,) = disagreements({"ops::compare_cpu::abs::float32": expectation}, statuses)
    assert line.startswith("ops::compare_cpu::abs::float32: ") and says in line


@pytest.mark.parametrize(
    ("expectation", "status"),
    [
        (Expectation.PASS, "passed"),
        (Expectation.PASS, "xpassed"),  # recorded before its xfail went
        (Expectation.XFAIL, "xfailed"),
        (Expectation.XFAIL, "failed"),  # recorded before its xfail came
        (Expectation.SKIP, "skipped"),
        (Expectation.SKIP, None),
        (Expectation.PASS, "skipped"),  # the test skipped itself
    ],
)
def test_agreement(expectation: Expectation, status: str | None) -> None:
    statuses = {} if status is None else {"a::b::c::float32": status}
    assert disagreements({"a::b::c::float32": expectation}, statuses) == []


@pytest.mark.parametrize("status", ["passed", "xpassed", "xfailed", "failed"])
def test_a_cpu_dependent_variant_may_pass_or_fail(status: str) -> None:
    vid = "ops::numpy_ref::nn.functional.conv_transpose2d::float16"
    assert disagreements({vid: Expectation.XFAIL}, {vid: status}, frozenset({vid})) == []
    # Without the mark, a pass of an xfail is named.
    assert bool(disagreements({vid: Expectation.XFAIL}, {vid: status})) == (status in PASSING)


def test_a_run_does_not_speak_for_a_superseded_variant() -> None:
    vid = "ops::numpy_ref::nn.functional.tanhshrink::float16"
    assert (
        disagreements({vid: Expectation.XFAIL}, {vid: "passed"}, superseded=frozenset({vid})) == []
    )
    assert disagreements({vid: Expectation.XFAIL}, {}, superseded=frozenset({vid})) == []


@pytest.mark.parametrize(
    ("expectation", "reason", "says"),
    [
        (Expectation.XFAIL, "depends on the CPU: passes on X, fails on Y", True),
        (Expectation.XFAIL_STRICT, "depends on the CPU: passes on X, fails on Y", False),
        (Expectation.XFAIL, "AssertionError: depends on the CPU", False),
        (Expectation.PASS, "", False),
    ],
)
def test_what_says_it_depends_on_the_cpu(expectation: Expectation, reason: str, says: bool) -> None:
    assert depends_on_cpu(expectation, reason) is says


def test_split_outcomes_are_a_pass_on_one_run_and_a_failure_on_another() -> None:
    runs = {
        "a": {"x": "passed", "y": "xfailed", "z": "passed", "s": "skipped", "t": "xpassed"},
        "b": {"x": "xfailed", "y": "failed", "z": "xpassed", "s": "failed", "t": "timeout"},
    }
    assert split_outcomes(runs) == {
        "x": {"a": "passed", "b": "xfailed"},
        "t": {"a": "xpassed", "b": "timeout"},
    }


_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse avx2 fma f16c
physical id\t: 0

processor\t: 1
vendor_id\t: AuthenticAMD
"""


def test_a_run_is_recorded_with_the_cpu_it_ran_on(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cpu = cpu_of_this_machine(_CPUINFO)
    assert cpu["vendor"] == "AuthenticAMD" and cpu["model"] == "AMD EPYC"
    assert cpu["family"] == "25" and cpu["model_number"] == "1"
    assert cpu["flags"] == ["avx2", "f16c", "fma", "fpu", "sse"]
    assert "physical id" not in cpu and "processor" not in cpu
    run = tmp_path / "run.json"
    run.write_text(
        json.dumps(
            {
                "plan": {"decision": "full"},
                "environment": {"torch_version": "2.13.0"},
                "results": [
                    {"id": "ops::a::b::float16", "status": "failed"},
                    {"id": "ops::a::c::float16", "status": "removed"},
                ],
            }
        ),
        encoding="utf-8",
    )
    path = record(run, {**cpu, "torch_cpu_capability": "AVX2"}, data=tmp_path)
    assert path.name == "full-run-2.13.0-amd-epyc-avx2.json.gz"
    body = read_run(path)
    assert body["statuses"] == {"ops::a::b::float16": "failed"}
    assert body["cpu"]["model"] == "AMD EPYC" and body["cpu"]["torch_cpu_capability"] == "AVX2"
    assert recorded_runs("2.13.0", tmp_path) == [path]
    assert recorded_runs("2.13", tmp_path) == []
    assert record(run, cpu, tag="zen3", data=tmp_path).name == "full-run-2.13.0-zen3.json.gz"


@pytest.mark.parametrize(
    ("model", "capability", "tag"),
    [
        ("AMD EPYC", "AVX2", "amd-epyc-avx2"),
        (
            "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz",
            "AVX512",
            "intel-xeon-platinum-8480-avx512",
        ),
        ("", "DEFAULT", "cpu-default"),
    ],
)
def test_a_cpu_tag_names_the_model_and_capability(model: str, capability: str, tag: str) -> None:
    assert cpu_tag({"model": model, "torch_cpu_capability": capability}) == tag


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.suites.test_bundled_expectations",
        description="Record full runs (run.json) made on this machine as the bundled outcomes.",
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_JSON")
    parser.add_argument("--cpu-tag", default="", help="file-name tag (default: from this CPU)")
    args = parser.parse_args(argv)
    for name in args.runs:
        print(f"recorded {record(name, tag=args.cpu_tag)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
