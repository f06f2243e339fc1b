"""The bundled expectations agree with what a full run on the installed torch saw.

`data/full-run-<torch>.json.gz` holds the outcome of every variant of a full run
(`spyre-ci run --event examples/events/nightly.json --full`) as statuses only: no message,
no path of the machine that ran it. When the specs, the backend or torch change, re-run it
and re-record: `python -m tests.suites.test_bundled_expectations out/run.json`.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from suites.model import Expectation, Status

DATA = Path(__file__).parent / "data"
PASSING = frozenset({Status.PASSED, Status.XPASSED})
# A test may skip itself at run time (no error inputs for an op, say): no contradiction.
AS_EXPECTED = PASSING | {Status.SKIPPED}
FAILING = frozenset(s for s in Status if s.is_failure) | {Status.XFAILED}
RERECORD = (
    "spyre-ci run --event examples/events/nightly.json --full --out out && "
    "python -m tests.suites.test_bundled_expectations out/run.json"
)


def recorded_path(torch_version: str) -> Path:
    return DATA / f"full-run-{torch_version}.json.gz"


def record(run_json: Path) -> Path:
    """Write a full run's statuses (its run.json) as the recorded outcome file."""
    data = json.loads(run_json.read_text(encoding="utf-8"))
    if data["plan"] and data["plan"].get("decision") not in (None, "full"):
        raise SystemExit(f"{run_json}: not a full run (decision {data['plan']['decision']!r})")
    version = data["environment"]["torch_version"]
    statuses = {r["id"]: r["status"] for r in data["results"] if r["status"] != "removed"}
    body = {"torch": version, "statuses": dict(sorted(statuses.items()))}
    path = recorded_path(version)
    with gzip.GzipFile(path, "wb", mtime=0) as out:
        out.write((json.dumps(body, indent=0) + "\n").encode())
    return path


def disagreements(expected: Mapping[str, Expectation], statuses: Mapping[str, str]) -> list[str]:
    """Where a recorded outcome contradicts its variant's expectation, one line each."""
    lines = []
    for vid, expectation in sorted(expected.items()):
        status = statuses.get(vid)
        if status is None:
            if expectation is not Expectation.SKIP:
                lines.append(f"{vid}: {expectation}, not in the recorded run (re-record)")
            continue
        seen = Status(status)
        if expectation is Expectation.PASS and seen not in AS_EXPECTED:
            lines.append(f"{vid}: expected to pass, the run saw {seen}")
        elif expectation in (Expectation.XFAIL, Expectation.XFAIL_STRICT) and seen in PASSING:
            lines.append(f"{vid}: an xfail, the run saw it pass: the expectation can go")
    lines += [f"{vid}: recorded, but no bundled variant" for vid in statuses if vid not in expected]
    return lines


def test_the_recorded_full_run_is_a_full_run_without_machine_paths() -> None:
    (path,) = DATA.glob("full-run-*.json.gz")
    text = gzip.decompress(path.read_bytes()).decode()
    assert ".venv" not in text and "/work/" not in text
    body = json.loads(text)
    assert len(body["statuses"]) > 8000 and set(body["statuses"].values()) <= set(Status)


def test_bundled_specs_carry_no_path_of_a_machine() -> None:
    specs = Path(__file__).parents[2] / "suites" / "specs"
    for spec in specs.glob("*.yaml"):
        text = spec.read_text(encoding="utf-8")
        assert ".venv" not in text and "site-packages" not in text and "/work/" not in text, spec


def test_bundled_expectations_agree_with_a_recorded_full_run() -> None:
    torch = pytest.importorskip("torch")
    from suites.expand import expand, load_suites

    version = torch.__version__.split("+")[0]
    path = recorded_path(version)
    if not path.exists():
        pytest.skip(f"no full run recorded on torch {version}: {RERECORD}")
    statuses = json.loads(gzip.decompress(path.read_bytes()))["statuses"]
    variants = expand(load_suites(None)).variants
    problems = disagreements({v.id: v.expectation for v in variants}, statuses)
    assert not problems, (
        f"{len(problems)} bundled expectation(s) disagree with the full run recorded in "
        f"{path.name}; fix the expectations (`spyre-ci suites audit --results out/run.json "
        f"--patch fix.diff`), or, when the change is meant, re-record: {RERECORD}\n"
        + "\n".join(problems[:50])
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


def main(argv: Sequence[str]) -> int:
    for name in argv:
        print(f"recorded {record(Path(name))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
