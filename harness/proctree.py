"""Process trees on Linux: who descends from whom, signalled without hitting a recycled pid.

A pod's kill must take what a container's cgroup would: its process group and
any descendant that left it. These helpers read /proc; where there is none
they find nothing, and a kill still takes the process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


Process = tuple[int, int]
"""(pid, start time in clock ticks since boot): a process, told apart from a later one with its pid."""


def _stat(pid: int | str) -> tuple[int, int] | None:
    """(parent pid, start time) from /proc, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[19])


def identify(pid: int) -> Process | None:
    """The process now behind ``pid`` (None when there is none, or no /proc to ask)."""
    stat = _stat(pid)
    return None if stat is None else (pid, stat[1])


def descendants(pid: int) -> list[Process]:
    """Every live descendant of ``pid`` (empty where there is no /proc)."""
    children: dict[int, list[Process]] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if entry.name.isdigit() and (stat := _stat(entry.name)) is not None:
            children.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child[0])
    return found


def signal_if_same(process: Process, sig: signal.Signals) -> None:
    """Signal a process only if it is still the one seen (its pid may belong to another by now)."""
    pid, started = process
    stat = _stat(pid)
    if stat is not None and stat[1] == started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def becoming(uid: int, gid: int, *, die_with_parent_too: bool) -> Callable[[], None]:
    """A ``preexec_fn`` that runs the child as ``uid``:``gid`` (and, if asked, dies with its parent), as
    ``subprocess``'s ``user`` and ``group`` do: uvloop's subprocesses take no ``user`` nor ``group``."""

    parent = os.getpid()

    def become() -> None:  # pragma: no cover - runs in the child between fork and exec
        os.setregid(gid, gid)
        os.setreuid(uid, uid)
        if die_with_parent_too:
            # After the change of user: the kernel clears a parent-death signal when the effective
            # user or group changes (prctl(2)), so asked for before it, PostgreSQL outlived a
            # SIGKILLed harness until it noticed its lock file gone (up to a minute).
            die_with_parent()
            if os.getppid() != parent:  # it died before the signal was asked for
                os.kill(os.getpid(), signal.SIGKILL)

    return become


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL this (child) process when its parent dies, whatever kills the parent."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


LISTEN = "0A"
"""A socket's state in /proc/net/tcp when it listens."""


def listening(pid: int) -> list[tuple[str, int]]:
    """The TCP addresses ``pid`` and its descendants listen on, as (address, port), sorted; empty where
    there is no /proc, or none. Their sockets (by inode, from their open files) are looked up in the
    tables of their network namespace: what a server that ignored the port it was given took instead."""
    inodes: set[str] = set()
    pids = [pid, *(p for p, _ in descendants(pid))]
    for each in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{each}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{each}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    if not inodes:
        return []
    found: set[tuple[str, int]] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            next(f, None)  # the heading
            for line in f:
                fields = line.split()
                if len(fields) > 9 and fields[3] == LISTEN and fields[9] in inodes:
                    found.add(_address(fields[1]))
    return sorted(found, key=lambda a: (a[1], a[0]))


def _address(hexed: str) -> tuple[str, int]:
    """``0100007F:1F90`` (a /proc/net/tcp address: each 32-bit word in the host's byte order) as
    ``("127.0.0.1", 8080)``; IPv6 as ``("::1", 8080)``."""
    import ipaddress

    host, port = hexed.split(":")
    raw = bytes.fromhex(host)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw)), int(port, 16)
