"""The embedded *process* runtime: a target's command as a pod.

A pod is the unit a fault injector kills and a supervisor restarts. Here it is
the target's command as a child process in its own session (so a kill takes
its whole process group, as a container kill would). Every pod ever started is
tracked until it is reaped, and an ``atexit`` hook kills any that remain, so no
child outlives the harness even on an unexpected exit. Should the harness itself
be SIGKILLed, the kernel kills the direct child (``PR_SET_PDEATHSIG``) and the
watchdog (:mod:`harness.pods.watchdog`) the rest of its group and descendants.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import stat
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from harness.errors import TargetStartError
from harness.pods.watchdog import guard
from harness.proctree import Process, becoming, descendants, die_with_parent, signal_if_same

STDIO_LINE_LIMIT = 64 << 20
"""The longest line a stdio server may write (one JSON-RPC message); asyncio's default is 64 KiB."""
_live_groups: set[int] = set()


def _kill_leftovers() -> None:
    for pgid in list(_live_groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    _live_groups.clear()


atexit.register(_kill_leftovers)


def append_log(path: Path) -> IO[bytes]:
    """A pod's log opened to append its output. What runs in the run directory may have put a link (to
    a file outside the run), a FIFO or a device in its place, or a link in place of its folder: that is
    removed first, and the file opened without following a link, so the harness never writes (nor
    blocks) outside the run directory through one."""
    folder = path.parent
    if folder.is_symlink():
        folder.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(path.lstat().st_mode):
            path.unlink()
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644), "ab")


async def start_logged(
    argv: Sequence[str], log_path: Path, *, user: tuple[int, int] | None = None
) -> asyncio.subprocess.Process:
    """Start a program the harness runs beside the pods (nginx, PostgreSQL) as it starts a pod: in a
    session of its own, killed with the harness, no stdin, its output appended to ``log_path`` (the
    child keeps the file open; ours closes once it started); ``user``: the (uid, gid) to run it as."""
    preexec = die_with_parent if user is None else becoming(*user, die_with_parent_too=True)
    with open(log_path, "ab") as log:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )


async def wait_up(
    proc: asyncio.subprocess.Process,
    name: str,
    state: str,
    up: Callable[[], Awaitable[bool]],
    *,
    timeout_s: float,
    poll_s: float,
    tail: Callable[[], str],
) -> None:
    """Until ``up()`` (one try: is it listening, does it answer) says a program started by
    :func:`start_logged` is in ``state``, polling every ``poll_s``; TargetStartError with ``tail()``
    (its log's last lines) if it exits first or is not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.returncode is not None:
            raise TargetStartError(f"{name} exited at start", details=tail())
        if await up():
            return
        if time.monotonic() > deadline:
            raise TargetStartError(f"{name} not {state} in {timeout_s:g}s", details=tail())
        await asyncio.sleep(poll_s)


class ProcessPod:
    """One pod of the process runtime, restartable any number of times."""

    def __init__(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path, *, stdio: bool = False
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self.stdio_pipes = stdio
        """A stdio server: its stdin and stdout are the MCP channel (see :meth:`stdio`), stderr the log."""
        self.starts = 0
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def launch_through(self, launcher: Sequence[str]) -> None:
        """Start the command through ``launcher`` from now on (``launcher -- argv``), which must exec it
        with the same pid: the file tracer's seccomp launcher. A command that cannot be found is left as it
        is, so its start fails with its own name; one already launched through it, too."""
        if shutil.which(self.argv[0]) is not None and self.argv[: len(launcher)] != list(launcher):
            self.argv = [*launcher, "--", *self.argv]

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> int:
        """Start the command; returns its pid. The log file collects every start's output."""
        if self.running:
            raise RuntimeError(f"pod {self.name} is already running")
        self.starts += 1
        log: IO[bytes]
        with append_log(self.log_path) as log:
            log.write(f"--- {self.name}: start #{self.starts} at {time.strftime('%H:%M:%S')} ---\n".encode())
            log.flush()
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self.argv,
                    env=self.env,
                    stdin=asyncio.subprocess.PIPE if self.stdio_pipes else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE if self.stdio_pipes else log,
                    stderr=log if self.stdio_pipes else asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                    limit=STDIO_LINE_LIMIT,
                )
            except OSError as exc:
                raise TargetStartError(
                    f"cannot start target command {self.argv[0]!r}: {exc.strerror or exc} "
                    "(check target.command in the scenario)"
                ) from None
        _live_groups.add(self._proc.pid)
        guard.group(self._proc.pid)
        return self._proc.pid

    def stdio(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The current process's stdout and stdin, for a stdio server."""
        if self._proc is None or self._proc.stdout is None or self._proc.stdin is None:
            raise RuntimeError(f"pod {self.name} has no stdio pipes (not a stdio target, or not started)")
        return self._proc.stdout, self._proc.stdin

    def kill(self, sig: str = "SIGKILL") -> bool:
        """Signal the pod's whole process tree (SIGKILL unless told); False if it was not running."""
        return self._signal(signal.Signals[sig])

    def pause(self) -> bool:
        """Freeze the pod (SIGSTOP to its tree): connections stay open, nothing is served."""
        return self._signal(signal.SIGSTOP)

    def resume(self) -> bool:
        return self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> bool:
        """Signal the process group and every descendant, as a container's cgroup would take them all.

        A descendant may have left the group (its own session: a daemonising server); it is
        still a descendant while its parent lives, so it is found by walking the tree.
        """
        if not self.running:
            return False
        assert self._proc is not None
        escaped = descendants(self._proc.pid)
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            return False
        for process in escaped:
            signal_if_same(process, sig)
        return True

    async def wait(self) -> int:
        """Wait for the current process to exit and reap it; returns its return code."""
        assert self._proc is not None, "pod was never started"
        rc = await self._proc.wait()
        # Anything the target forked into its group goes with it, as in a container.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        if self._proc.pid in _live_groups:
            _live_groups.discard(self._proc.pid)
            guard.ungroup(self._proc.pid)
        return rc

    async def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; reaps the process."""
        if self._proc is None:
            return
        escaped: list[Process] = []
        if self._proc.returncode is None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()  # a stdio server's cue to shut down, as a host gives it
            escaped = descendants(self._proc.pid)
            self._signal(signal.SIGCONT)  # a paused pod cannot act on SIGTERM
            self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), timeout)
            except TimeoutError:
                self.kill()
        await self.wait()
        for process in escaped:  # orphaned by now, so no longer found as descendants
            signal_if_same(process, signal.SIGKILL)

    def identity(self) -> dict[str, str]:
        return {}

    def log_tail(self, lines: int = 20) -> str:
        try:
            if not stat.S_ISREG(self.log_path.lstat().st_mode):  # a FIFO put there would block the read
                return "(no log)"
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
