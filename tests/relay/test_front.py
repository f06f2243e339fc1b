"""The HTTP front of `spyre-ci serve` (relay/front.py) against slow and oversized clients, on the
real gunicorn process: short timeouts so each test ends in seconds."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from relay.signature import sign
from tests.relay.test_serve import relay_env, serving
from tests.testing.relay import SECRET, RedisProcess
from tests.testing.waiting import wait_for

HEADER_TIMEOUT, BODY_TIMEOUT = 2.0, 3.0
LIMIT = 25 * 1024 * 1024  # the default max_body_bytes
LINGER_BOUND = 4.0  # an error answer, then at most relay.front.LINGER_SECONDS of draining
PUSH = json.dumps(
    {
        "ref": "refs/heads/main",
        "before": "a" * 40,
        "after": "b" * 40,
        "repository": {"full_name": "pytorch/pytorch"},
        "commits": [],
    }
).encode()


@pytest.fixture()
def front(redis_proc: RedisProcess) -> Iterator[str]:
    # One worker with two application threads: the tightest shape serve accepts.
    args = ["--workers", "1", "--threads", "2", "--log-level", "warning"]
    args += ["--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT)]
    with serving(relay_env(redis_proc.url), *args) as url:
        yield url


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)


def webhook_head(length: int | None = None, chunked: bool = False, **extra: str) -> bytes:
    lines = [
        "POST /github/webhook HTTP/1.1",
        "Host: relay",
        "Content-Type: application/json",
        "X-GitHub-Event: push",
        "X-GitHub-Delivery: front-1",
        *(f"{k.replace('_', '-')}: {v}" for k, v in extra.items()),
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes (or `timeout`)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def healthz_seconds(url: str) -> float:
    started = time.perf_counter()
    assert requests.get(f"{url}/healthz", timeout=2).status_code == 200
    return time.perf_counter() - started


def is_cut(sock: socket.socket) -> bytes | None:
    """What a slow client got when cut (b'' for a bare close), None while still connected."""
    sock.settimeout(0.01)
    try:
        data = sock.recv(65536)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return b""
    return data


def test_healthz_answers_while_64_slow_clients_send_bodies_and_they_are_cut(front: str) -> None:
    clients = [connect(front) for _ in range(64)]
    for sock in clients:
        sock.sendall(webhook_head(length=1000, X_Hub_Signature_256="sha256=00"))
    started = time.monotonic()
    latencies = []
    cut: dict[int, tuple[float, bytes]] = {}
    while len(cut) < len(clients) and time.monotonic() - started < BODY_TIMEOUT + 6:
        for i, sock in enumerate(clients):  # one body byte a second from each
            if i in cut:
                continue
            try:
                sock.sendall(b"{")
            except OSError:
                cut[i] = (time.monotonic() - started, b"")
                continue
            answer = is_cut(sock)
            if answer is not None:
                cut[i] = (time.monotonic() - started, answer)
        if time.monotonic() - started < BODY_TIMEOUT - 0.5:
            latencies.append(healthz_seconds(front))
        # The slow clients' pace, a byte a second: the load under test, not a wait.
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started) % 1.0))
    for sock in clients:
        sock.close()
    assert len(latencies) >= 2
    assert max(latencies) < 2.0, latencies
    assert len(cut) == 64, f"{64 - len(cut)} slow clients still connected"
    for after, answer in cut.values():
        assert BODY_TIMEOUT - 0.5 <= after <= BODY_TIMEOUT + 4, after
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    assert sum(answer.startswith(b"HTTP/1.1 408 ") for _, answer in cut.values()) > 0
    assert healthz_seconds(front) < 2.0


def test_slow_request_head_is_cut_with_408(front: str) -> None:
    clients = [connect(front) for _ in range(8)]
    for sock in clients:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\n")
    started = time.monotonic()
    answers: dict[int, tuple[float, bytes]] = {}
    while len(answers) < len(clients) and time.monotonic() - started < HEADER_TIMEOUT + 5:
        for i, sock in enumerate(clients):  # Slowloris: a header byte every 0.25 s, never done
            if i not in answers:
                try:
                    sock.sendall(b"X")
                except OSError:
                    answers[i] = (time.monotonic() - started, b"")
                    continue
                answer = is_cut(sock)
                if answer is not None:
                    answers[i] = (time.monotonic() - started, answer)
        time.sleep(0.25)  # the Slowloris pace: the behaviour under test, not a wait
    for sock in clients:
        sock.close()
    assert len(answers) == len(clients), "a slow request head was never cut"
    for after, answer in answers.values():
        assert HEADER_TIMEOUT - 0.5 <= after <= HEADER_TIMEOUT + 3, after
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:80]


def test_chunked_body_over_the_limit_is_413_and_counted(front: str) -> None:
    chunk = b"x" * (1024 * 1024)
    with connect(front) as sock:
        sock.sendall(webhook_head(chunked=True, X_Hub_Signature_256="sha256=00"))
        sent = 0
        try:
            for _ in range(26):  # 26 MB: over the 25 MB limit
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may stop taking bytes after its answer: the answer is what counts
        answer = read_answer(sock)
    assert sent > LIMIT
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["status"] == 413 and f"{LIMIT}-byte limit" in body["message"]
    expected = 'spyre_ci_deliveries_total{event="push",outcome="too_large"} 1'
    deadline = time.monotonic() + 5
    while expected not in (text := requests.get(f"{front}/metrics", timeout=5).text):
        assert time.monotonic() < deadline, text
        time.sleep(0.1)


def test_content_length_over_the_limit_is_413_before_the_body(front: str) -> None:
    with connect(front) as sock:
        started = time.monotonic()
        sock.sendall(webhook_head(length=LIMIT + 1, X_Hub_Signature_256="sha256=00"))
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert time.monotonic() - started < LINGER_BOUND


def test_chunked_body_within_the_limit_is_verified_whole(front: str) -> None:
    def pieces() -> Iterator[bytes]:  # a generator body: requests sends it chunked
        for i in range(0, len(PUSH), 7):
            yield PUSH[i : i + 7]

    answer = requests.post(
        f"{front}/github/webhook",
        data=pieces(),
        timeout=10,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "chunked-1",
            "X-Hub-Signature-256": sign(SECRET, PUSH),
        },
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["message"] == "enqueued"


def test_expect_continue_then_keep_alive(front: str) -> None:
    with connect(front) as sock:
        sock.sendall(
            webhook_head(
                length=len(PUSH), X_Hub_Signature_256=sign(SECRET, PUSH), Expect="100-continue"
            )
        )
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(PUSH)
        sock.settimeout(5)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 202 "), first[:200]
        # The same connection serves the next request.
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
        assert read_answer(sock).startswith(b"HTTP/1.1 200 ")


def test_connections_past_the_cap_get_503(redis_proc: RedisProcess) -> None:
    args = ["--workers", "1", "--max-connections", "4", "--log-level", "warning"]
    with serving(relay_env(redis_proc.url), *args) as url:

        def hold_the_cap() -> list[socket.socket] | None:
            """Four connections the server took (none answered at once), or None while the
            startup probe's connection is still open on the server's side."""
            held = [connect(url) for _ in range(4)]
            answered, _, _ = select.select(held, [], [], 0.2)
            if answered:
                for sock in held:
                    sock.close()
                return None
            return held

        held = wait_for(hold_the_cap, 10, "four connections held under a cap of four", every=0.1)
        try:
            with connect(url) as extra:  # answered on accept, before it sends anything
                answer = read_answer(extra)
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
            assert b"Retry-After: 1" in answer
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 5
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "slots were not given back"
            time.sleep(0.1)
