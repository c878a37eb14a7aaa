"""The launcher of a traced process pod: ``python -m harness.crashpoints.filtered -- COMMAND...``.

The file tracer stops a tracee at every system call it makes (``PTRACE_SYSCALL``), and a server
makes many more than it writes files: a call to a small SQLite server took ten times as long
traced. A seccomp filter lets the kernel do the sorting, as ``strace --seccomp-bpf`` does: it
answers ``SECCOMP_RET_TRACE`` for the system calls the tracer watches (the numbers of
:data:`harness.crashpoints.fstrace.SYSCALLS`) and lets every other one through untouched, so
the tracee stops only there (``PTRACE_O_TRACESECCOMP``) and is resumed with ``PTRACE_CONT``.

A filter must be installed by the process itself, and a ``RET_TRACE`` with no tracer attached
fails the call (``ENOSYS``). So the launcher waits until the tracer has seized it (the pod's
supervisor attaches it as soon as it starts), then installs the filter and execs the command:
the server runs under it with the same pid, and so do its threads and children. Should no
tracer come within :data:`WAIT_S`, the command runs unfiltered (and untraced). A container's
processes are not started by the harness: they are traced at every system call, as before.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys
import time

from harness.crashpoints.fstrace import SYSCALLS

WAIT_S = 10.0
"""How long the launcher waits to be seized before it runs the command untraced (``--wait-s``)."""
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
"""``AUDIT_ARCH_*`` of each supported machine: a system call of another ABI is let through."""
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_ALLOW, RET_TRACE = 0x7FFF0000, 0x7FF00000
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
"""Classic BPF: load a word of ``struct seccomp_data`` (nr at 0, arch at 4), jump if equal, return."""


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter, instruction by instruction (code, jump if true, jump if false, k): trace the watched
    system calls of ``machine``'s ABI, allow everything else."""
    watched = sorted(SYSCALLS[machine])
    n = len(watched)
    instructions = [(LD_W_ABS, 0, 0, 4), (JEQ_K, 0, n + 1, ARCH[machine]), (LD_W_ABS, 0, 0, 0)]
    for i, nr in enumerate(watched):
        instructions.append((JEQ_K, n - i, 0, nr))  # to the RET_TRACE after the RET_ALLOW
    return [*instructions, (RET_K, 0, 0, RET_ALLOW), (RET_K, 0, 0, RET_TRACE)]


def install(machine: str) -> None:
    """Install the filter on this process (it is inherited across exec, by threads and children)."""
    code = b"".join(struct.pack("=HBBI", *instruction) for instruction in program(machine))
    buffer = ctypes.create_string_buffer(code, len(code))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    for args in (
        (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
        (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
    ):
        if libc.prctl(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl: {os.strerror(err)}")


def traced() -> bool:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("TracerPid:"):
                return line.split()[1] != "0"
    return False


def main() -> None:
    command = sys.argv[1:]
    wait_s = WAIT_S
    if command[:1] == ["--wait-s"] and len(command) > 1:
        wait_s, command = float(command[1]), command[2:]
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        sys.exit("usage: python -m harness.crashpoints.filtered [--wait-s S] -- COMMAND [ARG...]")
    deadline = time.monotonic() + wait_s
    while not traced() and time.monotonic() < deadline:
        time.sleep(0.001)
    machine = platform.machine()
    if traced() and machine in ARCH:
        install(machine)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
