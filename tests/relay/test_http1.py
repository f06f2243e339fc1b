"""Request framing of the relay's front: relay/http1.py (h11 with the front's policy), and
relay.front.read_body on a stream."""

from __future__ import annotations

import asyncio

import pytest

from relay import front
from relay.front import _Deadline, _TooLarge, read_body, read_head
from relay.http1 import Exchange, RequestHead, RequestRefused, refusal, wsgi_environ


def head(*fields: str, line: str = "POST /github/webhook?x=1 HTTP/1.1") -> bytes:
    """A request head; HTTP/1.1 requires Host, so one is added when `fields` has none."""
    if not any(field.lower().startswith("host:") for field in fields):
        fields = ("Host: relay", *fields)
    return ("\r\n".join([line, *fields]) + "\r\n\r\n").encode()


def parse_head(data: bytes, limit: int = 64 * 1024) -> RequestHead:
    exchange = Exchange(limit)
    exchange.receive(data)
    parsed = exchange.request()
    assert parsed is not None, "the head is whole"
    return parsed


def test_a_webhook_head_parses() -> None:
    parsed = parse_head(head("Host: relay", "Content-Length: 12", "X-GitHub-Event: push"))
    assert (parsed.method, parsed.target, parsed.version) == (
        "POST",
        "/github/webhook?x=1",
        "HTTP/1.1",
    )
    assert parsed.content_length == 12 and not parsed.chunked
    assert parsed.field("x-github-event") == "push"


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        (("Content-Length: 3", "Transfer-Encoding: chunked"), 400),  # smuggling shape
        (("Transfer-Encoding: chunked", "Content-Length: 3"), 400),
        (("Content-Length: 3", "Content-Length: 4"), 400),
        (("Content-Length: 3, 4",), 400),
        (("Content-Length: -1",), 400),
        (("Content-Length: 1e3",), 400),
        (("Transfer-Encoding: gzip, chunked",), 501),
        (("Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), 501),
        (("Content-Length: 3", " 4"), 400),  # a folded length is malformed once unfolded
        ((" folded", "Host: relay"), 400),  # a continuation of the request line
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


def test_a_control_character_is_refused_in_any_field_and_named() -> None:
    with pytest.raises(RequestRefused) as refused:
        parse_head(head("X-A: fine", "X-B: also fine", "X-C: bad\x7f", "X-D: fine"))
    assert refused.value.status == 400 and "header x-c carries" in str(refused.value)


def test_a_tab_inside_a_value_is_not_a_control_character() -> None:
    assert parse_head(head("X-A: one\ttwo", "X-B: b")).field("x-a") == "one\ttwo"


def test_a_head_over_the_byte_limit_is_431_before_it_ends() -> None:
    exchange = Exchange(1024)
    exchange.receive(b"POST / HTTP/1.1\r\nHost: relay\r\nX-Big: " + b"a" * 2000)
    with pytest.raises(RequestRefused) as refused:
        exchange.request()
    assert refused.value.status == 431 and "1024 bytes" in str(refused.value)


def test_an_unfolded_field_keeps_its_value() -> None:
    # RFC 9112 5.2: a server may replace obs-fold with a space instead of refusing.
    assert parse_head(head("X-A: one", " two")).field("x-a") == "one two"


@pytest.mark.parametrize(
    ("line", "status"),
    [("GET / HTTP/2.0", 505), ("GET /  HTTP/1.1", 400), ("GET / FTP/1.1", 400), ("GET", 400)],
)
def test_bad_request_lines_are_refused(line: str, status: int) -> None:
    with pytest.raises(RequestRefused) as refused:
        parse_head(head("Host: x", line=line))
    assert refused.value.status == status


def answer_then_next(data: bytes) -> tuple[bytes, bool]:
    """Answer the one request in `data`; (the answer's bytes, whether the connection goes on)."""
    exchange = Exchange(64 * 1024)
    exchange.receive(data)
    assert exchange.request() is not None
    assert exchange.body_part() == b""
    out = exchange.response("200 OK", [("Content-Type", "text/plain")], b"ok", close=False)
    return out, exchange.next_cycle()


def test_connection_persistence_follows_the_version() -> None:
    kept, going_on = answer_then_next(head("Host: x", line="GET / HTTP/1.1"))
    assert going_on and b"connection: close" not in kept.lower()
    closed, going_on = answer_then_next(head("Host: x", "Connection: close", line="GET / HTTP/1.1"))
    assert not going_on and b"connection: close" in closed.lower()
    # HTTP/1.0 is answered and closed, with or without keep-alive.
    for fields in (("Host: x",), ("Host: x", "Connection: Keep-Alive")):
        old, going_on = answer_then_next(head(*fields, line="GET / HTTP/1.0"))
        assert not going_on and old.startswith(b"HTTP/1.1 200 OK\r\n")


def test_same_content_length_twice_is_one_length() -> None:
    assert parse_head(head("Content-Length: 5", "Content-Length: 5")).content_length == 5


def test_two_requests_in_one_read_are_served_in_turn() -> None:
    exchange = Exchange(64 * 1024)
    exchange.receive(
        head("Content-Length: 2") + b"{}" + head("Host: x", line="GET /healthz HTTP/1.1")
    )
    first = exchange.request()
    assert first is not None and exchange.body_part() == b"{}" and exchange.body_part() == b""
    exchange.response("202 Accepted", [], b"", close=False)
    assert exchange.next_cycle() and not exchange.idle
    second = exchange.request()
    assert second is not None and second.target == "/healthz"


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


def test_the_front_frames_the_body_itself() -> None:
    exchange = Exchange(64 * 1024)
    exchange.receive(head("Content-Length: 0"))
    assert exchange.request() is not None and exchange.body_part() == b""
    out = exchange.response(
        "202 ACCEPTED", [("Content-Length", "999"), ("X-A", "b")], b"abc", close=True
    )
    status, _, rest = out.partition(b"\r\n")
    fields, _, body = rest.partition(b"\r\n\r\n")
    assert status == b"HTTP/1.1 202 ACCEPTED" and body == b"abc"
    lowered = fields.lower().split(b"\r\n")
    assert b"content-length: 3" in lowered and b"content-length: 999" not in lowered
    assert b"x-a: b" in lowered and b"connection: close" in lowered
    assert not exchange.next_cycle()


def test_an_answer_to_head_has_the_length_and_no_body() -> None:
    exchange = Exchange(64 * 1024)
    exchange.receive(head("Host: x", line="HEAD /healthz HTTP/1.1"))
    assert exchange.request() is not None and exchange.body_part() == b""
    out = exchange.response("200 OK", [], b"", close=False, length=42)
    assert out.endswith(b"\r\n\r\n") and b"content-length: 42" in out.lower()


def test_a_refusal_closes() -> None:
    assert refusal(503, [("Retry-After", "1"), ("Connection", "keep-alive")], b"{}") == (
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 2\r\n"
        b"Connection: close\r\n\r\n{}"
    )


def body_of(
    data: bytes, fields: tuple[str, ...], limit: int, eof: bool = True
) -> tuple[bytes | Exception, int]:
    """read_body over an in-memory stream: (the body, or what it raised; bytes of the stream
    never read from the socket)."""

    async def run() -> tuple[bytes | Exception, int]:
        reader = asyncio.StreamReader()
        reader.feed_data(head(*fields) + data)
        if eof:
            reader.feed_eof()
        exchange = Exchange(64 * 1024)
        deadline = asyncio.get_running_loop().time() + 0.2
        try:
            parsed = await read_head(reader, exchange, deadline)
            body: bytes | Exception = await read_body(reader, exchange, parsed, deadline, limit)
        except (_TooLarge, _Deadline, RequestRefused) as exc:
            body = exc
        unread = len(await reader.read()) if eof else 0
        return body, unread

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(front, "READ_SIZE", 16)  # the socket hands over 16 bytes a read
        return asyncio.run(run())


def test_chunked_body_is_decoded_and_trailers_dropped() -> None:
    data = b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"
    assert body_of(data, ("Transfer-Encoding: chunked",), limit=10) == (b"abcde", 0)


def test_chunked_body_reading_stops_at_the_limit() -> None:
    # Ten chunks of 100 bytes against a 250-byte limit: refused once the body read passes the
    # limit, with most of the stream never read.
    data = b"".join(b"64\r\n" + b"x" * 100 + b"\r\n" for _ in range(10)) + b"0\r\n\r\n"
    body, unread = body_of(data, ("Transfer-Encoding: chunked",), limit=250)
    assert isinstance(body, _TooLarge) and 250 < body.declared <= 300
    assert unread > len(data) / 2


def test_declared_length_over_the_limit_is_refused_before_reading() -> None:
    body, unread = body_of(b"x" * 20, ("Content-Length: 20",), limit=10)
    assert isinstance(body, _TooLarge) and body.declared == 20 and unread > 20 - 16


def test_a_body_that_stops_short_meets_the_deadline() -> None:
    body, _ = body_of(b"x" * 5, ("Content-Length: 20",), limit=100, eof=False)
    assert isinstance(body, _Deadline)


def test_a_body_cut_by_the_client_is_400() -> None:
    body, _ = body_of(b"x" * 5, ("Content-Length: 20",), limit=100, eof=True)
    assert isinstance(body, RequestRefused) and body.status == 400


def test_bad_chunk_framing_is_400() -> None:
    body, _ = body_of(b"3\r\nabcXX0\r\n\r\n", ("Transfer-Encoding: chunked",), limit=100)
    assert isinstance(body, RequestRefused) and body.status == 400
