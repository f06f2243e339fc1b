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


def merge_attempts(cases: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One testcase per variant: the last attempt, earlier failed attempts as `rerun` entries.

    A shard reruns failures in new reports (`shard.1.xml`, `shard.2.xml`, ...); upstream's
    rows keep the final result and list earlier failed tries under `rerun`, as
    pytest-rerunfailures writes them.
    """
    merged: dict[str, dict[str, Any]] = {}
    for case in cases:
        vid = case_id(case)
        previous = merged.get(vid)
        current = dict(case)
        if previous is not None:
            reruns = as_list(previous.get("rerun"))
            for tag in ("failure", "error"):
                reruns += as_list(previous.get(tag))
            reruns += as_list(current.get("rerun"))
            if reruns:
                current["rerun"] = reruns
        merged[vid] = current
    return list(merged.values())


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
