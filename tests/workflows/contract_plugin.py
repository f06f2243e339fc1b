"""A pytest plugin that speaks the shard runner's contract over plain test functions.

It stands in for `suites.pytest_plugin` (same options, same JSON-lines protocol) so the
runner's crash and hang handling can be tested on tests that really segfault or hang,
without building a YAML suite around them. Variant id of `test_<name>`: `demo::t::<name>::f32`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("spyre")
    group.addoption("--spyre-ids")
    group.addoption("--spyre-results")
    group.addoption("--spyre-timeout", type=float, default=60.0)
    group.addoption("--spyre-specs", action="append", default=[])


def variant_of(item: pytest.Item) -> str:
    return f"demo::t::{item.name.removeprefix('test_')}::f32"


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    with open(config.getoption("--spyre-ids"), encoding="utf-8") as fh:
        wanted = {line.strip() for line in fh if line.strip()}
    items[:] = [item for item in items if variant_of(item) in wanted]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    path = item.config.getoption("--spyre-results")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": "start", "id": variant_of(item)}) + "\n")
    began = time.monotonic()
    item.stash_reports = []  # type: ignore[attr-defined]
    yield
    reports = item.stash_reports  # type: ignore[attr-defined]
    failed = [r for r in reports if r.failed]
    status = "failed" if failed else ("skipped" if any(r.skipped for r in reports) else "passed")
    message = str(failed[0].longrepr)[-200:] if failed else ""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(
            json.dumps(
                {
                    "event": "end",
                    "id": variant_of(item),
                    "status": status,
                    "duration_s": time.monotonic() - began,
                    "message": message,
                }
            )
            + "\n"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    outcome = yield
    item.stash_reports.append(outcome.get_result())  # type: ignore[attr-defined]
