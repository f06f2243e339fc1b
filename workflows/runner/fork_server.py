"""A process that forks one child per request on a Unix socket and reports each child's
exit status: the warm runner's zygote (`workflows.runner.zygote_process`) and the warm
`spyre-ci` process (`workflows.cli.warm_process`) are both one, each with its own child.

A request is one JSON line, with at most MAX_FDS descriptors passed beside it (SCM_RIGHTS);
the answer is `{"pid": N}` once the child is in a session of its own, then `{"exit": CODE}`
(`os.waitstatus_to_exitcode`: minus the signal that killed it), or `{"error": WHY}` when it
was refused. Only a process of the same user is served.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workflows.runner import keeper

_REFUSED = "refused to fork"
USED_FILE = "used"  # touched whenever a shared process is used (`warm_share.make_room`)


# A child's function: (its request, the descriptor it writes one byte to once it is in a
# session of its own, the parent's sockets it closes, the descriptors the request passed).
Child = Callable[[dict[str, Any], int, Sequence[socket.socket], list[int]], None]
MAX_FDS = 3  # descriptors one request may pass (SCM_RIGHTS): a command line's stdin, out, err


class Server:
    """Fork one child per request on `listener` (a JSON line, with at most MAX_FDS
    descriptors), report each child's exit status on the connection that asked for it, and
    kill a child whose connection closes first. `prepare`, called before each fork and
    whenever it is idle (twice a second): a reason to refuse forks and end (the code this
    process loaded changed), or None once it has done what it does ahead of forks. Ended so,
    it stops listening at once (a process waiting to connect is turned away, not kept) and
    exits when its last child has; it also ends when its parent does (unless it
    `outlives_parent`), or when `lifeline` reads its end."""

    def __init__(
        self,
        listener: socket.socket,
        child: Child,
        idle_s: float | None = None,
        prepare: Callable[[], str | None] | None = None,
        outlives_parent: bool = False,
        lifeline: int | None = None,
    ) -> None:
        self.listener = listener
        self.lifeline = lifeline  # a descriptor whose end (its writer gone) ends the process
        self.child = child
        self.prepare = prepare
        self.ended = False
        self.buffers: dict[socket.socket, bytes] = {}
        self.fds: dict[socket.socket, list[int]] = {}  # passed with a request not yet read
        self.children: dict[int, socket.socket] = {}  # pid -> the connection that asked
        # A zygote ends with its keeper; a warm `spyre-ci` process outlives its starter.
        self.parent = None if outlives_parent else os.getppid()
        self.idle_s = idle_s  # shared: how long it stays with nothing to do
        self.active = time.monotonic()
        self.touched = 0.0  # when it last said it is in use (USED_FILE)
        self.folder = Path(listener.getsockname()).parent

    def loop(self) -> None:
        stdin = self.lifeline
        while True:
            # The connections of running children too: one that closes is a runner gone
            # (killed, say), and its test process must not run on.
            if self.ended and self.listener.fileno() >= 0:
                self.listener.close()  # turned away now, rather than when the last child ends
            listening = [] if self.ended else [self.listener]
            waiting: list[Any] = [*listening, *self.buffers, *self.children.values()]
            if stdin is not None:
                waiting.append(stdin)
            # A child's end is seen within 20 ms; with none running, a request or the
            # lifeline wakes it, so an idle zygote looks twice a second (not 50 times).
            pause = 0.02 if self.children else 0.5
            readable, _, _ = select.select(waiting, [], [], pause)
            if stdin is not None and stdin in readable and not os.read(stdin, 4096):
                return  # the runner is gone or stopped us
            orphaned = self.parent is not None and os.getppid() != self.parent
            if orphaned or (self.ended and not self.children):
                return
            if self.listener in readable and not self.ended:
                conn, _ = self.listener.accept()
                if _peer_uid(conn) == os.getuid():
                    self.buffers[conn] = b""
                else:  # its folder is this user's alone; a socket passed elsewhere is not
                    conn.close()
            for conn in [c for c in readable if isinstance(c, socket.socket)]:
                if conn in self.buffers:
                    self._receive(conn)
                elif conn is not self.listener:
                    self._closed(conn)
            self._reap()
            if self.buffers or self.children:
                now = time.monotonic()
                if self.idle_s is not None and now - self.touched > 2.0:
                    # In use, every 2 s while it is (a child may run for an hour): a process
                    # making room for another spares this one.
                    with contextlib.suppress(OSError):
                        (self.folder / USED_FILE).touch()
                    self.touched = now
                self.active = now
            elif self.idle_s is not None and time.monotonic() - self.active > self.idle_s:
                return  # shared, and nobody asked for anything for that long
            elif self.prepare is not None and not self.ended and self.prepare() is not None:
                self.ended = True  # idle, and told to end: nobody forks from it again

    def _receive(self, conn: socket.socket) -> None:
        try:
            chunk, fds, _, _ = socket.recv_fds(conn, 65536, MAX_FDS)
        except OSError:
            chunk, fds = b"", []
        self.fds.setdefault(conn, []).extend(fds)
        if not chunk:  # the runner's side closed: a child it asked for must not run on
            self.buffers.pop(conn, None)
            close_all(self.fds.pop(conn, []))
            conn.close()
            return
        self.buffers[conn] += chunk
        if b"\n" not in self.buffers[conn]:
            return
        line = self.buffers.pop(conn).split(b"\n", 1)[0]
        fds = self.fds.pop(conn, [])
        try:
            why = self.prepare() if self.prepare is not None else None
            if why is not None:
                self.ended = True  # nobody should fork from it again
                raise RuntimeError(f"{_REFUSED}: {why}")
            pid = self._fork(json.loads(line), fds)
        except Exception as exc:  # noqa: BLE001 - the runner starts this one cold
            _send(conn, {"error": str(exc)})
            conn.close()
            return
        finally:
            close_all(fds)  # the child has its copies
        self.children[pid] = conn
        _send(conn, {"pid": pid})

    def _closed(self, conn: socket.socket) -> None:
        """A connection of a running child said something or closed: the runner sends
        nothing after its request, so it closed; its child is killed."""
        try:
            chunk = conn.recv(4096)
        except OSError:
            chunk = b""
        if chunk:
            return
        for pid, owner in list(self.children.items()):
            if owner is conn:
                _kill(pid)
                del self.children[pid]  # reaped by `_reap`, with nobody to tell
        conn.close()

    def _fork(self, request: dict[str, Any], fds: list[int]) -> int:
        threads = threading.active_count()
        if threads != 1:
            # A fork copies the threads' locks, not the threads: the child could hang.
            raise RuntimeError(f"{_REFUSED}: {threads} threads run in the forking process")
        sys.stdout.flush()
        sys.stderr.flush()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            inherited = [self.listener, *self.buffers, *self.children.values()]
            self.child(request, ready_w, inherited, fds)
        os.close(ready_w)
        os.read(ready_r, 1)  # its own session first: the runner may killpg(pid) at once
        os.close(ready_r)
        return pid

    def _reap(self) -> None:
        while True:  # killed children no longer in `children` are reaped too
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                conn.close()

    def kill_children(self) -> None:
        for pid in list(self.children):
            _kill(pid)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (-1: unknown)."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return -1
    return int(struct.unpack("3i", raw)[1])


def close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def leave_parent(ready: int, inherited: Sequence[socket.socket]) -> None:
    """A forked child's first steps: a session of its own (said on `ready`: its parent
    answers the request then, and its group can be killed), death with its parent, and none
    of the parent's sockets."""
    os.setsid()
    os.write(ready, b"x")
    os.close(ready)
    keeper.die_with_parent()
    for sock in inherited:
        sock.close()


def show_as(command: Sequence[str]) -> None:
    """Make `ps` show this child as the cold command it stands for: its argv memory (the
    zygote's, padded for it) gets that command line. Best effort, Linux only."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49: arg_start, arg_end
        if start <= 0 or end <= start:
            return
        text = "\0".join(command).encode()[: end - start - 1]
        ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)
