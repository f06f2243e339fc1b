"""CPU the relay front spends framing one webhook delivery: parse the head, read the body,
frame the answer (relay/http1.py), in-process, no sockets, no application.

    .venv/bin/python benchmarks/relay_framing.py [--requests 20000] [--chunked] [--no-record]
    .venv/bin/python benchmarks/relay_framing.py --root OTHER_CHECKOUT ...   # another version

Records benchmarks/results/relay_framing.json (process CPU time per request, best of 5).
With `--root` the framing module of another checkout is measured the same way (an earlier
version framed HTTP/1.1 by hand: `parse_head`, `chunk_size`, `response_head`), so before and
after can be compared in one run on one machine.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODY = json.dumps({"ref": "refs/heads/main", "after": "a" * 40, "commits": [{"id": "b" * 40}] * 20})


def request(chunked: bool) -> bytes:
    body = BODY.encode()
    head = [
        "POST /github/webhook HTTP/1.1",
        "Host: relay.example",
        "User-Agent: GitHub-Hookshot/abc123",
        "Content-Type: application/json",
        "X-GitHub-Event: push",
        "X-GitHub-Delivery: 0f0e0d0c-0b0a-0908-0706-050403020100",
        "X-Hub-Signature-256: sha256=" + "c" * 64,
    ]
    if chunked:
        head.append("Transfer-Encoding: chunked")
        framed = b"".join(
            f"{len(body[i : i + 1024]):x}\r\n".encode() + body[i : i + 1024] + b"\r\n"
            for i in range(0, len(body), 1024)
        )
        body = framed + b"0\r\n\r\n"
    else:
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def new_framing(http1: object, data: bytes) -> int:
    exchange = http1.Exchange(64 * 1024)  # type: ignore[attr-defined]
    exchange.receive(data)
    head = exchange.request()
    parts = []
    while (part := exchange.body_part()) not in (b"", None):
        parts.append(part)
    answer = exchange.response("202 ACCEPTED", [("Content-Type", "application/json")], b"{}", False)
    return len(answer) + len(head.fields) + sum(map(len, parts))


def old_framing(http1: object, data: bytes) -> int:
    end = data.index(b"\r\n\r\n") + 4
    head = http1.parse_head(data[:end])  # type: ignore[attr-defined]
    rest = data[end:]
    if head.chunked:
        parts = []
        while True:
            line, _, rest = rest.partition(b"\r\n")
            size = http1.chunk_size(line)  # type: ignore[attr-defined]
            if not size:
                break
            parts.append(rest[:size])
            rest = rest[size + 2 :]
        body = b"".join(parts)
    else:
        body = rest[: head.content_length]
    answer = http1.response_head(  # type: ignore[attr-defined]
        "202 ACCEPTED", [("Content-Type", "application/json")], 2, close=False
    )
    return len(answer) + len(head.fields) + len(body)


def measure(root: Path, requests: int, chunked: bool) -> tuple[str, float]:
    sys.path.insert(0, str(root))
    for name in [m for m in sys.modules if m == "relay" or m.startswith("relay.")]:
        del sys.modules[name]
    http1 = importlib.import_module("relay.http1")
    sys.path.pop(0)
    frame = new_framing if hasattr(http1, "Exchange") else old_framing
    kind = "h11 (relay.http1.Exchange)" if frame is new_framing else "hand-written framing"
    data = request(chunked)
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(requests):
            frame(http1, data)
        best = min(best, time.process_time() - started)
    return kind, 1e6 * best / requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--chunked", action="store_true", help="chunked bodies (1 KiB chunks)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    kind, us = measure(args.root.resolve(), args.requests, args.chunked)
    record = {
        "name": "relay_framing",
        "value": round(us, 1),
        "unit": "us of process CPU per delivery framed (head, body, answer), best of 5",
        "framing": kind,
        "body": "chunked, 1 KiB chunks" if args.chunked else "Content-Length",
        "requests": args.requests,
        "command": " ".join(["python", "benchmarks/relay_framing.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
    }
    print(json.dumps(record, indent=1))
    if not args.no_record:
        out = ROOT / "benchmarks" / "results" / "relay_framing.json"
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
