"""The files publisher: one run's every format, validated, written under an output directory.

```
DIR/run.json                                   the RunRecord (input of a re-export)
DIR/callback.json                              completed CRCR callback body
DIR/hud/envelope.json                          the relay-to-HUD body (size-capped)
DIR/hud/crcr_workflow_job.json                 the HUD row
DIR/hud/{test_run,test_run_summary,failed_test_runs}/<workflow_run_id>/<attempt>
                                               gzip JSON lines, upstream S3 key layout
DIR/report.html, DIR/report.md                 the report
DIR/forensics.json                             the new failures' windows and the triage verdict
                                               (only when the record has forensics)
```
`DIR/junit/` and `DIR/plan.json` belong to the pipeline; JUnit found in `DIR/junit/` feeds the
per-test rows and is the evidence the results are checked against (`evidence`: a record
they disagree with is never green, in any of the files). Every file is written whole under
a temporary name and renamed, and content is deterministic, so exporting a run again
replaces each file with the same bytes.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dashboard_export import ExportError, WriteUnavailable, evidence
from dashboard_export.crcr import callback_body, envelope_for, fit_body
from dashboard_export.hud_row import row_for
from dashboard_export.junit import attempt_cases, case_id
from dashboard_export.model import RunRecord
from dashboard_export.report import render_html, render_markdown
from dashboard_export.stats import cases_from_results, collections, object_key
from dashboard_export.validation import validate

FORENSICS_FILE = "forensics.json"


def _collections(record: RunRecord, cases: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The three per-test collections, from JUnit testcases where there are some
    (`attempt_cases`), else from the results. A variant run more than once (reruns) gets one
    row, its earlier attempts under `rerun` and the kind of each retry in `result.retried`; a
    variant with a result but no testcase (a crashed worker writes none) still gets a row."""
    seen = {case_id(c) for c in cases}
    rows = cases + [c for c in cases_from_results(record) if c["name"] not in seen]
    return collections(rows, record)


def write_run(
    record: RunRecord, out_dir: str | Path, junit_dir: str | Path | None = None
) -> dict[str, Path]:
    """Write every format of one run under `out_dir`; returns {artifact name: path}.

    `junit_dir` defaults to `out_dir/junit`. The record is judged against that JUnit first
    (`evidence.with_cases`: its `evidence_gaps`, kept in run.json), so every file says the
    same conclusion. Everything is validated against its schema (per-test rows: one of every
    shape) before anything is written, so a bad record leaves no half export behind.
    """
    out = Path(out_dir)
    junit = Path(junit_dir) if junit_dir is not None else out / "junit"
    cases = attempt_cases(junit)
    if cases is not None:
        record = evidence.with_cases(record, cases)
    callback, _ = fit_body(callback_body(record, "completed"))
    envelope, _ = fit_body(envelope_for(record, "completed"))
    row = row_for(record)
    validate("callback", callback)
    validate("hud_envelope", envelope)
    validate("crcr_workflow_job", row)
    per_test = _collections(record, cases or [])
    for name, rows in per_test.items():
        _validate_rows(name, rows)

    written: dict[str, Path] = {}

    def put(name: str, relative: str, data: bytes) -> None:
        path = out / relative
        atomic_write(path, data)
        written[name] = path

    put("run", "run.json", _json_bytes(record.to_json(), compact=True))
    put("callback", "callback.json", _json_bytes(callback))
    put("hud_envelope", "hud/envelope.json", _json_bytes(envelope, compact=True))
    put("crcr_workflow_job", "hud/crcr_workflow_job.json", _json_bytes(row))
    for name, rows in per_test.items():
        put(name, f"hud/{object_key(name, record)}", gzip_json_lines(rows))
    put("report_html", "report.html", render_html(record).encode("utf-8"))
    put("report_md", "report.md", render_markdown(record).encode("utf-8"))
    if record.forensics:
        put("forensics", FORENSICS_FILE, forensics_bytes(record))
    return written


def forensics_bytes(record: RunRecord) -> bytes:
    """`forensics.json`: `{"run_id", "failures": {id: window and triage}, "triage_verdict"}`."""
    body = {
        "run_id": record.run_id,
        "failures": {k: v.to_json() for k, v in record.forensics.items()},
        "triage_verdict": record.triage_verdict.to_json() if record.triage_verdict else None,
    }
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8")


def _validate_rows(name: str, rows: list[dict[str, Any]]) -> None:
    """Check one row of every shape (keys, value types, list lengths, status, result).

    All rows come from one builder, so rows of the same shape differ only in free-text
    values the schema does not constrain; checking each of 20,000 rows would cost seconds.
    """
    seen: set[tuple[Any, ...]] = set()
    for index, item in enumerate(rows):
        shape = tuple(
            (key, type(value).__name__, len(value) if isinstance(value, list) else None)
            for key, value in sorted(item.items())
        ) + (item.get("status"), item.get("result"))
        if shape in seen:
            continue
        seen.add(shape)
        try:
            validate(name, item)
        except ExportError as exc:
            raise ExportError(f"{name} row {index} ({item.get('name')}): {exc}") from None


def gzip_json_lines(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """Rows as gzip-compressed JSON lines, as upstream uploads a collection (mtime 0)."""
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as fh:
        fh.write(text.encode("utf-8"))
    return buffer.getvalue()


def read_json_lines(path: str | Path) -> list[dict[str, Any]]:
    """Read a collection file written by `write_run`."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def atomic_write(path: Path, data: bytes) -> None:
    """Write whole or not at all: a crash never leaves half a file under the final name."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        try:
            tmp.write_bytes(data)
        except FileNotFoundError:  # the folder is made only when missing (once per run)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno in _MACHINE_FAULTS:  # the machine's fault, not the path given
            raise WriteUnavailable(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise ExportError(f"{path}: cannot write: {exc.strerror or exc}") from None


# Write errors that say nothing about the path the user gave: full, over quota, failing
# (a read-only file system stays an ExportError: the path given cannot be written).
_MACHINE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.ENOMEM})


def _json_bytes(document: Any, compact: bool = False) -> bytes:
    # Large documents stay compact: with `indent` json falls back to its slow pure-Python path.
    if compact:
        return (json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
    return (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
