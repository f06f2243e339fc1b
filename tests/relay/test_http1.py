"""Request framing of the relay's front: relay/http1.py, and relay.front.read_body on a stream."""

from __future__ import annotations

import asyncio

import pytest

from relay.front import _Buffered, _Deadline, _TooLarge, read_body
from relay.http1 import RequestRefused, chunk_size, parse_head, response_head, wsgi_environ


def head(*fields: str, line: str = "POST /github/webhook?x=1 HTTP/1.1") -> bytes:
    return ("\r\n".join([line, *fields]) + "\r\n\r\n").encode()


def test_a_webhook_head_parses() -> None:
    parsed = parse_head(head("Host: relay", "Content-Length: 12", "X-GitHub-Event: push"))
    assert (parsed.method, parsed.target, parsed.version) == (
        "POST",
        "/github/webhook?x=1",
        "HTTP/1.1",
    )
    assert parsed.content_length == 12 and not parsed.chunked and parsed.keep_alive
    assert parsed.field("x-github-event") == "push"


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        (("Content-Length: 3", "Transfer-Encoding: chunked"), 400),  # smuggling shape
        (("Content-Length: 3", "Content-Length: 4"), 400),
        (("Content-Length: -1",), 400),
        (("Content-Length: 1e3",), 400),
        (("Transfer-Encoding: gzip, chunked",), 501),
        (("Host: relay", " folded"), 400),
        (("Bad Name: x",), 400),
        (("X-A: a\x01b",), 400),
        (("Expect: something",), 400),
        (tuple(f"X-{i}: v" for i in range(101)), 431),
    ],
)
def test_ambiguous_or_malformed_heads_are_refused(fields: tuple[str, ...], status: int) -> None:
    with pytest.raises(RequestRefused) as refused:
        parse_head(head(*fields))
    assert refused.value.status == status


@pytest.mark.parametrize(
    ("line", "status"),
    [("GET / HTTP/2.0", 505), ("GET /  HTTP/1.1", 400), ("GET / FTP/1.1", 400), ("GET", 400)],
)
def test_bad_request_lines_are_refused(line: str, status: int) -> None:
    with pytest.raises(RequestRefused) as refused:
        parse_head(head("Host: x", line=line))
    assert refused.value.status == status


def test_connection_persistence_follows_the_version() -> None:
    assert not parse_head(head("Connection: close")).keep_alive
    assert not parse_head(head(line="GET / HTTP/1.0")).keep_alive
    assert parse_head(head("Connection: Keep-Alive", line="GET / HTTP/1.0")).keep_alive


def test_same_content_length_twice_is_one_length() -> None:
    assert parse_head(head("Content-Length: 5", "Content-Length: 5")).content_length == 5


def test_chunk_sizes() -> None:
    assert chunk_size(b"1a") == 26 and chunk_size(b"0") == 0 and chunk_size(b"ff;name=v") == 255
    for bad in (b"", b"-1", b"0x10", b"1" * 17, b"zz"):
        with pytest.raises(RequestRefused):
            chunk_size(bad)


def test_environ_of_a_chunked_request_carries_the_decoded_length() -> None:
    parsed = parse_head(
        head(
            "Host: relay",
            "Transfer-Encoding: chunked",
            "Content-Type: application/json",
            "X-Hub-Signature-256: sha256=ab",
            "X_Hub_Signature_256: spoofed",
            "Accept: a",
            "Accept: b",
        )
    )
    environ = wsgi_environ(parsed, b"{}", ("127.0.0.1", 80), ("10.0.0.1", 5000))
    assert environ["CONTENT_LENGTH"] == "2" and environ["wsgi.input"].read() == b"{}"
    assert "HTTP_TRANSFER_ENCODING" not in environ
    assert environ["HTTP_X_HUB_SIGNATURE_256"] == "sha256=ab"
    assert environ["HTTP_ACCEPT"] == "a, b" and environ["CONTENT_TYPE"] == "application/json"
    assert environ["PATH_INFO"] == "/github/webhook" and environ["QUERY_STRING"] == "x=1"
    over = wsgi_environ(parsed, b"", ("h", 1), ("c", 2), declared_length=99)
    assert over["CONTENT_LENGTH"] == "99" and over["wsgi.input"].read() == b""


def test_response_head_frames_the_body_itself() -> None:
    out = response_head("202 ACCEPTED", [("Content-Length", "999"), ("X-A", "b")], 3, close=True)
    assert out == (
        b"HTTP/1.1 202 ACCEPTED\r\nX-A: b\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
    )


def body_of(
    data: bytes, fields: tuple[str, ...], limit: int, eof: bool = True
) -> tuple[bytes | Exception, int]:
    """read_body over an in-memory stream: (the body, or what it raised; bytes left unread)."""

    async def run() -> tuple[bytes | Exception, int]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if eof:
            reader.feed_eof()
        incoming = _Buffered(reader)
        deadline = asyncio.get_running_loop().time() + 0.2
        try:
            body: bytes | Exception = await read_body(
                incoming, parse_head(head(*fields)), deadline, limit
            )
        except (_TooLarge, _Deadline, RequestRefused) as exc:
            body = exc
        unread = len(await reader.read()) if eof else 0
        return body, len(incoming.data) + unread

    return asyncio.run(run())


def test_chunked_body_is_decoded_and_trailers_dropped() -> None:
    data = b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"
    assert body_of(data, ("Transfer-Encoding: chunked",), limit=10) == (b"abcde", 0)


def test_chunked_body_reading_stops_at_the_limit() -> None:
    # Ten chunks of 100 bytes against a 250-byte limit: refused at the third chunk's size
    # line, before its data; nothing after that line is taken as body.
    data = b"".join(b"64\r\n" + b"x" * 100 + b"\r\n" for _ in range(10)) + b"0\r\n\r\n"
    body, left = body_of(data, ("Transfer-Encoding: chunked",), limit=250)
    assert isinstance(body, _TooLarge) and body.declared == 300
    assert left == len(data) - (2 * 106 + 4)


def test_declared_length_over_the_limit_is_refused_before_reading() -> None:
    body, left = body_of(b"x" * 20, ("Content-Length: 20",), limit=10)
    assert isinstance(body, _TooLarge) and body.declared == 20 and left == 20


def test_a_body_that_stops_short_meets_the_deadline() -> None:
    body, _ = body_of(b"x" * 5, ("Content-Length: 20",), limit=100, eof=False)
    assert isinstance(body, _Deadline)


def test_bad_chunk_framing_is_400() -> None:
    body, _ = body_of(b"3\r\nabcXX0\r\n\r\n", ("Transfer-Encoding: chunked",), limit=100)
    assert isinstance(body, RequestRefused) and body.status == 400
