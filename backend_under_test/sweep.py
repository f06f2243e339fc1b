"""The OpInfo compare-with-CPU sweep of the spyre device, and its committed manifest.

The sweep runs upstream's `TestCommon.test_compare_cpu` over every OpInfo of `op_db` in
float32, float16 and bfloat16 (tests/backend_under_test/opinfo_compare_cpu.py) in a pytest
subprocess. Its JUnit XML is reduced to one outcome per (op, dtype) and every failure is put
in a named group whose cause is explained; the result is the manifest
(`backend_under_test/opinfo_manifest.json`) and the table in backend_under_test/README.md.

    python -m backend_under_test.sweep --write    # run the sweep, rewrite both
    python -m backend_under_test.sweep --junit FILE [--permissive-junit FILE] --write

This module never imports torch: the sweep runs in the subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
SWEEP_MODULE = REPO_ROOT / "tests" / "backend_under_test" / "opinfo_compare_cpu.py"
MANIFEST = PACKAGE_DIR / "opinfo_manifest.json"
README = PACKAGE_DIR / "README.md"
TABLE_START = "<!-- opinfo-table:start -->"
TABLE_END = "<!-- opinfo-table:end -->"
_NAME = re.compile(r"^test_compare_cpu_(?P<op>.+)_spyre_(?P<dtype>float32|float16|bfloat16)$")


@dataclass(frozen=True)
class FailureGroup:
    """A named cause of failures: matched on the failure message, explained in the README."""

    name: str
    pattern: str
    cause: str
    rule: bool  # True when the failure is a Spyre rule working as intended


# Order matters: the first group whose pattern matches the message wins.
FAILURE_GROUPS = (
    FailureGroup(
        "rule-dtype",
        r"spyre does not support dtype torch\.(float64|complex)",
        "Spyre rule: float64/complex refused (TypeError naming the dtype); the op "
        "or its sample inputs compute in float64 or complex on the device",
        True,
    ),
    FailureGroup(
        "rule-unlowerable",
        r"spyre cannot lower aten::",
        "Spyre rule: aten::pow / float_power cannot be lowered "
        "(NotImplementedError with a rewrite)",
        True,
    ),
    # Only given to failures that pass with SPYRE_EMU_PERMISSIVE=1 (see `classify`).
    FailureGroup(
        "rule-fp16-compute",
        r"(not close|Tensor-likes are not|Scalars are not)",
        "Spyre rule: matmul-family ops and softmax compute in float16; float32 and "
        "bfloat16 results differ from CPU by more than the 1e-3 tolerance (passes "
        "with the rules off)",
        True,
    ),
    # Only given to numeric mismatches that fail with SPYRE_EMU_PERMISSIVE=1 too.
    FailureGroup(
        "low-precision-path",
        r"(not close|Tensor-likes are not|Scalars are not)",
        "Not a Spyre rule (fails with the rules off too): float16/bfloat16 results "
        "of grid_sample, rsqrt and chunked linear_cross_entropy differ from CPU in "
        "the last bits (grid_sample also at out-of-range samples). The device runs "
        "the same CPU kernels, so the likely cause is a device-dependent branch in "
        "the composite op or a different vectorised/scalar kernel variant; an open "
        "backend issue",
        False,
    ),
    FailureGroup(
        "cpu-kernel-dtype",
        r"not implemented for '(Half|BFloat16)'",
        "Emulation limit: the op's CPU kernel has no float16/bfloat16 version for "
        "this sample (CPU raises the same error; upstream runs this test on CUDA "
        "only, so it expects nothing of CPU here)",
        False,
    ),
    FailureGroup(
        "sparse",
        r"(sparse|Sparse|SparsePrivateUse1)",
        "Limitation: sparse layouts on the device need C++ kernels",
        False,
    ),
    FailureGroup(
        "no-device-generator",
        r"(Generator|generator)",
        "Limitation: no device torch.Generator from Python on torch 2.13 (random "
        "ops take the CPU generator); a sample passing a device generator fails",
        False,
    ),
    FailureGroup(
        "unexpected-success",
        r"(Unexpected success|XPASS|unexpectedly succeeded)",
        "Upstream expected failure that passes here: the CPU kernel runs the op, so "
        "a failure expected of other devices does not happen",
        False,
    ),
)
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class Outcome:
    test: str  # test_compare_cpu_<op>_spyre_<dtype>
    op: str
    dtype: str
    status: str  # passed, failed, skipped, xfailed
    message: str


def classify(message: str, passes_without_rules: bool | None = None) -> str:
    """The failure group of a failure message (`unexplained` when none matches).

    A numeric mismatch is put down to fp16-class compute only when the same test passes
    with the rules off (`passes_without_rules`); otherwise it stays unexplained.
    """
    for group in FAILURE_GROUPS:
        if group.name == "rule-fp16-compute" and not passes_without_rules:
            continue
        if group.name == "low-precision-path" and passes_without_rules is not False:
            continue
        if re.search(group.pattern, message):
            return group.name
    return UNEXPLAINED


def parse_junit(path: Path) -> list[Outcome]:
    """One Outcome per sweep test case in a JUnit XML file."""
    root = ET.parse(path).getroot()
    outcomes = []
    for case in root.iter("testcase"):
        name = case.get("name", "")
        match = _NAME.match(name)
        if match is None:
            continue
        status, message = "passed", ""
        for child in case:
            text = " ".join(filter(None, [child.get("message"), child.text]))[:4000]
            if child.tag in ("failure", "error"):
                status, message = "failed", text
            elif child.tag == "skipped":
                xfail = (
                    child.get("type") == "pytest.xfail"
                    or "xfail" in (child.get("message") or "").lower()
                )
                status, message = ("xfailed" if xfail else "skipped"), text
        outcomes.append(Outcome(name, match["op"], match["dtype"], status, message))
    return outcomes


def build_manifest(
    outcomes: Sequence[Outcome],
    torch_version: str,
    seconds: float | None,
    without_rules: Sequence[Outcome] = (),
) -> dict[str, object]:
    """The manifest: counts, failure groups with causes, and the outcome of every test.

    `without_rules` holds the failed tests rerun with SPYRE_EMU_PERMISSIVE=1: a failure that
    passes there is a Spyre rule at work.
    """
    permissive_passed = {o.test for o in without_rules if o.status == "passed"}
    group_of = {
        o.test: classify(o.message, (o.test in permissive_passed) if without_rules else None)
        for o in outcomes
        if o.status == "failed"
    }
    counts = Counter(o.status for o in outcomes)
    groups = Counter(group_of.values())
    by_dtype: dict[str, Counter[str]] = {}
    for o in outcomes:
        by_dtype.setdefault(o.dtype, Counter())[o.status] += 1
    causes = {g.name: {"cause": g.cause, "spyre_rule": g.rule} for g in FAILURE_GROUPS}
    causes[UNEXPLAINED] = {"cause": "not explained: a backend bug to fix", "spyre_rule": False}
    return {
        "sweep": "TestCommon.test_compare_cpu over op_db, float32/float16/bfloat16",
        "torch": torch_version,
        "seconds": round(seconds, 1) if seconds is not None else None,
        "counts": dict(sorted(counts.items())),
        "counts_by_dtype": {d: dict(sorted(c.items())) for d, c in sorted(by_dtype.items())},
        "failure_groups": {
            name: dict(causes[name], count=count) for name, count in groups.most_common()
        },
        "without_rules": (
            dict(sorted(Counter(o.status for o in without_rules).items()))
            if without_rules
            else None
        ),
        "tests": {
            o.test: (f"failed:{group_of[o.test]}" if o.test in group_of else o.status)
            for o in sorted(outcomes, key=lambda o: o.test)
        },
    }


def render_table(manifest: dict[str, object]) -> str:
    """The README table: outcome counts, then one row per failure group with its cause."""
    counts: dict[str, int] = manifest["counts"]  # type: ignore[assignment]
    by_dtype: dict[str, dict[str, int]] = manifest["counts_by_dtype"]  # type: ignore[assignment]
    groups: dict[str, dict[str, object]] = manifest["failure_groups"]  # type: ignore[assignment]
    statuses = ["passed", "failed", "skipped", "xfailed"]
    lines = ["| dtype | " + " | ".join(statuses) + " |", "|---|" + "---:|" * len(statuses)]
    for dtype, row in by_dtype.items():
        lines.append(f"| {dtype} | " + " | ".join(str(row.get(s, 0)) for s in statuses) + " |")
    lines.append("| **all** | " + " | ".join(f"**{counts.get(s, 0)}**" for s in statuses) + " |")
    lines += ["", "| failure group | tests | Spyre rule? | cause |", "|---|---:|---|---|"]
    for name, group in groups.items():
        rule = "yes" if group["spyre_rule"] else "no"
        lines.append(f"| `{name}` | {group['count']} | {rule} | {group['cause']} |")
    seconds = manifest.get("seconds")
    without_rules = manifest.get("without_rules")
    lines += [
        "",
        f"torch {manifest['torch']}"
        + (f"; the sweep took {seconds} s on this machine" if seconds else "")
        + (
            f"; the failures rerun with SPYRE_EMU_PERMISSIVE=1 give {without_rules}"
            if without_rules
            else ""
        )
        + ".",
    ]
    return "\n".join(lines)


def run_sweep(
    junit: Path,
    extra_env: dict[str, str] | None = None,
    tests: Sequence[str] = (),
    timeout: float = 3600,
) -> float:
    """Run the sweep (or only `tests`, by name) in a pytest subprocess writing `junit`.

    Returns the wall seconds.
    """
    started = time.monotonic()
    targets = [f"{SWEEP_MODULE}::TestCommonPRIVATEUSE1::{name}" for name in tests] or [
        str(SWEEP_MODULE)
    ]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            *targets,
            f"--junitxml={junit}",
        ],
        cwd=REPO_ROOT,
        env=dict(os.environ, **(extra_env or {})),
        timeout=timeout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.monotonic() - started


def _torch_version() -> str:
    probe = "import torch; print(torch.__version__)"
    return subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
    ).stdout.strip()


def update_readme(table: str, readme: Path = README) -> None:
    """Replace the table between the markers in the README."""
    text = readme.read_text()
    start, end = text.index(TABLE_START), text.index(TABLE_END)
    readme.write_text(text[: start + len(TABLE_START)] + "\n" + table + "\n" + text[end:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m backend_under_test.sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--junit",
        type=Path,
        nargs="+",
        help="reduce these JUnit XML files (shards of one sweep) instead of running",
    )
    parser.add_argument(
        "--rerun",
        type=Path,
        help="JUnit XML of a rerun of some tests on newer code: its outcomes replace theirs",
    )
    parser.add_argument(
        "--permissive-junit",
        type=Path,
        help="the failures rerun with SPYRE_EMU_PERMISSIVE=1 (JUnit XML)",
    )
    parser.add_argument(
        "--seconds", type=float, help="wall time of the --junit run, recorded in the manifest"
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite the manifest and the README table"
    )
    args = parser.parse_args(argv)
    seconds = args.seconds
    junits, permissive_junit = args.junit, args.permissive_junit
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    if junits is None:
        junits = [scratch / "spyre-opinfo-sweep.xml"]
        seconds = run_sweep(junits[0])
    outcomes = [outcome for junit in junits for outcome in parse_junit(junit)]
    if args.rerun:
        newer = {o.test: o for o in parse_junit(args.rerun)}
        outcomes = [newer.get(o.test, o) for o in outcomes]
    if not outcomes:
        print(f"{junits}: no sweep test cases found", file=sys.stderr)
        return 2
    if permissive_junit is None:
        # Only the failures need the rules-off verdict: rerun just those.
        permissive_junit = scratch / "spyre-opinfo-sweep-permissive.xml"
        run_sweep(
            permissive_junit,
            {"SPYRE_EMU_PERMISSIVE": "1"},
            tests=[o.test for o in outcomes if o.status == "failed"],
        )
    without_rules = parse_junit(permissive_junit) if permissive_junit else []
    manifest = build_manifest(outcomes, _torch_version(), seconds, without_rules)
    table = render_table(manifest)
    print(table)
    if args.write:
        MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
        update_readme(table)
    return 1 if UNEXPLAINED in manifest["failure_groups"] else 0  # type: ignore[operator]


if __name__ == "__main__":
    raise SystemExit(main())
