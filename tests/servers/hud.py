"""A local HTTP server implementing HUD's `POST /crcr/results` contract, for tests.

Contract (pytorch/test-infra torchci, see shared reference crcr-and-hud.md):
- header `x-hud-internal-bot` must equal the bot key, else 401;
- a body over 2 MB is refused with 413 before it is read;
- the body is the relay envelope; HUD's `extractDynamoRecord` turns it into a record and
  answers 400 without `workflow.job_name` or `workflow.check_run_id` (500 when the envelope
  is malformed otherwise, as HUD's handler does);
- the record is written as HUD's UpdateItem writes it (only the fields it has, keyed by
  `dynamoKey`), and the item becomes a row of `default.crcr_workflow_job` (column DEFAULTs
  for what it lacks) keyed like the ReplacingMergeTree `(downstream_repo, delivery_id,
  dynamoKey)`, so re-sending never duplicates.
- a record is written once it is final: a write on an item whose status is already
  `completed` is answered 409 and changes nothing (HUD's write-once rule);
- `pr_number` and `pytorch_head_sha` as HUD's `extractPrContext` reads them (a pull
  request's; for a push, `after` and the PR of a `ciflow/trunk/<pr>` tag);
- on `completed`, `failed_tests_json` from the action's `workflow.failed_tests_detail` (first
  50 entries, `name`, `classname`, `message` cut at 500 characters, `duration`);
  `triage_verdict_json` from the relay-validated `workflow.triage_verdict`.
The row is derived here independently of dashboard_export, so tests cross-check the two.
Without `failed_tests_detail`, `failed_tests_json` is filled from spyre-ci's own
`workflow.failed_tests`, and `environment` from `workflow.environment` (HUD leaves it empty).

Use as a context manager (`with HudServer("key") as hud: hud.url`) or via the `hud_server`
fixture in tests/dashboard_export/conftest.py. `fail_next(n, status)` makes the next n
requests answer `status` (a 5xx) to exercise the publisher's retries.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BODY_LIMIT = 2 * 1024 * 1024
AUTH_HEADER = "x-hud-internal-bot"
PATH = "/crcr/results"


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    path: str
    status: int
    auth: str | None
    length: int


class HudServer:
    """The HUD results endpoint on a free loopback port, in a background thread."""

    def __init__(self, bot_key: str = "hud-test-key", tls_dir: str | None = None) -> None:
        """`tls_dir`: serve https with a self-signed certificate for 127.0.0.1 written there
        (`ca_file`), as the relay only talks to an https HUD."""
        self.bot_key = bot_key
        self.ca_file: str | None = None
        self.items: dict[str, dict[str, Any]] = {}  # the DynamoDB table, by dynamoKey
        self.table: dict[tuple[str, str, str], dict[str, Any]] = {}  # its ClickHouse rows
        self.inserts = 0  # rows inserted, replaced ones included
        self.received: list[Received] = []
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        if tls_dir is not None:
            self.ca_file = _self_signed(tls_dir)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.ca_file)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        scheme = "https" if self.ca_file else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.table.values())

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def start(self) -> HudServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> HudServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling -------------------------------------------------------------

    def _answer(self, auth: str | None, length: int, read: Any) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self._failures:
                return self._failures.pop(0), {"error": "injected failure"}
        if auth != self.bot_key:
            return 401, {"error": f"missing or wrong {AUTH_HEADER} header"}
        if length > BODY_LIMIT:
            return 413, {"error": f"body of {length} bytes exceeds {BODY_LIMIT}"}
        try:
            body = json.loads(read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            return 400, {"error": f"body is not JSON: {exc}"}
        try:
            record = _record(body)
        except _Refused as exc:
            return 400, {"error": str(exc)}
        except (KeyError, TypeError, AttributeError):
            return 500, {"error": "Internal error writing to DynamoDB"}
        with self._lock:
            item = self.items.setdefault(record["dynamoKey"], {})
            if item.get("status") == "completed":
                return 409, {"error": f"{record['dynamoKey']} is final already"}
            # UpdateItem: only the fields this record has are set.
            item.update(record)
            row = _row(item)
            self.table[(row["downstream_repo"], row["delivery_id"], row["dynamoKey"])] = row
            self.inserts += 1
        return 200, {"ok": True, "dynamoKey": row["dynamoKey"]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                auth = self.headers.get(AUTH_HEADER)
                if self.path != PATH:
                    status, reply = 404, {"error": f"no route {self.path}"}
                else:
                    consumed = 0

                    def read(n: int) -> bytes:
                        nonlocal consumed
                        consumed += n
                        return bytes(self.rfile.read(n))

                    status, reply = server._answer(auth, length, read)
                    # Drain what was not read, so the client gets the answer rather than a
                    # connection reset in the middle of its upload.
                    remaining = length - consumed
                    while remaining > 0:
                        chunk = self.rfile.read(min(remaining, 1 << 16))
                        if not chunk:
                            break
                        remaining -= len(chunk)
                with server._lock:
                    server.received.append(Received(self.path, status, auth, length))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def _record(body: Mapping[str, Any]) -> dict[str, Any]:
    """HUD's `extractDynamoRecord` (torchci/lib/crcr/crcrUtils.ts): keys it leaves undefined
    are absent. Raises _Refused(400) where HUD does; other malformed bodies raise KeyError or
    TypeError, which HUD answers 500."""
    trusted = body["trusted"]
    cb = body["untrusted"]["callback_payload"]
    wf = cb["workflow"]
    payload = cb.get("payload") if isinstance(cb.get("payload"), Mapping) else {}
    pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), Mapping) else {}
    if not wf.get("job_name"):
        raise _Refused("Missing required field: workflow.job_name")
    if wf.get("check_run_id") is None:
        raise _Refused("Missing required field: workflow.check_run_id")
    check = _string(wf["check_run_id"])
    attempt = wf.get("run_attempt")
    try:
        run_attempt = int(float(attempt if attempt is not None else 1)) or 1
    except (TypeError, ValueError):
        run_attempt = 1  # Number("junk") is NaN, and NaN || 1 is 1
    upstream = (payload.get("repository") or {}).get("full_name")
    number, head = 0, ""
    if pr.get("number") and (pr.get("head") or {}).get("sha"):
        number, head = pr["number"], pr["head"]["sha"]
    elif payload.get("after"):
        tag = re.search(r"/ciflow/trunk/(\d+)$", str(payload.get("ref") or ""))
        number, head = (int(tag.group(1)) if tag else 0), payload["after"]
    for fallback in (payload.get("head_sha"), cb.get("delivery_id"), ""):
        if not head:
            head = fallback
    rec: dict[str, Any] = {
        "dynamoKey": "/".join(
            _string(v)
            for v in (
                trusted["verified_repo"],
                cb.get("delivery_id"),
                wf.get("name"),
                wf["job_name"],
                check,
            )
        ),
        "status": wf.get("status"),
        "downstream_repo": trusted["verified_repo"],
        "upstream_repo": upstream if upstream is not None else "pytorch/pytorch",
        "pr_number": number,
        "pytorch_head_sha": head,
        "delivery_id": cb.get("delivery_id"),
        "workflow_run_url": wf.get("url") if wf.get("url") is not None else "",
        "workflow_name": wf.get("name"),
        "job_name": wf["job_name"],
        "check_run_id": check,
        "run_id": wf.get("run_id") if wf.get("run_id") is not None else "",
        "run_attempt": run_attempt,
    }
    if trusted.get("downstream_repo_level"):
        rec["downstream_repo_level"] = trusted["downstream_repo_level"]
    if cb.get("event_type"):
        rec["event_type"] = cb["event_type"]
    metrics = trusted.get("ci_metrics") or {}
    for name in ("queue_time", "execution_time"):
        if metrics.get(name) is not None:
            rec[name] = metrics[name]
    for name in ("started_at", "artifact_url"):
        if wf.get(name):
            rec[name] = wf[name]
    if wf.get("status") == "completed":
        if wf.get("conclusion") is not None:
            rec["conclusion"] = wf["conclusion"]
        if wf.get("completed_at"):
            rec["completed_at"] = wf["completed_at"]
        tr = wf.get("test_results")
        if tr:
            numbers = {
                k: v
                for k, v in tr.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            for name in ("passed", "failed", "skipped"):
                if name in numbers:
                    rec[f"{name}_tests"] = numbers[name]
            rec["total_tests"] = numbers.get(
                "total", sum(numbers.get(k, 0) for k in ("passed", "failed", "skipped"))
            )
        detail = wf.get("failed_tests_detail")
        if isinstance(detail, list):
            rec["failed_tests_json"] = json.dumps([_detail(t) for t in detail[:50]])
        if wf.get("triage_verdict") is not None:
            rec["triage_verdict_json"] = json.dumps(wf["triage_verdict"])
    # spyre-ci's extra fields, where HUD has nothing.
    if "failed_tests_json" not in rec and wf.get("failed_tests") is not None:
        rec["failed_tests_json"] = json.dumps(wf["failed_tests"])
    if wf.get("environment") is not None:
        rec["environment"] = json.dumps(wf["environment"])
    return rec


def _detail(test: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": str(test.get("name") or "")}
    if test.get("classname"):
        entry["classname"] = str(test["classname"])
    if test.get("message"):
        entry["message"] = str(test["message"])[:500]
    if test.get("duration") is not None:
        try:
            duration: float | None = float(test["duration"])
        except (TypeError, ValueError):
            duration = None  # Number("junk") is NaN, which JSON writes as null
        entry["duration"] = duration
    return entry


# Column DEFAULTs of clickhouse_db_schema/default.crcr_workflow_job/schema.sql ('' for a
# String without one, the epoch for a DateTime64, NULL for a Nullable).
_COLUMN_DEFAULTS = {
    "conclusion": "",
    "queue_time": None,
    "execution_time": None,
    "started_at": None,
    "completed_at": None,
    "total_tests": 0,
    "passed_tests": 0,
    "failed_tests": 0,
    "skipped_tests": 0,
    "failed_tests_json": "",
    "artifact_url": "",
    "environment": "",
    "downstream_repo_level": "",
    "event_type": "pull_request",
    "triage_verdict_json": "",
}
_STRING_COLUMNS = (
    "dynamoKey",
    "status",
    "downstream_repo",
    "upstream_repo",
    "pytorch_head_sha",
    "delivery_id",
    "workflow_run_url",
    "workflow_name",
    "job_name",
    "check_run_id",
    "run_id",
    "conclusion",
    "failed_tests_json",
    "artifact_url",
    "environment",
    "downstream_repo_level",
    "event_type",
    "triage_verdict_json",
)
_INT_COLUMNS = (
    "pr_number",
    "run_attempt",
    "total_tests",
    "passed_tests",
    "failed_tests",
    "skipped_tests",
)


def _row(item: Mapping[str, Any]) -> dict[str, Any]:
    """The ClickHouse row of a stored item."""
    row: dict[str, Any] = {}
    for name in (
        *_STRING_COLUMNS,
        *_INT_COLUMNS,
        "queue_time",
        "execution_time",
        "started_at",
        "completed_at",
    ):
        value = item.get(name, _COLUMN_DEFAULTS.get(name))
        if name in _STRING_COLUMNS:
            value = _string(value)
        elif name in _INT_COLUMNS:
            value = int(value)
        elif name in ("started_at", "completed_at"):
            value = _datetime64(value)
        elif value is not None:
            value = float(value)
        row[name] = value
    return row


def _self_signed(directory: str) -> str:
    """A key and self-signed certificate for 127.0.0.1 in one PEM file; returns its path."""
    import ipaddress
    from datetime import timedelta
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = Path(directory) / "hud.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    return str(path)


class _Refused(Exception):
    """HUD's ApiError(400)."""


def _string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _datetime64(value: str | None) -> str:
    if not value:
        return "1970-01-01 00:00:00.000000000"
    moment = datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f") + "000"
