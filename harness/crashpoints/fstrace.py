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
stopped and the operation sent as an event: ``create`` (a file or directory made), ``truncate`` (a
file cut: ``ftruncate``, or an open with ``O_TRUNC``, which makes the file if it is not there, so
that ``open(path, "w")`` is one point in every call), ``write``, ``fsync`` (``fdatasync`` too; of
a file or a directory), ``rename`` and ``unlink``, each with its path relative to the data
directory. The harness answers ``go`` (the operation runs) or ``killed`` (it killed the pod there:
the crash point). A kill at an operation's entry leaves everything before it and nothing of it.

What a power loss leaves (the model, as LazyFS and ALICE take it): a file's contents as of its last
``fsync``/``fdatasync``; a directory's names as of its last ``fsync``; everything as it was when the
tracer first attached (or last rolled back). The tracer keeps that as it goes: at the exit of each
``fsync`` of a file it copies the file's bytes (the tracee still stopped, so they are the bytes the
call made durable), at each ``fsync`` of a directory it takes its names. ``rollback`` then rebuilds
the data directory as that: names that were never made durable are gone, and files hold their
durable bytes. Contents are kept per file (inode), so a rename carries them and a name made durable
before its file's bytes were holds none of them.

Linux only; x86_64 and aarch64 system call numbers; regular writes (``mmap``'d writes are not seen).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import platform
import select
import shutil
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    82: "rename", 264: "renameat", 316: "renameat2",
    87: "unlink", 263: "unlinkat", 84: "rmdir", 83: "mkdir", 258: "mkdirat",
}  # fmt: skip
_AARCH64 = {
    56: "openat", 437: "openat2",
    64: "write", 68: "pwrite64", 66: "writev", 70: "pwritev", 287: "pwritev2",
    82: "fsync", 83: "fdatasync", 45: "truncate", 46: "ftruncate",
    38: "renameat", 276: "renameat2", 35: "unlinkat", 34: "mkdirat",
}  # fmt: skip
SYSCALLS = {"x86_64": _X86_64, "aarch64": _AARCH64}


def _check(result: int, what: str) -> int:
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


@dataclass
class _Stopped:
    """A tracee kept stopped at an operation's entry until the harness answers."""

    tid: int
    op: str
    fd: int | None = None


@dataclass
class Durable:
    """What a power loss would leave of the watched directory: names per directory, bytes per file."""

    root: Path
    shadow: Path
    names: dict[str, dict[str, tuple[int, bool]]] = field(default_factory=dict)
    """Directory (relative, ``.`` the root) -> name -> (content key, is a directory), as last made durable."""
    keys: dict[int, int] = field(default_factory=dict)
    """A live inode -> the key its durable bytes are kept under (a new key when an inode is reused)."""
    _next: int = 0

    def baseline(self) -> None:
        """Everything as it is now is durable (the first attach, or after a rollback)."""
        shutil.rmtree(self.shadow, ignore_errors=True)
        self.shadow.mkdir(parents=True)
        self.names.clear()
        self.keys.clear()
        for directory, dirs, files in os.walk(self.root):
            rel = os.path.relpath(directory, self.root)
            listing: dict[str, tuple[int, bool]] = {}
            for name in dirs:
                listing[name] = (self._key(os.lstat(os.path.join(directory, name)).st_ino, new=True), True)
            for name in files:
                path = os.path.join(directory, name)
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode):
                    continue
                key = self._key(info.st_ino, new=True)
                listing[name] = (key, False)
                shutil.copyfile(path, self.shadow / str(key))
            self.names[rel] = listing

    def _key(self, ino: int, *, new: bool = False) -> int:
        if new or ino not in self.keys:
            self._next += 1
            self.keys[ino] = self._next
        return self.keys[ino]

    def created(self, ino: int) -> None:
        """A file or directory was made: its inode, if reused, is another file's now."""
        self._key(ino, new=True)

    def synced_file(self, fd_path: str, ino: int) -> None:
        """A file's fsync returned: its bytes now are durable."""
        shutil.copyfile(fd_path, self.shadow / str(self._key(ino)))

    def synced_dir(self, directory: Path) -> None:
        """A directory's fsync returned: its names now are durable (with the files they name)."""
        rel = os.path.relpath(directory, self.root)
        listing: dict[str, tuple[int, bool]] = {}
        with os.scandir(directory) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
                    listing[entry.name] = (self._key(info.st_ino), stat.S_ISDIR(info.st_mode))
        self.names[rel] = listing

    def rollback(self) -> list[str]:
        """Rebuild the directory as a power loss would leave it; the paths whose state changed."""
        before = _state(self.root)
        for entry in list(self.root.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self._rebuild(".", self.root)
        after = _state(self.root)
        self.baseline()
        return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))

    def _rebuild(self, rel: str, directory: Path) -> None:
        for name, (key, is_dir) in self.names.get(rel, {}).items():
            target = directory / name
            if is_dir:
                target.mkdir()
                self._rebuild(os.path.normpath(os.path.join(rel, name)), target)
            else:
                durable = self.shadow / str(key)
                if durable.exists():
                    shutil.copyfile(durable, target)
                else:
                    target.touch()  # the name was made durable, its bytes never were


def _state(root: Path) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = Path(path).read_bytes()
    return found


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
        if held.op == "fsync" or (held.op in ("create", "truncate") and held.fd == -1):
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
        kind, paths, fd = op
        self.events += 1
        if not self.holds:  # only the model is kept: on to the operation's exit if it matters, unasked
            self._go(_Stopped(tid, kind, fd))
            return
        self.stopped[self.events] = _Stopped(tid, kind, fd)
        self._emit({"event": self.events, "op": kind, "paths": paths, "call": name, "tid": tid})

    def _after(self, tid: int, inside: _Stopped, rval: int) -> None:
        """An operation the tracee was let do has returned: what it made durable, or made anew."""
        pid = self.pids.get(tid, tid)
        try:
            if inside.op == "fsync" and inside.fd is not None:
                fd_path = f"/proc/{pid}/fd/{inside.fd}"
                info = os.stat(fd_path)
                if stat.S_ISDIR(info.st_mode):
                    self.durable.synced_dir(self.host_root / self._rel(os.readlink(fd_path)))
                elif stat.S_ISREG(info.st_mode):
                    self.durable.synced_file(fd_path, info.st_ino)
            elif (
                inside.op in ("create", "truncate") and rval >= 0 and inside.fd == -1
            ):  # an open that made one
                self.durable.created(os.stat(f"/proc/{pid}/fd/{rval}").st_ino)
        except OSError:
            pass  # the process went away meanwhile

    # -- what a system call is
    def _operation(self, tid: int, name: str, args: list[int]) -> tuple[str, list[str], int | None] | None:
        pid = self.pids.get(tid, tid)
        if name in ("write", "pwrite64", "writev", "pwritev", "pwritev2", "fsync", "fdatasync", "ftruncate"):
            path = self._fd_path(pid, _fd(args[0]))
            if path is None:
                return None
            kind = {"fsync": "fsync", "fdatasync": "fsync", "ftruncate": "truncate"}.get(name, "write")
            if kind == "write" and not os.path.isfile(_inside(pid, path)):
                return None
            return kind, [self._rel(path)], _fd(args[0])
        if name in ("open", "creat", "openat", "openat2"):
            if name == "open":
                dirfd, addr, flags = AT_FDCWD, args[0], args[1]
            elif name == "creat":
                dirfd, addr, flags = AT_FDCWD, args[0], O_CREAT | O_TRUNC
            elif name == "openat":
                dirfd, addr, flags = _fd(args[0]), args[1], args[2]
            else:  # openat2: flags are the first field of struct open_how
                dirfd, addr = _fd(args[0]), args[1]
                flags = int.from_bytes(_read(pid, args[2], 8) or b"\0" * 8, "little")
            if not flags & (O_CREAT | O_TRUNC):
                return None
            path = self._path(pid, dirfd, addr)
            if path is None:
                return None
            exists = os.path.lexists(_inside(pid, path))
            if flags & O_TRUNC:  # ``open(path, "w")``: one point whether the file was there or not
                return "truncate", [self._rel(path)], None if exists else -1
            return None if exists else ("create", [self._rel(path)], -1)
        if name in ("mkdir", "mkdirat"):
            dirfd, addr = (AT_FDCWD, args[0]) if name == "mkdir" else (_fd(args[0]), args[1])
            path = self._path(pid, dirfd, addr)
            return None if path is None else ("create", [self._rel(path) + "/"], None)
        if name == "truncate":
            path = self._path(pid, AT_FDCWD, args[0])
            return None if path is None else ("truncate", [self._rel(path)], None)
        if name in ("unlink", "rmdir", "unlinkat"):
            dirfd, addr = (_fd(args[0]), args[1]) if name == "unlinkat" else (AT_FDCWD, args[0])
            path = self._path(pid, dirfd, addr)
            return None if path is None else ("unlink", [self._rel(path)], None)
        if name in ("rename", "renameat", "renameat2"):
            if name == "rename":
                old = self._path(pid, AT_FDCWD, args[0], watched=False)
                new = self._path(pid, AT_FDCWD, args[1], watched=False)
            else:
                old = self._path(pid, _fd(args[0]), args[1], watched=False)
                new = self._path(pid, _fd(args[2]), args[3], watched=False)
            if old is None or new is None or not (self._watched(old) or self._watched(new)):
                return None
            return "rename", [self._rel(old), self._rel(new)], None
        return None

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
                except OSError as exc:
                    tracer._emit({"error": f"cannot roll the data directory back: {exc.strerror or exc}"})
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
