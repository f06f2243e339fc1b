"""HTTP/1.1 for the relay's front (`relay/front.py`), on h11.

h11 parses request heads, frames and de-chunks bodies, tracks keep-alive and frames the
responses it is given. This module adds the front's own policy on top, because the front
stands before a signature check and a durable queue: what a proxy and we could frame
differently is refused, not guessed at (RFC 9112 sections 6.1-6.3, 7.1).

- Content-Length together with Transfer-Encoding is 400 (h11 lets Transfer-Encoding win).
- A transfer coding other than chunked, or Transfer-Encoding twice, is 501 (h11).
- Two different Content-Length values, a malformed length, a bad field name or value, or a
  malformed request line is 400 (h11).
- A version other than HTTP/1.0 and HTTP/1.1 is 505; more than MAX_FIELDS header fields,
  or a head over the byte limit, is 431; an Expect other than 100-continue, or a control
  character in a field value, is 400.

Obsolete line folding is unfolded into one space (h11), as RFC 9112 section 5.2 allows; a
folded Content-Length or Transfer-Encoding is then malformed and refused. An HTTP/1.0 client
is answered and the connection closed, with or without `Connection: keep-alive` (h11).
"""

from __future__ import annotations

import io
import sys
import urllib.parse
from collections.abc import Iterable
from typing import Any, NamedTuple

import h11

from relay.events import RelayError

MAX_FIELDS = 100
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
# Control characters, a tab excepted: deleted with bytes.translate, which scans faster than a regex.
_CONTROL = bytes([*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F])
_DROPPED = frozenset({"content-length", "connection", "transfer-encoding"})


class RequestRefused(RelayError):
    """A request the front answers itself, with `status`, and then closes the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RequestHead(NamedTuple):
    """The request line and header fields, with the body framing they declare (a named
    tuple: one is built for every request, at a third of a frozen dataclass's cost)."""

    method: str
    target: str
    version: str
    fields: tuple[tuple[str, str], ...]  # (lower-case name, value), in order
    content_length: int | None
    chunked: bool
    expect_continue: bool

    def field(self, name: str) -> str | None:
        """The value of `name` (lower case), duplicates joined with ', '; None when absent."""
        values = [value for key, value in self.fields if key == name]
        return ", ".join(values) if values else None


class Exchange:
    """One connection's requests and responses, in order.

    Bytes read from the socket go in with `receive` (b"" at the end of the stream); `request`
    gives the next request's head once it has arrived whole, `body_part` its body in pieces;
    `response`, `interim_continue` and `refusal` give the bytes to write.
    """

    def __init__(self, max_header_bytes: int) -> None:
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_header_bytes)
        self.max_header_bytes = max_header_bytes
        self.method = ""

    def receive(self, data: bytes) -> None:
        self._conn.receive_data(data)

    def _next(self) -> Any:
        try:
            return self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            text = str(exc)
            if status == 431:
                text = f"request head is over {self.max_header_bytes} bytes"
            raise RequestRefused(status, text) from None

    @property
    def idle(self) -> bool:
        """Nothing of a next request has arrived yet."""
        data, closed = self._conn.trailing_data
        return not data and not closed

    def request(self) -> RequestHead | None:
        """The next request's head; None until more bytes arrive; `EOFError` when the client
        closed the connection between requests."""
        event = self._next()
        if event is h11.NEED_DATA:
            return None
        if isinstance(event, h11.ConnectionClosed):
            raise EOFError
        if not isinstance(event, h11.Request):  # pragma: no cover - h11's state machine
            raise RequestRefused(400, f"unexpected {type(event).__name__}")
        head = _head_of(event)
        self.method = head.method
        return head

    def body_part(self) -> bytes | None:
        """The next piece of the body; None until more bytes arrive; b"" at its end (chunk
        extensions and trailer fields are read and dropped)."""
        while True:
            event = self._next()
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
                continue
            if isinstance(event, h11.EndOfMessage):
                return b""
            if isinstance(event, h11.ConnectionClosed):
                raise RequestRefused(400, "connection closed in the middle of the body")
            raise RequestRefused(400, f"unexpected {type(event).__name__}")  # pragma: no cover

    def interim_continue(self) -> bytes:
        """`100 Continue`, when the client waits for it before sending its body; else b""."""
        if not self._conn.they_are_waiting_for_100_continue:
            return b""
        return (
            self._conn.send(
                h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
            )
            or b""
        )

    def response(
        self,
        status: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        close: bool,
        length: int | None = None,
    ) -> bytes:
        """Status line, fields and body of the answer to the current request. The front frames
        the body itself: the application's Content-Length, Connection and Transfer-Encoding
        are replaced. `length` stands for the body's length of an answer to HEAD."""
        code, _, reason = status.partition(" ")
        # As bytes: h11 takes str as ASCII too, but converts each field again on its way out.
        fields = [
            (name.encode("ascii"), value.encode("ascii"))
            for name, value in headers
            if name.lower() not in _DROPPED
        ]
        fields.append((b"Content-Length", b"%d" % (len(body) if length is None else length)))
        if close:
            fields.append((b"Connection", b"close"))
        send = self._conn.send_with_data_passthrough
        out = send(
            h11.Response(status_code=int(code), headers=fields, reason=reason.encode("latin-1"))
        )
        assert out is not None
        if body and self.method != "HEAD":
            out += send(h11.Data(data=body)) or ()
        out += send(h11.EndOfMessage()) or ()
        return b"".join(out)

    def next_cycle(self) -> bool:
        """Ready the connection for its next request; False when it must close instead."""
        if self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE:
            self._conn.start_next_cycle()
            return True
        return False


def _head_of(event: h11.Request) -> RequestHead:
    # What h11 parsed, checked against the policy in the module docstring, in its order.
    version = event.http_version
    if version != b"1.1" and version != b"1.0":
        raise RequestRefused(505, f"HTTP/{version.decode('ascii')} is not served; send HTTP/1.1")
    raw = event.headers.raw_items()  # (name as sent, value); h11 has validated both
    if len(raw) > MAX_FIELDS:
        raise RequestRefused(431, f"more than {MAX_FIELDS} header fields")
    # h11 lets control characters through in values: one scan over all of them (joined by a
    # tab, which is allowed), the offending field looked for only when there is one.
    values = b"\t".join([value for _, value in raw])
    if len(values.translate(None, _CONTROL)) != len(values):
        name = next(
            name for name, value in raw if len(value.translate(None, _CONTROL)) != len(value)
        )
        raise RequestRefused(
            400, f"header {name.lower().decode('ascii')} carries a control character"
        )
    fields = tuple([(name.lower().decode("ascii"), value.decode("latin-1")) for name, value in raw])
    names = dict(fields)  # h11 keeps one Content-Length and refuses a second Transfer-Encoding
    if "content-length" in names and "transfer-encoding" in names:
        raise RequestRefused(400, "both Content-Length and Transfer-Encoding: send one")
    expect = None
    if "expect" in names:
        expect = next(value.lower() for name, value in fields if name == "expect")
        if expect != "100-continue":
            raise RequestRefused(400, f"Expect: {expect} is not understood")
    length = names.get("content-length")
    return RequestHead(
        method=event.method.decode("ascii"),
        target=event.target.decode("ascii"),
        version="HTTP/1.1" if version == b"1.1" else "HTTP/1.0",
        fields=fields,
        content_length=None if length is None else int(length),
        chunked="transfer-encoding" in names,
        expect_continue=expect is not None and version == b"1.1",
    )


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


def refusal(status: int, headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    """A whole answer the front gives on its own (no request to answer, or one refused), with
    `Connection: close`: the connection ends after it."""
    out = [f"HTTP/1.1 {status} {REASONS.get(status, '')}".rstrip()]
    out += [f"{name}: {value}" for name, value in headers if name.lower() not in _DROPPED]
    out += [f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body
