"""The backend under test as one record, written as the object the files have always held."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from contracts.backend import BackendId

SPYRE = BackendId("backend_under_test", "0.4.0", "spyre", "0123456789abcdef")
WRITTEN = (
    '{"package": "backend_under_test", "version": "0.4.0", "device": "spyre", '
    '"digest": "0123456789abcdef"}'
)


def test_it_writes_the_object_it_always_was() -> None:
    assert json.dumps(SPYRE.to_json()) == WRITTEN
    assert dict(SPYRE) == SPYRE.to_json()  # the items the kept base outcomes are keyed by
    assert json.dumps(replace(SPYRE, digest="").to_json()) == WRITTEN.replace(
        ', "digest": "0123456789abcdef"', ""
    )


@pytest.mark.parametrize(
    "data",
    [
        json.loads(WRITTEN),
        {"package": "backend_under_test", "version": "0.4.0", "device": "spyre"},  # no digest
        {"package": "other_backend", "device": "other", "from_a_newer_version": "x"},
        {},  # a record from before the backend was kept
    ],
)
def test_a_kept_backend_reads_and_writes_back_the_same_text(data: dict[str, str]) -> None:
    read = BackendId.from_json(data)
    assert json.dumps(read.to_json()) == json.dumps(data)
    assert bool(read) == bool(data)


def test_what_is_not_an_object_reads_as_none_kept() -> None:
    assert BackendId.from_json(None) == BackendId() and not BackendId.from_json([1])


def test_the_same_backend_is_the_same_package_version_device_and_files() -> None:
    assert SPYRE.same_as(BackendId.from_json(json.loads(WRITTEN)))
    assert not SPYRE.same_as(replace(SPYRE, version="0.5.0"))
    assert not SPYRE.same_as(replace(SPYRE, device="spyre:1"))
    assert not SPYRE.same_as(replace(SPYRE, digest=""))  # files named on one side only
    unnamed = replace(SPYRE, digest="")
    assert unnamed.same_as(replace(unnamed, extra={"from_a_newer_version": "x"}))
