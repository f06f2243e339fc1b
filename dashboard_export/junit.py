"""Read JUnit XML with a real XML parser, the way upstream's tools/stats/upload_test_stats.py does.

Each `<testcase>` becomes a dict: its attributes become keys (numbers converted), inner text
becomes `text`, and child elements (`failure`, `error`, `skipped`, `rerun`, `system-out`,
`system-err`, `properties`, ...) become nested objects, a list when a tag repeats.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dashboard_export import ExportError
from suites.model import Outcome, Status

# Properties a runner may record on a testcase (pytest `record_property`) to name the
# variant and its exact status when the JUnit result alone cannot tell (timeout, crash).
VARIANT_PROPERTY = "variant_id"
STATUS_PROPERTY = "status"
# torch-spyre's mark of an attempt that is a retry, and of what kind (comma-separated kinds).
RETRIED_PROPERTY = "result.retried"
RERUN_REPORT = "rerun"  # Verify's reruns (`workflows.run.verification`), reports `rerun.*.xml`
ATTEMPTLESS_REPORTS = ("base", "reference")  # the A/B runs' reports, on another torch
ATTEMPT_KEY = "report_kind"  # which kind of report a testcase came from (`attempts_in`)
_XFAIL_TYPES = ("pytest.xfail",)


def read_junit(path: str | Path) -> list[dict[str, Any]]:
    """Every `<testcase>` of one JUnit XML file, as upstream-shaped dicts."""
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise ExportError(f"{path}: no such JUnit file") from None
    except ET.ParseError as exc:
        line, col = exc.position
        raise ExportError(f"{path}:{line}:{col}: not well-formed JUnit XML: {exc}") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ExportError(f"{path}: root element is <{root.tag}>, not <testsuites>/<testsuite>")
    return [element_to_dict(case) for case in root.iter("testcase")]


def read_junit_dir(directory: str | Path) -> list[dict[str, Any]]:
    """All testcases of every `*.xml` under a directory, each tagged with `invoking_file`.

    Upstream records the folder a report sits in as the invoking file; here it is the
    report's stem (one report per shard), which plays the same role for summaries.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ExportError(f"{directory}: no such JUnit directory")
    cases: list[dict[str, Any]] = []
    for report in sorted(directory.rglob("*.xml"), key=_natural):
        for case in read_junit(report):
            case["invoking_file"] = report.stem
            cases.append(case)
    return cases


def element_to_dict(element: ET.Element) -> dict[str, Any]:
    """One XML element as a JSON-ready dict (attributes, text, tail, children)."""
    out: dict[str, Any] = {key: _number(value) for key, value in element.attrib.items()}
    if element.text and element.text.strip():
        out["text"] = element.text
    if element.tail and element.tail.strip():
        out["tail"] = element.tail
    for child in element:
        value = element_to_dict(child)
        if child.tag not in out:
            out[child.tag] = value
        elif isinstance(out[child.tag], list):
            out[child.tag].append(value)
        else:
            out[child.tag] = [out[child.tag], value]
    return out


def as_list(value: Any) -> list[dict[str, Any]]:
    """A child tag's value as a list, whether it appeared once (dict) or more (list)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def properties(case: Mapping[str, Any]) -> dict[str, str]:
    """`<properties><property name= value=/></properties>` as a flat dict."""
    found: dict[str, str] = {}
    for block in as_list(case.get("properties")):
        for prop in as_list(block.get("property")):
            if "name" in prop:
                found[str(prop["name"])] = str(prop.get("value", ""))
    return found


def case_id(case: Mapping[str, Any]) -> str:
    """The variant id of a testcase: its `variant_id` property, else its name."""
    return properties(case).get(VARIANT_PROPERTY) or str(case.get("name", ""))


def case_status(case: Mapping[str, Any]) -> Status:
    """What happened, from the child tags pytest writes (or an explicit `status` property)."""
    recorded = properties(case).get(STATUS_PROPERTY)
    if recorded in {str(s) for s in Status}:
        return Status(recorded)
    if case.get("error") is not None:
        return Status.ERROR
    if case.get("failure") is not None:
        first = as_list(case["failure"])[0]
        if "Timeout" in str(first.get("message", "")).split("\n", 1)[0]:
            return Status.TIMEOUT
        return Status.FAILED
    if case.get("skipped") is not None:
        first = as_list(case["skipped"])[0]
        return Status.XFAILED if first.get("type") in _XFAIL_TYPES else Status.SKIPPED
    return Status.PASSED


def case_message(case: Mapping[str, Any]) -> str:
    """The one message a reader needs: failure/error/skip message, else the text's last line."""
    for tag in ("error", "failure", "skipped"):
        for child in as_list(case.get(tag)):
            message = str(child.get("message", "")).strip()
            if message:
                return message
            text = str(child.get("text", "")).strip()
            if text:
                return text.splitlines()[-1]
    return ""


def outcomes(cases: Iterable[Mapping[str, Any]]) -> list[Outcome]:
    """Map testcases to Outcomes (testcase name or `variant_id` property = variant id)."""
    found: dict[str, Outcome] = {}
    for case in cases:
        vid = case_id(case)
        if not vid:
            raise ExportError(f"JUnit testcase without a name: {dict(case)!r:.200}")
        status = case_status(case)
        outcome = Outcome(
            id=vid,
            status=status,
            duration_s=float(case.get("time", 0.0) or 0.0),
            message=case_message(case) if status is not Status.PASSED else "",
        )
        # pytest writes a second testcase for a teardown error of a test that ran: the
        # error wins, the durations add up.
        previous = found.get(vid)
        if previous is not None:
            worst = outcome if outcome.status.is_failure else previous
            outcome = Outcome(
                vid, worst.status, previous.duration_s + outcome.duration_s, worst.message
            )
        found[vid] = outcome
    return list(found.values())


def report_kind(stem: str) -> str | None:
    """What a JUnit report under a run's `junit/` holds, from its name
    (`<shard>.<pid>.<n>.xml`): "first" (a shard's or the expansion's first attempts, and any
    report named otherwise), "rerun" (Verify's rerun of failures), or None for the A/B runs
    on another torch (`base`, `reference`): evidence about that torch, not attempts of these
    tests."""
    shard = stem.split(".", 1)[0]
    if shard in ATTEMPTLESS_REPORTS:
        return None
    return "rerun" if shard == RERUN_REPORT else "first"


def attempts_in(directory: str | Path) -> list[dict[str, Any]]:
    """The testcases of a run's attempts, in the order they ran: first attempts, then
    reruns (each group in natural file order), each tagged with its report's kind
    (`ATTEMPT_KEY`); the A/B reports on another torch are left out (`report_kind`)."""
    cases = read_junit_dir(directory)
    kinds = [report_kind(str(case.get("invoking_file", ""))) for case in cases]
    ordered: list[dict[str, Any]] = []
    for wanted in ("first", "rerun"):
        for case, kind in zip(cases, kinds, strict=True):
            if kind == wanted:
                ordered.append({**case, ATTEMPT_KEY: kind})
    return ordered


def attempt_cases(directory: str | Path | None) -> list[dict[str, Any]] | None:
    """A run's JUnit folder as one testcase per variant, its attempts in it (`attempts_in`,
    `merge_attempts`); None when there is no such folder."""
    if directory is None or not Path(directory).is_dir():
        return None
    return merge_attempts(attempts_in(directory))


def retried_kinds(case: Mapping[str, Any]) -> list[str]:
    """The kinds a testcase's `result.retried` property names (torch-spyre's mark on an
    attempt that is a retry: `stall`, `signal`, `pod`; ours: `rerun`, `zygote`)."""
    value = properties(case).get(RETRIED_PROPERTY, "")
    return [kind.strip() for kind in value.split(",") if kind.strip()]


def merge_attempts(cases: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One testcase per variant: the last attempt, every earlier one kept under `rerun`.

    A run reruns failures in new reports (`rerun.<pid>.<n>.xml`, `attempts_in`); upstream's
    rows keep the final result and list earlier tries under `rerun`, as pytest-rerunfailures
    writes them: an earlier attempt's failure and error entries (one entry of its status for
    an attempt that had neither). What kind of retry each later attempt was goes into the
    `result.retried` property, one kind per retry in the order they ran, as torch-spyre marks
    it: the attempt's own mark when its runner wrote one (`stall`, `zygote`, ...), else
    `rerun` for a rerun report's, else `retry`. The row keeps its first attempt's
    `invoking_file`, so summaries count it once, under the shard that ran it. Two testcases
    of one variant in one report (pytest's second one for a teardown error) are one attempt.
    """
    merged: dict[str, dict[str, Any]] = {}
    report_of: dict[str, Any] = {}  # variant -> the report its last attempt came from
    for case in cases:
        vid = case_id(case)
        current = dict(case)
        previous = merged.get(vid)
        report = current.get("invoking_file")
        if previous is None or report_of[vid] == report:
            merged[vid] = current if previous is None else _same_attempt(previous, current)
            report_of[vid] = report
            continue
        report_of[vid] = report
        reruns = as_list(previous.get("rerun")) + _as_rerun(previous)
        kinds = retried_kinds(previous)
        own = [k for k in retried_kinds(current) if k not in kinds]
        kinds += own or [RERUN_REPORT if current.get(ATTEMPT_KEY) == "rerun" else "retry"]
        current["rerun"] = reruns + as_list(current.get("rerun"))
        current["invoking_file"] = previous.get("invoking_file", current.get("invoking_file"))
        merged[vid] = with_property(current, RETRIED_PROPERTY, ",".join(kinds))
    return list(merged.values())


def with_property(case: Mapping[str, Any], name: str, value: str) -> dict[str, Any]:
    """The testcase with `<property name= value=>` set (replaced when it was there)."""
    kept = [
        dict(prop)
        for block in as_list(case.get("properties"))
        for prop in as_list(block.get("property"))
        if prop.get("name") != name
    ]
    return {**case, "properties": {"property": [*kept, {"name": name, "value": value}]}}


def _as_rerun(attempt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An earlier attempt as `rerun` entries: its failures and errors, else its status."""
    entries = [dict(d) for tag in ("failure", "error") for d in as_list(attempt.get(tag))]
    if entries:
        return entries
    return [{"type": str(case_status(attempt)), "message": case_message(attempt), "text": ""}]


def _same_attempt(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """pytest's two testcases of one test (call, then a teardown error) as one attempt: the
    first, with the second's failure when only the second failed, their times added."""
    merged = dict(first)
    if case_status(second).is_failure and not case_status(first).is_failure:
        for tag in ("failure", "error", "skipped"):
            merged.pop(tag, None)
        merged.update({tag: second[tag] for tag in ("failure", "error") if tag in second})
    merged["time"] = float(first.get("time", 0.0) or 0.0) + float(second.get("time", 0.0) or 0.0)
    return merged


def _natural(path: Path) -> list[Any]:
    # shard-0.10.xml after shard-0.9.xml: attempts sort by number, not by text.
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _number(value: str) -> Any:
    # As upstream: XML carries strings; numbers become numbers so they aggregate. Names
    # like "nan" or "inf" stay strings: JSON has no non-finite numbers.
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        return number if math.isfinite(number) else value
    return value
