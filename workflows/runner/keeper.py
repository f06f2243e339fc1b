"""The keeper: the parent every test process and the zygote run under, warm or cold.

    python -I -S keeper.py RUNNER_PID OUTPUT_BYTES MEMORY_MB -- COMMAND...

A test process and the zygote run code the runner does not trust (a test, a run's changed
torch module): what they do to their parent (`os.kill(os.getppid(), SIGKILL)`) they do to a
keeper, never to the runner or the zygote. A keeper:

- starts its process in its own session's group (the runner kills that group), tied to the
  keeper by a death signal, itself tied to its parent the same way: the runner's death takes
  every process below it along, and a keeper's death takes its process;
- passes the process's stdout and stderr through pipes into its own (the runner's files),
  at most `OUTPUT_BYTES` of each: the first half and the end, with a line where it was cut
  (`Capped`);
- ends as its process ended: by the same signal, or with the same exit code (`end_as`).

A cold test process's keeper is this file run as a script (stdlib only, `-I -S`: it starts
in milliseconds and imports nothing of the environment it runs the test in); the zygote's
keeper and a warm test process's are forks of the zygote's interpreter (`fork_kept`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import resource
import select
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
DEFAULT_OUTPUT_BYTES = 16 * 1024 * 1024  # of each stream of one test process
CUT_NOTE = (
    "\n[spyre-ci: the output is cut here, after its first {head} bytes; what follows is its end]\n"
)
END_NOTE = "\n[spyre-ci: {cut} bytes of this output were cut where it says so ({seen} written)]\n"


def status_text(returncode: int | None) -> str:
    """How a process ended, as the runner says it: "killed by signal 9 (SIGKILL)", "exited
    with code 3" (`returncode` as `subprocess` gives it: minus the signal's number)."""
    if returncode is None:
        return "was killed"
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:  # a real-time signal has no name of its own
            name = f"SIGRTMIN+{number - signal.SIGRTMIN}" if number > signal.SIGRTMIN else "?"
        return f"killed by signal {number} ({name})"
    return f"exited with code {returncode}"


def die_with_parent() -> None:
    """SIGKILL this process when its parent ends (Linux; elsewhere a no-op)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def end_as(status: int) -> NoReturn:
    """End this process as the one whose wait status is `status` ended: by its signal
    (SIGKILL and SIGSTOP cannot be handled, so none is reset), else with its exit code."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to end: as a shell says it
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70)


class Capped:
    """Writes a stream into `fd` keeping at most `limit` bytes: the first half as it comes,
    then a note where it was cut, then the latest bytes (a quarter to a half of `limit`),
    rewritten in place as more comes, so the file never grows past `limit` and a kill at
    any moment leaves both ends and the note."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.head = max(1, limit // 2)
        self.tail = max(1, limit // 4)
        self.seen = 0
        self.cut_at: int | None = None  # the file offset after the note, once cut
        self.recent = bytearray()  # what follows the note, as it is on disk

    def write(self, data: bytes) -> None:
        written = self.seen
        self.seen += len(data)
        if self.cut_at is None:
            room = self.head - written
            if len(data) <= room:
                _write(self.fd, data)
                return
            _write(self.fd, data[:room])
            data = data[room:]
            _write(self.fd, CUT_NOTE.format(head=self.head).encode())
            try:
                self.cut_at = os.lseek(self.fd, 0, os.SEEK_END)
            except OSError:  # a pipe or a terminal: nothing can be rewritten, drop the rest
                self.cut_at = -1
        if self.cut_at < 0:
            return
        self.recent += data
        if len(self.recent) <= 2 * self.tail:
            _write(self.fd, data)
            return
        del self.recent[: len(self.recent) - self.tail]
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, self.cut_at)
            os.lseek(self.fd, self.cut_at, os.SEEK_SET)
        _write(self.fd, bytes(self.recent))

    def close(self) -> None:
        if self.cut_at is not None:
            kept = self.head + len(self.recent)
            _write(self.fd, END_NOTE.format(cut=self.seen - kept, seen=self.seen).encode())


def keep(pid: int, streams: Sequence[tuple[int, int]], limit: int) -> NoReturn:
    """Copy each (pipe, file descriptor) of `streams` through `Capped` until process `pid`
    ends, then end as it ended. A background child of the process that still holds a pipe
    gets what it wrote so far read, not waited for: the runner kills it with the group."""
    try:
        sinks = {pipe: Capped(fd, limit) for pipe, fd in streams}
        status: int | None = None
        while status is None:
            readable, _, _ = select.select(list(sinks), [], [], 0.1) if sinks else ([], [], [])
            for pipe in readable:
                if not _copy(pipe, sinks):
                    sinks[pipe].close()
                    del sinks[pipe]
            if sinks:
                done, found = os.waitpid(pid, os.WNOHANG)
                status = found if done else None
            else:
                status = os.waitpid(pid, 0)[1]
        for pipe in list(sinks):  # what is there now, never waiting for more
            fcntl.fcntl(pipe, fcntl.F_SETFL, fcntl.fcntl(pipe, fcntl.F_GETFL) | os.O_NONBLOCK)
            while _copy(pipe, sinks):
                pass
            sinks[pipe].close()
    except BaseException:  # noqa: BLE001 - whatever happened, the keeper must not go on
        os._exit(70)
    end_as(status)


def fork_kept(limit: int) -> int:
    """Fork: in the child (returns 0) stdout and stderr are pipes into this process's and
    it dies with it; this process becomes the child's keeper (`keep`) and never returns."""
    pipes = [os.pipe(), os.pipe()]
    pid = os.fork()
    if pid == 0:
        for fd, (read_end, write_end) in zip((1, 2), pipes, strict=True):
            os.close(read_end)
            os.dup2(write_end, fd)
            os.close(write_end)
        die_with_parent()
        return 0
    for _, write_end in pipes:
        os.close(write_end)
    keep(pid, [(pipes[0][0], 1), (pipes[1][0], 2)], limit)


def _copy(pipe: int, sinks: dict[int, Capped]) -> bool:
    """Move what `pipe` holds into its sink; False at its end (or nothing more for now)."""
    try:
        data = os.read(pipe, 65536)
    except OSError as exc:
        return exc.errno == errno.EINTR
    if data:
        sinks[pipe].write(data)
    return bool(data)


def _write(fd: int, data: bytes) -> None:
    """All of `data`; a full disk loses output, never the process it comes from."""
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data) :]


def main(argv: Sequence[str]) -> NoReturn:
    """The cold test process's keeper: `RUNNER_PID OUTPUT_BYTES MEMORY_MB -- COMMAND...`
    (MEMORY_MB 0: no limit). Its stdout and stderr are the runner's files."""
    runner, limit, memory_mb = (int(a) for a in argv[:3])
    command = list(argv[4:])
    die_with_parent()
    if os.getppid() != runner:  # the runner ended before the death signal was set
        os._exit(70)
    if fork_kept(limit) == 0:
        if memory_mb:
            cap = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"spyre-ci keeper: cannot run {command[0]}: {exc}\n".encode())
            os._exit(127)
    os._exit(70)  # not reached: the keeper ends in `keep`


if __name__ == "__main__":
    main(sys.argv[1:])
