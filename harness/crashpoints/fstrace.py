"""The file tracer: a program (``python -m harness.crashpoints.fstrace``) that ptraces a pod and stops it
before each durable file operation on its data directory, and keeps what a power loss would leave.

Why a program of its own, with ptrace: the harness holds a PostgreSQL commit in its proxy and a
downstream call in its sink, but a server that keeps its state in files writes them itself, with
system calls nobody stands between. Tracing those calls from outside (as strace and ALICE do) needs
no change to the server. ptrace ties every tracee to one tracer thread, which must not also run the
harness's event loop; so the tracer is a process, spoken to in JSON lines on its standard input and
output (:mod:`harness.crashpoints.fsholds` is the harness's side). The tracees are seized with
``PTRACE_O_EXITKILL``: a tracer that dies takes them down with it, never leaving them stopped.

What it reports: before each durable operation on a watched path (its *entry*), the tracee is kept
stopped and the operation sent as an event: ``create`` (a name made: a file, a directory, a hard or
symbolic link, a FIFO; an open with ``O_TMPFILE`` names its directory), ``truncate`` (a file cut:
``ftruncate``, or an open with ``O_TRUNC``, which makes the file if it is not there, so that
``open(path, "w")`` is one point in every call), ``write``, ``fsync`` (``fdatasync`` and
``msync(MS_SYNC)`` of a mapped file too; of a directory; ``sync``/``syncfs``, labelled ``.``),
``rename`` and ``unlink``, each with its path relative to the data directory (a path outside it, the
other end of a rename, whole), a ``write``'s bytes where they are text of at most :data:`TEXT_SENT`
bytes (``text``: a file store's save names the notes it holds, by which the harness tells whose call it
is while two are at work), and what the crash states need of it (``info``: what it acts on or
makes, a truncation's length, whether it made the file, whether a file of the directory is mapped
shared and writable, so changes without a system call). The harness answers ``go`` (the operation
runs) or ``killed`` (it killed the pod there: the crash point). A kill at an operation's entry leaves
everything before it and nothing of it.

What a power loss leaves is :mod:`harness.crashpoints.durable`'s model, kept here as the pod runs: at
the return of each operation that changes it (the tracee still stopped, so nothing has moved since)
the tracer tells it what the call made durable (a file's bytes, a directory's names, everything) or
made anew (an inode, a rename across directories or across the data directory's edge, a hard link
from outside). ``rollback`` then makes the data directory what the model says.

Linux only; x86_64 and aarch64 system call numbers. Writes through ``mmap`` are not points, but their
``msync(MS_SYNC)`` is, and an fsync keeps them as every write.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import re
import select
import signal
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.crashpoints.durable import Durable, RollbackRefused

_libc = ctypes.CDLL(None, use_errno=True)
_ptrace = _libc.ptrace
_ptrace.restype = ctypes.c_long
_ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]

PTRACE_CONT = 7
PTRACE_SYSCALL = 24
PTRACE_SETOPTIONS = 0x4200
PTRACE_GETEVENTMSG = 0x4201
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_LISTEN = 0x4208
PTRACE_GET_SYSCALL_INFO = 0x420E

OPTIONS = (
    0x1  # TRACESYSGOOD: syscall stops are SIGTRAP | 0x80
    | 0x2  # TRACEFORK
    | 0x4  # TRACEVFORK
    | 0x8  # TRACECLONE: threads and children are traced from their first instruction
    | 0x10  # TRACEEXEC
    | 0x80  # TRACESECCOMP: a tracee that filters its system calls (``filtered``) stops at those only
    | 0x100000  # EXITKILL: if the tracer dies, every tracee is killed, never left stopped
)
EVENT_STOP = 128
EVENT_SECCOMP = 7
SYSCALL_ENTRY, SYSCALL_EXIT = 1, 2
STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
AT_FDCWD = -100
O_CREAT, O_TRUNC = 0o100, 0o1000
O_TMPFILE = 0o20000000
"""``__O_TMPFILE``, the same on both machines (``O_DIRECTORY``, the rest of ``O_TMPFILE``, is not)."""
RENAME_EXCHANGE = 2
AT_REMOVEDIR = 0x200
MS_SYNC = 4
TEXT_SENT = 65536
"""A write's bytes are sent (as ``text``) up to this many, whole or not at all: a part could leave out a
marker the rest names, and a point would be placed by it wrongly."""


class _SyscallInfo(ctypes.Structure):
    """``struct ptrace_syscall_info`` (Linux 5.3): the same on every architecture."""

    _fields_ = [
        ("op", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 3),
        ("arch", ctypes.c_uint32),
        ("instruction_pointer", ctypes.c_uint64),
        ("stack_pointer", ctypes.c_uint64),
        ("nr_or_rval", ctypes.c_uint64),
        ("args_or_error", ctypes.c_uint64 * 6),
        ("ret_data", ctypes.c_uint32),
    ]


# System call numbers: what each means to the tracer (None: nothing).
_X86_64 = {
    2: "open", 85: "creat", 257: "openat", 437: "openat2",
    1: "write", 18: "pwrite64", 20: "writev", 296: "pwritev", 328: "pwritev2",
    74: "fsync", 75: "fdatasync", 76: "truncate", 77: "ftruncate",
    26: "msync", 162: "sync", 306: "syncfs",
    82: "rename", 264: "renameat", 316: "renameat2",
    87: "unlink", 263: "unlinkat", 84: "rmdir", 83: "mkdir", 258: "mkdirat",
    86: "link", 265: "linkat", 88: "symlink", 266: "symlinkat", 133: "mknod", 259: "mknodat",
}  # fmt: skip
_AARCH64 = {
    56: "openat", 437: "openat2",
    64: "write", 68: "pwrite64", 66: "writev", 70: "pwritev", 287: "pwritev2",
    82: "fsync", 83: "fdatasync", 45: "truncate", 46: "ftruncate",
    227: "msync", 81: "sync", 267: "syncfs",
    38: "renameat", 276: "renameat2", 35: "unlinkat", 34: "mkdirat",
    37: "linkat", 36: "symlinkat", 33: "mknodat",
}  # fmt: skip
SYSCALLS = {"x86_64": _X86_64, "aarch64": _AARCH64}


def _check(result: int, what: str) -> int:
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


@dataclass(frozen=True)
class _Op:
    """A watched operation at its entry: what the harness is told, and what the model takes at its return."""

    kind: str
    """What the harness is told: create, truncate, write, fsync, rename or unlink."""
    labels: list[str]
    """Its paths, relative to the data directory (whole outside it)."""
    after: str | None = None
    """What the model takes when it has returned: ``opened`` (the file an open made, by the descriptor
    it returned), ``made`` (the inode made at ``paths[0]``), ``synced`` (the file or directory of
    ``fd``), ``mapped`` (the files of ``paths``, msync'd), ``synced_all``, ``renamed`` or ``exchanged``
    (``paths``: old, new), ``linked`` (``paths``: a file from outside, or not known, and its new name);
    None: nothing."""
    fd: int | None = None
    paths: tuple[str, ...] = ()
    """The paths the model reads at the return, as this process finds them."""
    info: dict[str, Any] | None = None
    """What the harness is told of its effect beyond its kind and paths (``harness.crashpoints.points.
    FileOp``): what it acts on or makes, a truncation's length, whether it made the file, an exchange."""


@dataclass
class _Stopped:
    """A tracee kept stopped at an operation's entry until the harness answers (or at its return)."""

    tid: int
    op: _Op


class Tracer:
    """Seizes pods, stops each before a durable operation on the watched directory, keeps the model."""

    def __init__(
        self, root: Path, shadow: Path, out: Any, seen_as: str | None = None, *, holds: bool = True
    ) -> None:
        self.host_root = root.resolve()
        self.root = Path(seen_as) if seen_as is not None else self.host_root
        """The watched directory as the tracee names it (a container's data mount), what its paths are
        matched against; the model keeps the files where the harness sees them (``host_root``)."""
        self.durable = Durable(self.host_root, shadow)
        self.out = out
        self.holds = holds
        """Whether each operation is sent to the harness to be held; without, the tracer only keeps what
        is durable (a run's power losses, ``--no-holds``)."""
        self.table = SYSCALLS.get(platform.machine())
        if self.table is None:
            raise SystemExit(f"fstrace: {platform.machine()} is not supported (x86_64, aarch64)")
        self.tracees: set[int] = set()
        self.stopped: dict[int, _Stopped] = {}
        """Event id -> the tracee kept at that operation's entry."""
        self.in_syscall: dict[int, _Stopped] = {}
        """tid -> the watched operation it is in (its exit is the model's business)."""
        self.events = 0
        self.pids: dict[int, int] = {}
        """tid -> its process (thread group), for /proc."""
        self.filtered: set[int] = set()
        """Tracees whose seccomp filter stops them at the watched system calls only
        (:mod:`harness.crashpoints.filtered`): resumed with ``PTRACE_CONT``, not at every system call."""
        self.last_entry: dict[int, int] = {}
        """tid -> the system call whose entry stop it reported last (its first seccomp stop follows it)."""
        self.baselined = False

    # -- commands
    def attach(self, pid: int) -> None:
        """Seize every thread of ``pid`` and of the processes it has started (a container's init and the
        server under it); what they start later, and new threads, follow by themselves."""
        if not self.baselined:
            self.durable.baseline()
            self.baselined = True
        for process in _tree(pid):
            try:
                threads = sorted(int(t) for t in os.listdir(f"/proc/{process}/task"))
            except FileNotFoundError:
                if process == pid:
                    raise
                continue  # a child that ended meanwhile
            for tid in threads:
                try:
                    _check(_ptrace(PTRACE_SEIZE, tid, None, ctypes.c_void_p(OPTIONS)), f"seize {tid}")
                    _check(_ptrace(PTRACE_INTERRUPT, tid, None, None), f"interrupt {tid}")
                except OSError as exc:
                    if exc.errno == errno.ESRCH:
                        continue  # a thread that ended meanwhile
                    raise
                self.tracees.add(tid)
                self.pids[tid] = process

    def answer(self, event: int, verdict: str) -> None:
        held = self.stopped.pop(event, None)
        if held is None:
            return
        if verdict == "go":
            self._go(held)
        # "killed": the harness killed the pod there; its exit comes through waitpid

    def _go(self, held: _Stopped) -> None:
        """Let an operation run; its exit is stopped at only where the model needs it (:meth:`_after`)."""
        if held.op.after is not None:
            self.in_syscall[held.tid] = held
        self._resume(held.tid)

    # -- the loop
    def reap(self) -> None:
        """Every stop that is waiting, handled."""
        while True:
            try:
                tid, status = os.waitpid(-1, os.WNOHANG | 0x40000000)  # __WALL
            except ChildProcessError:
                return
            if tid == 0:
                return
            self._handle(tid, status)

    def _handle(self, tid: int, status: int) -> None:
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            self._gone(tid)
            return
        if not os.WIFSTOPPED(status):
            return
        sig = os.WSTOPSIG(status)
        event = status >> 16
        if tid not in self.tracees:  # a new thread or child, auto-attached, at its first stop
            self.tracees.add(tid)
            self.pids.setdefault(tid, _tgid(tid))
        if sig == signal.SIGTRAP | 0x80:
            self._syscall_stop(tid)
        elif event == EVENT_SECCOMP:
            self._seccomp_stop(tid)
        elif event == EVENT_STOP:
            if sig in STOP_SIGNALS:  # a group-stop: stay stopped as the signal says, still traced
                self._ptrace_ok(PTRACE_LISTEN, tid)
            else:
                self._resume(tid)
        elif event:  # clone, fork, vfork, exec: carry on (the new task reports its own stop)
            if event in (1, 2, 3):
                new = ctypes.c_ulong()
                if _ptrace(PTRACE_GETEVENTMSG, tid, None, ctypes.byref(new)) == 0:
                    child = int(new.value)
                    self.pids[child] = self.pids.get(tid, tid) if event == 3 else child
                    if tid in self.filtered:  # a filter is inherited by threads and children
                        self.filtered.add(child)
            elif event == 4:  # exec: the thread group is this tid now
                self.pids[tid] = tid
            self._resume(tid)
        else:  # a signal for the tracee: deliver it
            self._resume(tid, sig)

    def _gone(self, tid: int) -> None:
        self.tracees.discard(tid)
        self.in_syscall.pop(tid, None)
        self.pids.pop(tid, None)
        self.filtered.discard(tid)
        self.last_entry.pop(tid, None)
        for event, held in list(self.stopped.items()):
            if held.tid == tid:
                del self.stopped[event]

    def _resume(self, tid: int, sig: int = 0) -> None:
        """On to its next stop: a filtered tracee's next watched system call (or the exit of the one it is
        in), any other's next system call."""
        every = tid not in self.filtered or tid in self.in_syscall
        self._ptrace_ok(PTRACE_SYSCALL if every else PTRACE_CONT, tid, sig)

    def _ptrace_ok(self, request: int, tid: int, data: int = 0) -> None:
        if _ptrace(request, tid, None, ctypes.c_void_p(data)) == -1 and ctypes.get_errno() == errno.ESRCH:
            self._gone(tid)  # killed meanwhile (SIGKILL ends a stop); its exit is reaped or was

    def _info(self, tid: int) -> _SyscallInfo | None:
        """The system call a tracee is stopped at; None (and it is resumed) when the kernel says none."""
        info = _SyscallInfo()
        size = ctypes.c_void_p(ctypes.sizeof(info))
        if _ptrace(PTRACE_GET_SYSCALL_INFO, tid, size, ctypes.byref(info)) <= 0:
            self._resume(tid)
            return None
        return info

    def _syscall_stop(self, tid: int) -> None:
        info = self._info(tid)
        if info is None:
            return
        if info.op == SYSCALL_EXIT:
            inside = self.in_syscall.pop(tid, None)
            if inside is not None:
                failed = bool(info.args_or_error[0])
                if not failed:
                    self._after(tid, inside, ctypes.c_int64(info.nr_or_rval).value)
            self._resume(tid)
            return
        if info.op != SYSCALL_ENTRY:
            self._resume(tid)
            return
        self.last_entry[tid] = int(info.nr_or_rval)
        self._entry(tid, info)

    def _seccomp_stop(self, tid: int) -> None:
        """A filtered tracee at a watched system call's entry. Its first such stop comes right after the
        entry stop of the same call (it was traced at every call until its filter was installed): that
        call was handled there, and from now on it is resumed to its next watched call only."""
        info = self._info(tid)
        if info is None:
            return
        first = tid not in self.filtered
        self.filtered.add(tid)
        if first and self.last_entry.pop(tid, None) == int(info.nr_or_rval):
            self._resume(tid)
            return
        self._entry(tid, info)

    def _entry(self, tid: int, info: _SyscallInfo) -> None:
        """A system call's entry: a watched operation stops there, and is sent to the harness."""
        name = self.table.get(int(info.nr_or_rval))  # type: ignore[union-attr]
        op = None if name is None else self._operation(tid, name, [int(a) for a in info.args_or_error])
        if op is None:
            self._resume(tid)
            return
        self.events += 1
        if not self.holds:  # only the model is kept: on to the operation's exit if it matters, unasked
            self._go(_Stopped(tid, op))
            return
        self.stopped[self.events] = _Stopped(tid, op)
        told = dict(op.info or {})
        if self._mapped(self.pids.get(tid, tid)):
            told["mapped"] = True
        message = {"event": self.events, "op": op.kind, "paths": op.labels, "call": name, "tid": tid}
        if name in ("write", "pwrite64") and op.kind == "write":
            text = _text(self.pids.get(tid, tid), int(info.args_or_error[1]), int(info.args_or_error[2]))
            if text is not None:
                message["text"] = text
        self._emit({**message, **({"info": told} if told else {})})

    def _mapped(self, pid: int) -> bool:
        """Whether a file of the watched directory is mapped shared and writable in ``pid``: its bytes may
        then change between two operations without a system call (SQLite's ``-shm``)."""
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", errors="replace") as maps:
            for line in maps:  # start-end perms offset device inode path
                fields = line.rstrip("\n").split(maxsplit=5)
                shared = len(fields) == 6 and fields[1][1] == "w" and fields[1][3] == "s"
                if shared and self._watched(fields[5]):
                    return True
        return False

    def _after(self, tid: int, held: _Stopped, rval: int) -> None:
        """An operation the tracee was let do has returned: the model takes what it made durable, or made
        anew (the tracee still stopped, so nothing has moved since)."""
        pid, op, model = self.pids.get(tid, tid), held.op, self.durable
        try:
            if op.after == "opened":
                model.created(os.stat(f"/proc/{pid}/fd/{rval}"))
            elif op.after == "made":
                model.created(os.lstat(op.paths[0]))
            elif op.after == "synced" and op.fd is not None:
                self._synced(f"/proc/{pid}/fd/{op.fd}")
            elif op.after == "mapped":
                for path in op.paths:
                    model.synced_file(path)
            elif op.after == "synced_all":
                model.synced_all()
            elif op.after in ("renamed", "exchanged"):
                model.renamed(*op.paths)
                if op.after == "exchanged":  # both names moved: each the other way too
                    model.renamed(op.paths[1], op.paths[0])
            elif op.after == "linked":
                model.linked(*op.paths)
        except OSError:
            pass  # the process, or the file, went away meanwhile

    def _synced(self, fd_path: str) -> None:
        """An fsync of a descriptor returned: a directory's names, or a file's bytes, are durable now."""
        info = os.stat(fd_path)
        if stat.S_ISDIR(info.st_mode):
            self.durable.synced_dir(self.host_root / self._rel(os.readlink(fd_path)))
        elif stat.S_ISREG(info.st_mode):
            self.durable.synced_file(fd_path)

    # -- what a system call is
    def _operation(self, tid: int, name: str, args: list[int]) -> _Op | None:
        """What a system call's entry is to the harness and the model; None: nothing (not a watched
        path, or nothing that lasts)."""
        pid = self.pids.get(tid, tid)
        if name in ("write", "pwrite64", "writev", "pwritev", "pwritev2", "fsync", "fdatasync", "ftruncate"):
            return self._on_fd(pid, name, _fd(args[0]), args[1])
        if name in ("open", "creat", "openat", "openat2"):
            return self._open(pid, name, args)
        if name in ("mkdir", "mkdirat", "symlink", "symlinkat", "mknod", "mknodat"):
            return self._made(pid, name, args)
        if name in ("truncate", "unlink", "rmdir", "unlinkat"):
            dirfd, addr = (_fd(args[0]), args[1]) if name == "unlinkat" else (AT_FDCWD, args[0])
            path = self._path(pid, dirfd, addr)
            if path is None:
                return None
            if name == "truncate":
                return _Op("truncate", [self._rel(path)], info={"size": args[1]})
            gone = name == "rmdir" or (name == "unlinkat" and args[2] & AT_REMOVEDIR)
            return _Op("unlink", [self._rel(path)], info={"node": "dir" if gone else "file"})
        if name in ("rename", "renameat", "renameat2"):
            return self._rename(pid, name, args)
        if name in ("link", "linkat"):
            return self._link(pid, name, args)
        if name == "msync":
            return self._msync(pid, args) if args[2] & MS_SYNC else None
        if name in ("sync", "syncfs"):
            return self._sync(pid, None if name == "sync" else _fd(args[0]))
        return None

    def _on_fd(self, pid: int, name: str, fd: int, length: int) -> _Op | None:
        """A write, truncation (to ``length``) or fsync through a descriptor."""
        path = self._fd_path(pid, fd)
        if path is None:
            return None
        kind = {"fsync": "fsync", "fdatasync": "fsync", "ftruncate": "truncate"}.get(name, "write")
        if kind == "write" and not os.path.isfile(_inside(pid, path)):
            return None
        info: dict[str, Any] = {}
        if kind == "truncate":
            info["size"] = length
        elif kind == "fsync":
            with contextlib.suppress(OSError):
                info["node"] = "dir" if stat.S_ISDIR(os.stat(f"/proc/{pid}/fd/{fd}").st_mode) else "file"
        return _Op(kind, [self._rel(path)], "synced" if kind == "fsync" else None, fd=fd, info=info)

    def _open(self, pid: int, name: str, args: list[int]) -> _Op | None:
        """An open that may make a file, or cut one."""
        if name == "open":
            dirfd, addr, flags = AT_FDCWD, args[0], args[1]
        elif name == "creat":
            dirfd, addr, flags = AT_FDCWD, args[0], O_CREAT | O_TRUNC
        elif name == "openat":
            dirfd, addr, flags = _fd(args[0]), args[1], args[2]
        else:  # openat2: flags are the first field of struct open_how
            dirfd, addr = _fd(args[0]), args[1]
            flags = int.from_bytes(_read(pid, args[2], 8) or b"\0" * 8, "little")
        if not flags & (O_CREAT | O_TRUNC | O_TMPFILE):
            return None
        path = self._path(pid, dirfd, addr)
        if path is None:
            return None
        if flags & O_TMPFILE:  # a file with no name yet, in that directory
            return _Op("create", [self._rel(path)], "opened", info={"node": "unnamed"})
        exists = os.path.lexists(_inside(pid, path))
        if flags & O_TRUNC:  # ``open(path, "w")``: one point whether the file was there or not
            made = {"size": 0, "new": not exists}
            return _Op("truncate", [self._rel(path)], None if exists else "opened", info=made)
        return None if exists else _Op("create", [self._rel(path)], "opened", info={"node": "file"})

    def _made(self, pid: int, name: str, args: list[int]) -> _Op | None:
        """A directory, a symbolic link, a FIFO or a device made (``mkfifo`` is ``mknodat``)."""
        if name in ("mkdir", "mknod"):
            dirfd, addr = AT_FDCWD, args[0]
        elif name == "symlink":
            dirfd, addr = AT_FDCWD, args[1]
        elif name == "symlinkat":
            dirfd, addr = _fd(args[1]), args[2]
        else:  # mkdirat, mknodat
            dirfd, addr = _fd(args[0]), args[1]
        path = self._path(pid, dirfd, addr)
        if path is None:
            return None
        node = "dir" if name.startswith("mkdir") else "symlink" if name.startswith("symlink") else "special"
        label = self._rel(path) + ("/" if node == "dir" else "")
        return _Op("create", [label], "made", paths=(self._host(pid, path),), info={"node": node})

    def _rename(self, pid: int, name: str, args: list[int]) -> _Op | None:
        """A rename with either end in the data directory (``RENAME_EXCHANGE``: both move)."""
        if name == "rename":
            old = self._path(pid, AT_FDCWD, args[0], watched=False)
            new = self._path(pid, AT_FDCWD, args[1], watched=False)
        else:
            old = self._path(pid, _fd(args[0]), args[1], watched=False)
            new = self._path(pid, _fd(args[2]), args[3], watched=False)
        if old is None or new is None or not (self._watched(old) or self._watched(new)):
            return None
        after = "exchanged" if name == "renameat2" and args[4] & RENAME_EXCHANGE else "renamed"
        hosts = (self._host(pid, old), self._host(pid, new))
        info: dict[str, Any] = {"exchange": True} if after == "exchanged" else {}
        with contextlib.suppress(OSError):
            mode = os.lstat(_inside(pid, old)).st_mode
            info["node"] = "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "special"
        return _Op("rename", [self._rel(old), self._rel(new)], after, paths=hosts, info=info)

    def _link(self, pid: int, name: str, args: list[int]) -> _Op | None:
        """A hard link made in the data directory: to a file from outside, the model takes it in."""
        if name == "link":
            old = self._path(pid, AT_FDCWD, args[0], watched=False)
            new = self._path(pid, AT_FDCWD, args[1])
        else:  # linkat(fd, "", ...) with AT_EMPTY_PATH names the descriptor's file: its path
            old = self._path(pid, _fd(args[0]), args[1], watched=False)
            new = self._path(pid, _fd(args[2]), args[3])
        if new is None:
            return None
        source = "" if old is None else self._descriptor(pid, old)
        if self._watched(source):  # another name of a file the model knows
            return _Op("create", [self._rel(new)], info={"node": "link"})
        named = source and not source.endswith(" (deleted)")  # an O_TMPFILE's has no name to go back to
        hosts = (self._host(pid, source) if named else "", self._host(pid, new))
        return _Op("create", [self._rel(new)], "linked", paths=hosts, info={"node": "link"})

    def _msync(self, pid: int, args: list[int]) -> _Op | None:
        """An ``msync(MS_SYNC)``: an fsync of the watched files mapped in its range."""
        start, end = args[0], args[0] + args[1]
        mapped: list[str] = []
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", errors="replace") as maps:
            for line in maps:  # start-end perms offset device inode path
                fields = line.rstrip("\n").split(maxsplit=5)
                low, _, high = fields[0].partition("-")
                path = fields[5] if len(fields) == 6 else ""
                overlaps = int(low, 16) < end and start < int(high, 16)
                if overlaps and self._watched(path) and path not in mapped:
                    mapped.append(path)
        if not mapped:
            return None
        hosts = tuple(self._host(pid, path) for path in mapped)
        labels = [self._rel(path) for path in mapped]
        return _Op("fsync", labels, "mapped", paths=hosts, info={"node": "file"})

    def _sync(self, pid: int, fd: int | None) -> _Op | None:
        """A ``sync`` (``fd`` None), or a ``syncfs`` of the data directory's file system: everything."""
        if fd is not None:
            try:
                if os.stat(f"/proc/{pid}/fd/{fd}").st_dev != os.stat(self.host_root).st_dev:
                    return None
            except OSError:
                return None
        return _Op("fsync", ["."], "synced_all", info={"node": "all"})

    def _host(self, pid: int, path: str) -> str:
        """A path the tracee names, as this process finds it after the tracee is gone: the data
        directory's through its host path, any other through the tracee's root (a chroot's; a
        container's renames cannot leave its data mount)."""
        if self._watched(path):
            return str(self.host_root / self._rel(path))
        root = "/"
        with contextlib.suppress(OSError):
            root = os.readlink(f"/proc/{pid}/root")
        return os.path.join(root, path.lstrip("/"))

    def _descriptor(self, pid: int, path: str) -> str:
        """The file a path names where it names a descriptor (``/proc/self/fd/3``, as a file made with
        ``O_TMPFILE`` is linked): the descriptor's file's path; else the path."""
        match = re.fullmatch(r"/proc/[^/]+/fd/([0-9]+)", path)
        if match is not None:
            with contextlib.suppress(OSError):
                return os.readlink(f"/proc/{pid}/fd/{match[1]}")
        return path

    def _watched(self, path: str) -> bool:
        return path == str(self.root) or path.startswith(str(self.root) + os.sep)

    def _rel(self, path: str) -> str:
        return os.path.relpath(path, self.root) if self._watched(path) else path

    def _fd_path(self, pid: int, fd: int) -> str | None:
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            return None
        return path if self._watched(path) else None

    def _path(self, pid: int, dirfd: int, addr: int, *, watched: bool = True) -> str | None:
        raw = _read_string(pid, addr)
        if raw is None:
            return None
        try:
            text = os.fsdecode(raw)
            base = (
                os.readlink(f"/proc/{pid}/cwd")
                if dirfd == AT_FDCWD
                else os.readlink(f"/proc/{pid}/fd/{dirfd}")
            )
        except OSError:
            return None
        path = os.path.normpath(os.path.join(base, text))
        parent = os.path.dirname(path)
        with contextlib.suppress(OSError):  # the directory resolved (links on the way), the name as given
            root = f"/proc/{pid}/root"  # as the tracee sees it: its own mounts (a container's)
            resolved = os.path.realpath(root + parent)
            if resolved == root or resolved.startswith(root + "/"):
                path = os.path.join(resolved[len(root) :] or "/", os.path.basename(path))
        if watched and not self._watched(path):
            return None
        return path

    def _emit(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()


def _inside(pid: int, path: str) -> str:
    """A path the tracee names, where this process finds it (through the tracee's root: a container's)."""
    return f"/proc/{pid}/root{path}"


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it, parents first (``/proc/<pid>/task/<tid>/children``)."""
    found, todo = [], [pid]
    while todo:
        process = todo.pop(0)
        found.append(process)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{process}/task"):
                children = Path(f"/proc/{process}/task/{task}/children").read_text().split()
                todo += [int(c) for c in children if int(c) not in found]
    return found


def _fd(value: int) -> int:
    return ctypes.c_int(value & 0xFFFFFFFF).value


def _tgid(tid: int) -> int:
    try:
        for line in Path(f"/proc/{tid}/status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return tid


def _read(pid: int, address: int, size: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address)
            return mem.read(size)
    except (OSError, OverflowError, ValueError):
        return None


def _text(pid: int, address: int, size: int) -> str | None:
    """A write's bytes as text, whole: None where they are more than :data:`TEXT_SENT`, unreadable, or not
    UTF-8 (a database's pages)."""
    if size > TEXT_SENT:
        return None
    data = _read(pid, address, size)
    if data is None or len(data) != size:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _read_string(pid: int, address: int, limit: int = 4096) -> bytes | None:
    if address == 0:
        return None
    data = _read(pid, address, limit)
    if data is None:
        # The string may end near the end of a page that the next is not mapped after: read to the page's end.
        page = 4096 - address % 4096
        data = _read(pid, address, page)
        if data is None:
            return None
    end = data.find(b"\0")
    return data if end < 0 else data[:end]


def may_trace() -> str | None:
    """Whether this process may ptrace another of its user's: None, or why not (what the machine said).
    Tried on a child of its own, before any pod: yama, a container's seccomp profile or missing
    capabilities all answer here, once."""
    child = os.fork()
    if child == 0:  # the child waits to be seized, then ends
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        if _ptrace(PTRACE_SEIZE, child, None, ctypes.c_void_p(OPTIONS)) == -1:
            return os.strerror(ctypes.get_errno())
        return None
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def serve(root: Path, shadow: Path, seen_as: str | None = None, *, holds: bool = True) -> None:
    """The tracer's loop: commands on stdin (JSON lines), events and answers on stdout."""
    refused = may_trace()
    if refused is not None:
        print(json.dumps({"refused": f"ptrace is not allowed here ({refused})"}), flush=True)
        return
    tracer = Tracer(root, shadow, sys.stdout, seen_as, holds=holds)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    commands = sys.stdin.buffer
    pending = b""
    os.set_blocking(commands.fileno(), False)
    tracer._emit({"ready": os.getpid()})
    while True:
        tracer.reap()
        readable, _, _ = select.select([commands.fileno(), wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        if commands.fileno() not in readable:
            continue
        chunk = os.read(commands.fileno(), 65536)
        if not chunk:
            return  # the harness is gone: EXITKILL ends the tracees with us
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            command = json.loads(line)
            what = command["cmd"]
            if what == "attach":
                try:
                    tracer.attach(int(command["pid"]))
                    tracer._emit({"attached": command["pid"]})
                except OSError as exc:
                    tracer._emit({"error": f"cannot trace pid {command['pid']}: {exc.strerror or exc}"})
            elif what in ("go", "killed"):
                tracer.answer(int(command["event"]), what)
            elif what == "rollback":
                tracer.reap()
                try:
                    changed = tracer.durable.rollback()
                    tracer._emit({"rolled_back": changed})
                except RollbackRefused as exc:
                    tracer._emit({"error": str(exc)})
                except OSError as exc:
                    why = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
                    tracer._emit({"error": f"cannot roll the data directory back: {why}"})
            elif what == "quit":
                return


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.crashpoints.fstrace")
    parser.add_argument("--watch", required=True, type=Path, help="the data directory")
    parser.add_argument("--shadow", required=True, type=Path, help="where durable bytes are kept")
    parser.add_argument(
        "--seen-as", help="the data directory's path as the tracee sees it (a container's mount)"
    )
    parser.add_argument(
        "--no-holds", action="store_true", help="keep what is durable only; send no operation to be held"
    )
    args = parser.parse_args()
    serve(args.watch, args.shadow, args.seen_as, holds=not args.no_holds)


if __name__ == "__main__":
    main()
