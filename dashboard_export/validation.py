"""The JSON Schemas (Draft 2020-12) of every format this package writes, shipped as data.

`validate(kind, document)` raises ExportError naming the first wrong field. JSON-in-a-string
columns (`failed_tests_json`, `environment`) are decoded and checked against their
`contentSchema`, which plain Draft 2020-12 validation treats as an annotation only.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from dashboard_export import ExportError

KINDS = (
    "callback",
    "hud_envelope",
    "crcr_workflow_job",
    "test_run",
    "test_run_summary",
    "failed_test_runs",
    "run_record",
)
_BASE = "https://spyre-ci.invalid/schemas/"


@cache
def schema(kind: str) -> dict[str, Any]:
    """The schema document of one kind (see KINDS)."""
    if kind not in KINDS:
        raise ExportError(f"no schema named {kind!r}; known: {', '.join(KINDS)}")
    text = resources.files("dashboard_export.schemas").joinpath(f"{kind}.schema.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


@cache
def _registry() -> Registry:
    resources_ = [(f"{_BASE}{k}.schema.json", Resource.from_contents(schema(k))) for k in KINDS]
    return Registry().with_resources(resources_)


@cache
def validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator(schema(kind), registry=_registry())


def errors(kind: str, document: Any) -> list[str]:
    """Every problem with `document` as `kind`, each as `<json path>: <message>`."""
    found = [
        f"{error.json_path}: {error.message}"
        for error in sorted(validator(kind).iter_errors(document), key=lambda e: e.json_path)
    ]
    if kind == "crcr_workflow_job" and isinstance(document, dict):
        found.extend(_content_errors(document))
    return found


def validate(kind: str, document: Any) -> None:
    """Raise ExportError if `document` is not a valid `kind`."""
    problems = errors(kind, document)
    if problems:
        shown = "; ".join(problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ExportError(f"invalid {kind}: {shown}{more}")


def _content_errors(row: dict[str, Any]) -> list[str]:
    found = []
    for column in ("failed_tests_json", "environment"):
        prop = schema("crcr_workflow_job")["properties"][column]
        try:
            content = json.loads(row.get(column, ""))
        except (TypeError, json.JSONDecodeError) as exc:
            found.append(f"$.{column}: not JSON: {exc}")
            continue
        inner = Draft202012Validator(
            {"$ref": _BASE + prop["contentSchema"]["$ref"]}, registry=_registry()
        )
        found.extend(
            f"$.{column}{e.json_path[1:]}: {e.message}" for e in inner.iter_errors(content)
        )
    return found
