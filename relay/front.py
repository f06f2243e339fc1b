"""The relay's HTTP front: a gunicorn worker that reads requests on an event loop and runs the
WSGI application in a bounded thread pool only once a request has fully arrived.

Why (docs/relay.md, "Deployment"): gunicorn's sync and gthread workers give each connection a
thread that blocks on the socket, so 64 clients sending a byte a second held every thread and
/healthz timed out. Here a slow client holds a coroutine and its buffered bytes, and is cut by
deadlines on the whole head (`header_timeout`) and the whole body (`body_timeout`), not by a
per-read idle timeout a byte a second would satisfy. Bodies are read up to `max_body_bytes`,
Content-Length or chunked alike; past it the application is asked with the size alone, so it
answers 413 (and counts it) without the body ever being held. gunicorn stays the process
manager: forking, signals, the worker hooks in relay/server.py, restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gunicorn.workers.base import Worker

from relay.config import MAX_BODY_BYTES
from relay.http1 import Exchange, RequestHead, RequestRefused, refusal, wsgi_environ

READ_SIZE = 64 * 1024
LINGER_SECONDS = 2.0  # after an error answer, drain what the client still sends, then close


@dataclass(frozen=True)
class FrontSettings:
    """Bounds of one worker process (`spyre-ci serve` options; see docs/relay.md)."""

    header_timeout: float = 10.0  # request line + header fields, from connect (or keep-alive)
    body_timeout: float = 30.0  # the whole body, from the end of the head; also a response write
    keepalive: float = 5.0  # idle time allowed between requests on one connection
    max_connections: int = 1000  # open connections per worker; more are answered 503
    max_body_bytes: int = MAX_BODY_BYTES
    max_header_bytes: int = 64 * 1024
    threads: int = 4  # WSGI calls at once per worker


class _Cut(Exception):
    """The connection ends here (peer gone, or a deadline passed with nothing to answer)."""


class _Deadline(Exception):
    """A read deadline passed."""


class _TooLarge(Exception):
    def __init__(self, declared: int) -> None:
        self.declared = declared


async def receive(reader: asyncio.StreamReader, exchange: Exchange, deadline: float) -> None:
    """Hand what arrives next to `exchange` (b"" at the end of the stream); `_Deadline` at
    `deadline`."""
    try:
        async with asyncio.timeout_at(deadline):
            data = await reader.read(READ_SIZE)
    except TimeoutError:
        raise _Deadline from None
    exchange.receive(data)


async def read_head(
    reader: asyncio.StreamReader, exchange: Exchange, deadline: float
) -> RequestHead:
    """The next request's head, whole; `_Cut` when the client closed before sending one."""
    while True:
        try:
            head = exchange.request()
        except EOFError:
            raise _Cut from None
        if head is not None:
            return head
        await receive(reader, exchange, deadline)


async def read_body(
    reader: asyncio.StreamReader,
    exchange: Exchange,
    head: RequestHead,
    deadline: float,
    limit: int,
) -> bytes:
    """The whole body, de-chunked; `_TooLarge` as soon as it is known to exceed `limit`."""
    if head.content_length is not None and head.content_length > limit:
        raise _TooLarge(head.content_length)
    parts: list[bytes] = []
    total = 0
    while (part := exchange.body_part()) != b"":
        if part is None:
            await receive(reader, exchange, deadline)
            continue
        total += len(part)
        if total > limit:
            raise _TooLarge(total)
        parts.append(part)
    return b"".join(parts)


def _error_body(status: int, message: str) -> bytes:
    return json.dumps({"status": status, "message": message}).encode()


class FrontWorker(Worker):  # type: ignore[misc]
    """gunicorn worker class `relay.front.FrontWorker`; settings from `app.front_settings`."""

    def init_process(self) -> None:
        self.settings: FrontSettings = getattr(self.app, "front_settings", FrontSettings())
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.pool = ThreadPoolExecutor(self.settings.threads, thread_name_prefix="relay-wsgi")
        self.open_connections = 0
        self.in_app = 0  # requests read whole and not yet answered
        self.quick_exit = False
        self.stopping = asyncio.Event()
        self.connections: set[asyncio.Task[None]] = set()
        super().init_process()  # loads the app, runs post_worker_init, then run()

    def init_signals(self) -> None:
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        handlers: dict[int, Callable[[], None]] = {
            signal.SIGTERM: self._graceful,
            signal.SIGQUIT: self._quick,
            signal.SIGINT: self._quick,
            signal.SIGUSR1: self.log.reopen_files,
            signal.SIGWINCH: lambda: None,
            signal.SIGABRT: self._abort,
        }
        for sig, handler in handlers.items():
            self.loop.add_signal_handler(sig, handler)

    def _graceful(self) -> None:
        self.alive = False
        self.stopping.set()

    def _quick(self) -> None:
        self.quick_exit = True
        self._graceful()
        self.cfg.worker_int(self)

    def _abort(self) -> None:
        self.alive = False
        self.cfg.worker_abort(self)
        sys.exit(1)

    def run(self) -> None:
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.loop.close()

    async def _serve(self) -> None:
        servers = [
            await asyncio.start_server(self._connection, sock=listener.sock, limit=READ_SIZE)
            for listener in self.sockets
        ]
        while self.alive:
            self.notify()
            if self.ppid != os.getppid():
                self.log.info("parent changed, shutting down: %s", self)
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), timeout=1.0)
        for server in servers:
            server.close()
        # Requests already in the application get graceful_timeout to finish; connections
        # waiting on a client are cut at once.
        deadline = self.loop.time() + self.cfg.graceful_timeout
        while self.in_app and not self.quick_exit and self.loop.time() < deadline:
            self.notify()
            await asyncio.sleep(0.05)
        for task in list(self.connections):
            task.cancel()
        if self.connections:
            await asyncio.wait(self.connections, timeout=1.0)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= self.settings.max_connections or not self.alive:
            # Refused without reading: a flood past the cap costs no buffer and no thread.
            body = _error_body(503, "connection limit reached; retry shortly")
            headers = [("Content-Type", "application/json"), ("Retry-After", "1")]
            writer.write(refusal(503, headers, body))
            writer.close()
            return
        self.open_connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            await self._requests(reader, writer)
        except (_Cut, ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # noqa: BLE001 - one connection's failure must not end the worker
            self.log.exception("relay front: connection failed")
        finally:
            self.open_connections -= 1
            self.connections.discard(task)
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one connection until it closes, fails or idles out."""
        exchange = Exchange(self.settings.max_header_bytes)
        settings = self.settings
        first = True
        while self.alive:
            began = self.loop.time()
            head_deadline = began + settings.header_timeout
            if not first and exchange.idle:
                try:  # keep-alive: an idle connection is closed quietly
                    await receive(reader, exchange, min(head_deadline, began + settings.keepalive))
                except _Deadline:
                    return
            first = False
            try:
                head = await read_head(reader, exchange, head_deadline)
            except _Deadline:
                return await self._refuse(writer, reader, 408, "request head not received in time")
            except RequestRefused as exc:
                return await self._refuse(writer, reader, exc.status, str(exc))
            if (head.content_length or 0) <= settings.max_body_bytes:
                writer.write(exchange.interim_continue())
            body_deadline = self.loop.time() + settings.body_timeout
            declared = None
            try:
                body = await read_body(
                    reader, exchange, head, body_deadline, settings.max_body_bytes
                )
            except _Deadline:
                return await self._refuse(writer, reader, 408, "request body not received in time")
            except RequestRefused as exc:
                return await self._refuse(writer, reader, exc.status, str(exc))
            except _TooLarge as exc:
                body, declared = b"", max(exc.declared, settings.max_body_bytes + 1)
            status, headers, payload = await self._call_app(
                wsgi_environ(
                    head, body, _address(writer, "sockname"), _address(writer, "peername"), declared
                )
            )
            if declared is not None and not status.startswith("413"):
                message = f"body is over the {settings.max_body_bytes}-byte limit"
                status, headers = "413 Content Too Large", [("Content-Type", "application/json")]
                payload = _error_body(413, message)
            length = None
            if head.method == "HEAD":
                given = next((v for k, v in headers if k.lower() == "content-length"), "0")
                length = int(given) if given.isdigit() else 0
            close = declared is not None or not self.alive
            writer.write(exchange.response(status, headers, payload, close, length))
            await self._drain(writer)
            if declared is not None:
                return await self._linger(writer, reader)
            if not exchange.next_cycle():
                return

    async def _call_app(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        self.in_app += 1
        try:
            return await self.loop.run_in_executor(self.pool, self._wsgi_call, environ)
        except Exception:  # noqa: BLE001 - the application's failure is the client's 500
            self.log.exception("relay front: the application raised")
            return "500 Internal Server Error", [], _error_body(500, "internal error")
        finally:
            self.in_app -= 1

    def _wsgi_call(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        """One WSGI call in a pool thread, its response collected whole."""
        started: list[tuple[str, list[tuple[str, str]]]] = []
        chunks: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            if exc_info is not None and chunks:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [(status, headers)]
            return chunks.append

        result = self.wsgi(environ, start_response)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        ((status, headers),) = started
        return status, headers, b"".join(chunks)

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        """Send what is written; a client that does not read within body_timeout is cut."""
        try:
            async with asyncio.timeout(self.settings.body_timeout):
                await writer.drain()
        except TimeoutError:
            raise _Cut from None

    async def _refuse(
        self, writer: asyncio.StreamWriter, reader: asyncio.StreamReader, status: int, message: str
    ) -> None:
        """Answer `status` from the front itself and close the connection."""
        body = _error_body(status, message)
        headers = [("Content-Type", "application/json")]
        writer.write(refusal(status, headers, body))
        await self._drain(writer)
        await self._linger(writer, reader)

    async def _linger(self, writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> None:
        """Close after an error answer without a reset: stop sending, then drop what the client
        still sends for up to LINGER_SECONDS, so it can read the answer (as nginx's lingering
        close does); nothing read here is kept."""
        if writer.can_write_eof():
            writer.write_eof()
        try:
            async with asyncio.timeout(LINGER_SECONDS):
                while await reader.read(READ_SIZE):
                    pass
        except (TimeoutError, ConnectionError):
            pass


def _address(writer: asyncio.StreamWriter, which: str) -> tuple[str, int]:
    address = writer.get_extra_info(which)
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return "", 0
