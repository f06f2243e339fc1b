"""A local package index (PEP 503 "simple" repository API) serving a folder of wheels.

- `GET /simple/`              every project that has a wheel in the folder
- `GET /simple/{project}/`    one `<a href="/files/{wheel}#sha256={hex}">{wheel}</a>` per wheel
  of the project (names normalised per PEP 503; a request for a name that is not normalised
  is redirected to the normalised one, as PEP 503 allows)
- `GET|HEAD /files/{wheel}`   the wheel's bytes, streamed, with Content-Length

The folder is read on every request: wheels copied in after start are listed. A file's
sha256 is computed once and kept while its size and mtime stay the same.

Faults, for hostile-input tests: `delay_s` (every answer waits that long), `fail_next`
(the next matching requests answer an error status), `truncate` (a file's answer announces
its full Content-Length, sends only its first bytes, then closes the connection).

Everything received is recorded in `server.requests`. Use it as a context manager or through
the `wheel_index` fixture (import it into a conftest or a test module)::

    with WheelIndexServer(wheel_dir) as index:
        pip download --no-deps --index-url {index.url} torch==2.14.0 -d out
"""

from __future__ import annotations

import hashlib
import html
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pytest

CHUNK = 1024 * 1024


@dataclass
class IndexRequest:
    method: str
    path: str  # without the query
    headers: dict[str, str]


@dataclass
class _Failure:
    pattern: re.Pattern[str]
    status: int
    times: int


def normalize(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class WheelIndexServer:
    """The server over `folder`; `url` is the index root (`.../simple/`) for pip's
    `--index-url`."""

    folder: Path
    delay_s: float = 0.0
    requests: list[IndexRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)
        self._hashes: dict[str, tuple[int, int, str]] = {}
        self._failures: list[_Failure] = []
        self._truncated: dict[str, int] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> WheelIndexServer:
        handler = type("Handler", (_Handler,), {"index": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> WheelIndexServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def root(self) -> str:
        """`http://127.0.0.1:PORT` (no path)."""
        assert self._httpd is not None, "start() the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def url(self) -> str:
        """The index root for pip's `--index-url`."""
        return self.root + "/simple/"

    # -- test set-up and inspection ------------------------------------------------------------

    def fail_next(self, path_regex: str, status: int = 503, times: int = 1) -> None:
        """Answer the next `times` requests whose path matches with `status`."""
        with self._lock:
            self._failures.append(_Failure(re.compile(path_regex), status, times))

    def truncate(self, name: str, keep_bytes: int) -> None:
        """From now on, answer file `name` with its full Content-Length but only its first
        `keep_bytes` bytes, then close the connection (a download broken off)."""
        with self._lock:
            self._truncated[name] = keep_bytes

    def find(self, path_regex: str, method: str = "GET") -> list[IndexRequest]:
        """Recorded requests with `method` whose path matches `path_regex`."""
        pattern = re.compile(path_regex)
        return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    def wheels(self) -> dict[str, list[Path]]:
        """The folder's wheels by normalised project name, sorted by file name."""
        found: dict[str, list[Path]] = {}
        for path in sorted(self.folder.glob("*.whl")):
            found.setdefault(normalize(path.name.split("-", 1)[0]), []).append(path)
        return found

    def sha256(self, path: Path) -> str:
        """The file's sha256 hex, computed again only when its size or mtime changed."""
        stat = path.stat()
        with self._lock:
            cached = self._hashes.get(path.name)
        if cached and cached[:2] == (stat.st_size, stat.st_mtime_ns):
            return cached[2]
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
        with self._lock:
            self._hashes[path.name] = (stat.st_size, stat.st_mtime_ns, digest.hexdigest())
        return digest.hexdigest()

    # -- request handling ------------------------------------------------------------------------

    def _failure(self, path: str) -> int | None:
        with self._lock:
            for failure in self._failures:
                if failure.times > 0 and failure.pattern.search(path):
                    failure.times -= 1
                    return failure.status
        return None

    def _project_list(self) -> bytes:
        links = "".join(
            f'    <a href="/simple/{name}/">{name}</a>\n' for name in sorted(self.wheels())
        )
        return _page("Simple index", links)

    def _project_page(self, project: str) -> bytes | None:
        wheels = self.wheels().get(project)
        if not wheels:
            return None
        links = "".join(
            f'    <a href="/files/{quote(w.name)}#sha256={self.sha256(w)}">'
            f"{html.escape(w.name)}</a><br/>\n"
            for w in wheels
        )
        return _page(f"Links for {project}", links)


def _page(title: str, body: str) -> bytes:
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}  </body>\n</html>\n"
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    index: WheelIndexServer
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        path = urlsplit(self.path).path
        headers = {k.lower(): v for k, v in self.headers.items()}
        with self.index._lock:
            self.index.requests.append(IndexRequest(self.command, path, headers))
        if self.index.delay_s:
            time.sleep(self.index.delay_s)  # a slow index, as a test asks: the case under test
        status = self.index._failure(path)
        if status is not None:
            self._send(status, f"Injected failure {status}\n".encode(), "text/plain")
            return
        if path == "/simple/":
            self._send(200, self.index._project_list())
            return
        match = re.fullmatch(r"/simple/([^/]+)/?", path)
        if match:
            project = unquote(match.group(1))
            if path != f"/simple/{normalize(project)}/":
                self._redirect(f"/simple/{normalize(project)}/")
                return
            page = self.index._project_page(normalize(project))
            if page is None:
                self._send(404, b"Not Found\n", "text/plain")
            else:
                self._send(200, page)
            return
        match = re.fullmatch(r"/files/([^/]+)", path)
        name = unquote(match.group(1)) if match else ""
        file = self.index.folder / name
        if "/" in name or name in ("", ".", "..") or not file.is_file():
            self._send(404, b"Not Found\n", "text/plain")
            return
        self._send_file(file)

    do_GET = do_HEAD = _serve

    def _send(self, status: int, data: bytes, kind: str = "text/html; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _redirect(self, location: str) -> None:
        self.send_response(301)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_file(self, file: Path) -> None:
        size = file.stat().st_size
        with self.index._lock:
            keep = self.index._truncated.get(file.name)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if self.command == "HEAD":
            return
        try:
            with open(file, "rb") as f:
                if keep is None:
                    shutil.copyfileobj(f, self.wfile, CHUNK)
                    return
                left = min(keep, size)
                while left > 0 and (chunk := f.read(min(CHUNK, left))):
                    self.wfile.write(chunk)
                    left -= len(chunk)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up mid-download
        self.close_connection = True  # a cut answer: the client sees the connection end

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean; requests are recorded instead


@pytest.fixture()
def wheel_index(tmp_path: Path) -> Iterator[WheelIndexServer]:
    """A running WheelIndexServer over `tmp_path / "wheels"` (created empty), stopped after
    the test; put wheels into `wheel_index.folder`."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    with WheelIndexServer(folder) as server:
        yield server
