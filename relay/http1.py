"""HTTP/1.1 request framing for the relay's front (`relay/front.py`): pure functions over bytes.

Strict on purpose: the front stands before a signature check and a durable queue, so what a
proxy and we could frame differently (Content-Length with Transfer-Encoding, two different
lengths, obsolete line folding, a transfer coding other than chunked) is refused, not guessed
at (RFC 9112 sections 6.1-6.3, 7.1).
"""

from __future__ import annotations

import io
import re
import sys
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from relay.events import RelayError

MAX_FIELDS = 100
MAX_CHUNK_LINE = 1024  # a chunk-size line, extensions included
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
REASONS = {
    100: "Continue",
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class RequestRefused(RelayError):
    """A request the front answers itself, with `status`, and then closes the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RequestHead:
    """The request line and header fields, with the body framing they declare."""

    method: str
    target: str
    version: str
    fields: tuple[tuple[str, str], ...]  # (lower-case name, value), in order
    content_length: int | None
    chunked: bool
    keep_alive: bool
    expect_continue: bool

    def field(self, name: str) -> str | None:
        """The value of `name` (lower case), duplicates joined with ', '; None when absent."""
        values = [value for key, value in self.fields if key == name]
        return ", ".join(values) if values else None


def parse_head(data: bytes) -> RequestHead:
    """The head of one request: `data` runs up to and including the empty line (CRLF CRLF)."""
    if not data.endswith(b"\r\n\r\n"):
        raise RequestRefused(400, "request head does not end with an empty line")
    lines = data[:-4].split(b"\r\n")
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise RequestRefused(400, "malformed request line") from None
    if not _TOKEN.fullmatch(method.encode()) or not target or not target.isprintable():
        raise RequestRefused(400, "malformed request line")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        if re.fullmatch(r"HTTP/\d\.\d", version):
            raise RequestRefused(505, f"{version} is not served; send HTTP/1.1")
        raise RequestRefused(400, "malformed request line")
    if len(lines) - 1 > MAX_FIELDS:
        raise RequestRefused(431, f"more than {MAX_FIELDS} header fields")
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            # Also a line starting with whitespace: obsolete folding (RFC 9112 5.2).
            raise RequestRefused(400, f"malformed header field {line[:40]!r}")
        value = value.strip(b" \t")
        if _VALUE_BAD.search(value):
            raise RequestRefused(400, f"header {name.decode()} carries a control character")
        fields.append((name.decode("ascii").lower(), value.decode("latin-1")))
    return _framed(method, target, version, tuple(fields))


def _framed(
    method: str, target: str, version: str, fields: tuple[tuple[str, str], ...]
) -> RequestHead:
    lengths = {value for name, value in fields if name == "content-length"}
    codings = [value for name, value in fields if name == "transfer-encoding"]
    content_length = None
    if len(lengths) > 1:
        raise RequestRefused(400, "Content-Length given twice with different values")
    if lengths:
        (text,) = lengths
        if not text.isdigit() or not text.isascii() or len(text) > 18:
            raise RequestRefused(400, f"Content-Length {text[:20]!r} is not a length")
        content_length = int(text)
    chunked = False
    if codings:
        if content_length is not None:
            raise RequestRefused(400, "both Content-Length and Transfer-Encoding: send one")
        if version == "HTTP/1.0" or ", ".join(codings).strip().lower() != "chunked":
            raise RequestRefused(501, "the only transfer coding served is chunked")
        chunked = True
    connection = {
        token.strip().lower()
        for name, value in fields
        if name == "connection"
        for token in value.split(",")
    }
    # HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes unless asked not to.
    keep_alive = (
        ("close" not in connection) if version == "HTTP/1.1" else ("keep-alive" in connection)
    )
    expect = next((value.lower() for name, value in fields if name == "expect"), None)
    if expect is not None and expect != "100-continue":
        raise RequestRefused(400, f"Expect: {expect} is not understood")
    return RequestHead(
        method=method,
        target=target,
        version=version,
        fields=fields,
        content_length=content_length,
        chunked=chunked,
        keep_alive=keep_alive,
        expect_continue=expect == "100-continue" and version == "HTTP/1.1",
    )


def chunk_size(line: bytes) -> int:
    """The size a chunk-size line announces (`line` without its CRLF; extensions ignored)."""
    size = line.split(b";", 1)[0].strip(b" \t")
    if not _HEX.fullmatch(size):
        raise RequestRefused(400, f"malformed chunk size {line[:20]!r}")
    return int(size, 16)


def wsgi_environ(
    head: RequestHead,
    body: bytes,
    server: tuple[str, int],
    client: tuple[str, int],
    declared_length: int | None = None,
) -> dict[str, Any]:
    """The WSGI environ of a request whose body has been read whole (de-chunked) into `body`.

    `declared_length` stands in for the body's length when it was not read (over the limit):
    the application then sees the size and answers 413 itself.
    """
    path, _, query = head.target.partition("?")
    if not path.startswith("/") and "://" in path:  # absolute-form (RFC 9112 3.2.2)
        path = urllib.parse.urlsplit(path).path or "/"
    length = len(body) if declared_length is None else declared_length
    environ: dict[str, Any] = {
        "REQUEST_METHOD": head.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": urllib.parse.unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query,
        "RAW_URI": head.target,
        "REQUEST_URI": head.target,
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": head.version,
        "REMOTE_ADDR": client[0],
        "REMOTE_PORT": str(client[1]),
        "CONTENT_LENGTH": str(length) if length or head.content_length is not None else "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for name, value in head.fields:
        # The body is handed over de-chunked, with its length; hop-by-hop framing stays here.
        # A name with "_" would pass for its "-" twin in the environ: dropped, as gunicorn does.
        if name in ("content-length", "transfer-encoding") or "_" in name:
            continue
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
            continue
        key = "HTTP_" + name.upper().replace("-", "_")
        environ[key] = f"{environ[key]}, {value}" if key in environ else value
    return environ


def response_head(
    status: int | str, headers: Iterable[tuple[str, str]], body_length: int, close: bool
) -> bytes:
    """Status line and header fields of a response whose body is `body_length` bytes."""
    line = status if isinstance(status, str) else f"{status} {REASONS.get(status, '')}".strip()
    out = [f"HTTP/1.1 {line}"]
    for name, value in headers:
        if name.lower() not in ("content-length", "connection", "transfer-encoding"):
            out.append(f"{name}: {value}")
    out.append(f"Content-Length: {body_length}")
    if close:
        out.append("Connection: close")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")
