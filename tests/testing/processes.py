"""Loopback ports and the process tree of the tests' subprocesses."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launcher(pid: int) -> int | None:
    """The process that started test process `pid`: its parent, or, for a test process the
    warm runner forked, the parent of the zygote it was forked from (with zygotes shared,
    the process that started the zygote, not always the shard's owner: a shard's lease
    names its owner).

    None when `pid` ended before this looked (between two `ps` calls), or its launcher did:
    a caller that signals the answer must never get 0 (`os.kill(0, ...)` signals its own
    process group: the whole test run) or 1."""
    table: dict[int, tuple[int, str]] = {}
    out = subprocess.run(["ps", "-eww", "-o", "pid=,ppid=,args="], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        parts = line.strip().split(None, 2)
        if len(parts) == 3:
            table[int(parts[0])] = (int(parts[1]), parts[2])
    if pid not in table:
        return None
    parent = table[pid][0]
    while parent in table and "workflows.runner.zygote_process" in table[parent][1]:
        parent = table[parent][0]
    return parent if parent > 1 and parent in table else None
